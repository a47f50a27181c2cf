"""`servebench cluster`: a leader that queues scenario runs and dispatches them to
followers (Dask workers), the followers, and the commands that talk to the leader.

    up         leader + a Dask LocalCluster of N followers on this machine, one command
    leader     a leader on an existing Dask scheduler (followers join that scheduler)
    follower   a follower: a Dask worker that runs one benchmark at a time
    submit, status, cancel, results   talk to a leader's API
    simulate   the scheduling policies on a job trace (servebench/cli/cluster_simulate.py)
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servebench.cli import cluster_simulate
from servebench.cli.usage import fail, say
from servebench.cli.values import BadValue, Host, Number, OutputDir, Port, ScenarioFile, Url
from servebench.common.limits import MAX_GPUS

app = typer.Typer(
    help="Queue scenario runs on a leader and run them on followers.", no_args_is_help=True
)
# The policy simulator is its own module; it belongs to this group.
app.command(name="simulate")(cluster_simulate.simulate)
console = Console(width=None if sys.stdout.isatty() else 160)

DEFAULT_STATE_DIR = Path(".servebench-cluster")
# Each local follower is a process that runs one benchmark at a time: more than a few per
# core only makes them disturb each other's measurements.
MAX_LOCAL_FOLLOWERS = 4 * (os.cpu_count() or 1)
DEFAULT_RESULTS = Path("results")

PolicyOption = Annotated[
    str,
    typer.Option(
        help="two-tier (least queued work + shortest job first), two-tier-preemptive "
        "(+ pauses a long job at a trial boundary for a much shorter one), fifo-roundrobin "
        "or fifo-leastloaded"
    ),
]
StateDirOption = Annotated[
    Path, typer.Option(help="the leader's job store (SQLite) lives here", parser=OutputDir())
]
ResultsOption = Annotated[
    Path, typer.Option(help="where finished jobs' result directories land", parser=OutputDir())
]
HostOption = Annotated[
    str, typer.Option(help="API address (off loopback only with a token)", parser=Host())
]
PortOption = Annotated[int, typer.Option(help="API port", parser=Port())]
# A Dask scheduler's address, as `distributed` takes it.
SCHEDULER = Url(("tcp", "tls", "ws", "wss", "ucx"), port=True)
TokenOption = Annotated[
    str | None,
    typer.Option(
        help="API token (default $SERVEBENCH_CLUSTER_TOKEN)",
        envvar="SERVEBENCH_CLUSTER_TOKEN",
        show_envvar=False,
    ),
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--leader-url",
        help="the leader's API (default $SERVEBENCH_CLUSTER_URL or http://127.0.0.1:8642)",
        parser=Url(),
    ),
]
MaxWaitOption = Annotated[
    float,
    typer.Option(
        help="two-tier(-preemptive): a job waiting this long goes ahead (seconds)",
        parser=cluster_simulate.MAX_WAIT,
    ),
]
GpusOption = Number(int, ge=0, le=MAX_GPUS)


def _policy(name: str, max_wait_s: float) -> Any:
    from servebench.cluster.policy import make_policy, options_of

    try:
        options = {"max_wait_s": max_wait_s} if "max_wait_s" in options_of(name) else {}
        return make_policy(name, **options)
    except ValueError as err:
        raise fail(f"--policy: {err}") from None


def _labels(items: list[str]) -> dict[str, str]:
    from servebench.cluster.follower import parse_labels

    try:
        return parse_labels(items)
    except ValueError as err:
        raise fail(f"--label: {err}") from None


def _check_bind(host: str, token: str | None) -> None:
    from servebench.cluster.api import BindError, check_bind

    try:
        check_bind(host, token)
    except BindError as err:
        raise fail(str(err)) from None


def _logging() -> None:
    """The leader's and followers' events, one line each; Dask's own only when it warns
    (the environment variable reaches the follower processes a LocalCluster spawns)."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    import dask

    dask.config.refresh()
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr
    )
    logging.getLogger("distributed").setLevel(
        logging.getLevelName(os.environ["DASK_LOGGING__DISTRIBUTED"].upper())
    )
    logging.getLogger("servebench.cluster").setLevel(logging.INFO)


async def _until_signal() -> int:
    """Wait for SIGINT or SIGTERM; the handlers are removed again afterwards, so a
    second Ctrl-C while shutting down interrupts as usual."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future[int] = loop.create_future()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, lambda s=signum: got.done() or got.set_result(s))
    try:
        return await got
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


@contextmanager
def _state(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's lock (before any cluster starts: a second leader on one
    store is refused in one line)."""
    from servebench.cluster.leader import LeaderError, StateLock

    lock = StateLock(state_dir)
    try:
        lock.acquire()
    except LeaderError as err:
        raise fail(str(err)) from None
    try:
        yield
    finally:
        lock.release()


async def _serve(
    client: Any, *, policy: Any, state_dir: Path, results: Path, host: str, port: int,
    token: str | None, scheduler: str,
) -> None:  # fmt: skip
    """Run a leader and its API on `client` until SIGINT/SIGTERM, then close it so the
    store says what a restart should do."""
    from aiohttp import web

    from servebench.cluster.api import make_app
    from servebench.cluster.leader import STORE_FILE, Leader
    from servebench.cluster.store import JobStore, StoreError

    try:
        store = JobStore(state_dir / STORE_FILE)
    except StoreError as err:
        raise fail(str(err)) from None
    leader = Leader(store, policy, client, results)
    try:
        requeued = await leader.start()
        runner = web.AppRunner(make_app(leader, token), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as err:
            await leader.close()
            raise fail(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
        console.print(
            escape(
                f"leader: http://{host}:{port} — scheduler {scheduler}, policy {policy.name}, "
                f"{len(leader.followers)} follower(s), store {state_dir / STORE_FILE}, "
                f"results in {results}"
                + (f"; {len(requeued)} job(s) re-queued" if requeued else "")
            ),
            highlight=False,
            soft_wrap=True,
        )
        signum = await _until_signal()
        console.print(f"{signal.Signals(signum).name}: stopping the leader …", highlight=False)
        await leader.close()
        await runner.cleanup()
    finally:
        store.close()


def _lead(
    connect: Callable[[], AbstractAsyncContextManager[tuple[Any, str]]],
    policy: str, max_wait_s: float, state_dir: Path, results: Path, host: str, port: int,
    token: str | None,
) -> None:  # fmt: skip
    """What `up` and `leader` share: check the options, hold the store's lock, then serve a
    leader on the Dask client `connect` opens (with its scheduler's address) until a signal.

    The paths are made absolute, so the ones the store keeps (result_path) do not depend on
    where the next leader is started from."""
    chosen = _policy(policy, max_wait_s)
    state_dir, results = state_dir.resolve(), results.resolve()
    _check_bind(host, token)
    _logging()

    async def main() -> None:
        async with connect() as (client, scheduler):
            await _serve(
                client, policy=chosen, state_dir=state_dir, results=results, host=host,
                port=port, token=token, scheduler=scheduler,
            )  # fmt: skip

    with _state(state_dir):
        asyncio.run(main())


@app.command()
def up(
    followers: Annotated[
        int,
        typer.Option(
            help="followers to start on this machine",
            parser=Number(int, ge=1, le=MAX_LOCAL_FOLLOWERS, why="this machine's CPUs x 4"),
        ),
    ] = 1,
    policy: PolicyOption = "two-tier",
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    results: ResultsOption = DEFAULT_RESULTS,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8642,
    token: TokenOption = None,
    label: Annotated[
        list[str], typer.Option(help="key=value for every local follower (repeatable)")
    ] = [],  # noqa: B006
    max_wait_s: MaxWaitOption = 3600.0,
) -> None:
    """A leader and a Dask LocalCluster of FOLLOWERS followers on this machine; Ctrl-C
    stops all of them and leaves the store consistent."""
    from servebench.cluster.follower import PRELOAD, gpu_count, preload_argv

    labels = _labels(label)

    @asynccontextmanager
    async def local_cluster() -> AsyncIterator[tuple[Any, str]]:
        from distributed import Client

        from servebench.common.dask_cluster import local_cluster

        # The machine's GPUs are shared out: a follower never claims one another also claims.
        async with (
            local_cluster(
                followers, gpus=gpu_count() // followers, asynchronous=True,
                preload=[PRELOAD], preload_argv=preload_argv(labels),
            ) as cluster,
            Client(cluster, asynchronous=True) as client,
        ):  # fmt: skip
            yield client, cluster.scheduler_address

    _lead(local_cluster, policy, max_wait_s, state_dir, results, host, port, token)


@app.command()
def leader(
    scheduler: Annotated[
        str, typer.Option(help="the Dask scheduler's address, tcp://HOST:PORT", parser=SCHEDULER)
    ],
    policy: PolicyOption = "two-tier",
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    results: ResultsOption = DEFAULT_RESULTS,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8642,
    token: TokenOption = None,
    max_wait_s: MaxWaitOption = 3600.0,
) -> None:
    """A leader on an existing Dask scheduler: followers (`servebench cluster follower`,
    or `dask worker` with servebench's resources and preload) join that scheduler."""

    @asynccontextmanager
    async def existing() -> AsyncIterator[tuple[Any, str]]:
        from servebench.common.dask_cluster import SchedulerUnreachable, connect_async

        try:
            client = await connect_async(scheduler)
        except SchedulerUnreachable as err:
            raise fail(str(err)) from None
        async with client:
            yield client, scheduler

    _lead(existing, policy, max_wait_s, state_dir, results, host, port, token)


@app.command()
def follower(
    leader: Annotated[
        str,
        typer.Option(
            "--leader", help="the Dask scheduler's address, tcp://HOST:PORT", parser=SCHEDULER
        ),
    ],
    gpus: Annotated[
        int | None,
        typer.Option(help="GPUs to offer (default: what NVML sees)", parser=GpusOption),
    ] = None,
    label: Annotated[list[str], typer.Option(help="key=value a job can ask for (repeatable)")] = [],  # noqa: B006
    name: Annotated[str | None, typer.Option(help="follower name (default: the host name)")] = None,
    host: Annotated[
        str | None,
        typer.Option(help="address to listen on (default: Dask's choice)", parser=Host()),
    ] = None,
) -> None:
    """A follower: a Dask worker that runs one benchmark at a time; Ctrl-C interrupts its
    run (what it measured stays) and leaves; the leader re-queues the job."""
    from servebench.cluster.follower import run_follower

    labels = _labels(label)
    _logging()

    def started(worker: Any) -> None:
        console.print(
            escape(f"follower {worker.name} at {worker.address}, joined {leader}"),
            highlight=False,
        )

    try:
        asyncio.run(
            run_follower(leader, name=name, gpus=gpus, labels=labels, host=host, on_started=started)
        )
    except (OSError, TimeoutError) as err:
        raise fail(f"cannot join the Dask scheduler at {leader}: {err}") from None


def _api(url: str | None, token: str | None) -> Any:
    """The leader's API at --leader-url (checked as it was parsed), else at
    $SERVEBENCH_CLUSTER_URL, checked here the same way, else the default."""
    from servebench.cluster.api_client import URL_ENV, LeaderApi

    if url is None and os.environ.get(URL_ENV):
        try:
            url = Url()(os.environ[URL_ENV])
        except BadValue as err:
            raise fail(f"${URL_ENV} {err.value}: {err.reason}") from None
    return LeaderApi(url, token)


def _api_fail(err: Any) -> typer.Exit:
    for problem in err.problems:
        say(problem)
    if err.problems:
        return typer.Exit(code=2)
    return fail(err.message)


@app.command()
def submit(
    files: Annotated[list[Path], typer.Argument(help="scenario files", parser=ScenarioFile())],
    priority: Annotated[
        int,
        typer.Option(help="higher runs first", parser=Number(int, ge=-1_000_000, le=1_000_000)),
    ] = 0,
    gpus: Annotated[
        int | None,
        typer.Option(help="GPUs the job needs (default: the scenario's)", parser=GpusOption),
    ] = None,
    label: Annotated[
        list[str], typer.Option(help="key=value a follower must have (repeatable)")
    ] = [],  # noqa: B006
    leader_url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Queue each scenario file as a job; prints one job id per file.

    Each file is validated here first, as the leader will (every problem, file:line field),
    so a bad one is refused without a round trip; a job no follower can run is queued and
    says so (a warning: it waits until a follower with what it needs joins)."""
    from servebench.cluster.api_client import ApiError
    from servebench.cluster.job import validate_text
    from servebench.scenario.validate import ScenarioError

    labels = _labels(label)
    api = _api(leader_url, token)
    texts, failed = {}, False
    for path in files:
        try:
            texts[path] = path.read_text(encoding="utf-8")
            validate_text(texts[path], str(path))
        except (OSError, UnicodeDecodeError) as err:
            raise fail(f"{path}: {err}") from None
        except ScenarioError as err:
            for problem in err.problems:
                say(problem)
            failed = True
    if failed:
        raise typer.Exit(code=2)
    for path, text in texts.items():
        try:
            job = api.submit(text, name=str(path), priority=priority, gpus=gpus, labels=labels)
        except ApiError as err:
            if not err.problems:
                raise fail(err.message) from None
            _api_fail(err)
            failed = True
            continue
        console.print(
            escape(f"{job['id']}  {path}  queued (estimate {job['estimate_s']:.0f} s)"),
            highlight=False,
        )
        if job.get("unschedulable"):
            typer.echo(f"warning: {job['id']}: {job['unschedulable']}", err=True)
    if failed:
        raise typer.Exit(code=2)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_tables(jobs: list[dict[str, Any]], followers: list[dict[str, Any]], now: float) -> Table:
    """The jobs and followers as one rich table group (what `status` prints)."""
    from rich.console import Group

    table = Table(
        "job",
        "scenario",
        "state",
        "follower",
        "try",
        "waited",
        "ran",
        "est.",
        "reason",
        title="jobs",
    )
    for job in jobs:
        end = job.get("finished_at") or now
        started = job.get("started_at")
        waited = (started or end) - job["submitted_at"]
        table.add_row(
            job["id"], escape(job["scenario_name"]), job["state"], escape(job.get("follower") or ""),
            str(job["attempts"]), _age(waited), _age(end - started if started else None),
            _age(job["estimate_s"]), escape((job.get("reason") or "")[:60]),
        )  # fmt: skip
    people = Table("follower", "address", "GPUs", "labels", "running", "queued", title="followers")
    for f in followers:
        labels = ", ".join(f"{k}={v}" for k, v in f["labels"].items())
        people.add_row(
            escape(f["name"]), f["address"], str(f["gpus"]), escape(labels),
            " ".join(f["running"]), str(len(f["queued"])),
        )  # fmt: skip
    return Group(table, people)  # type: ignore[return-value]


@app.command()
def status(
    once: Annotated[bool, typer.Option(help="print once and exit (for scripts)")] = False,
    interval: Annotated[
        float,
        typer.Option(
            help="seconds between refreshes", parser=Number(float, ge=0.2, le=3600, unit=" s")
        ),
    ] = 1.0,
    leader_url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """The jobs and followers, refreshed live until Ctrl-C (--once: print once)."""
    from rich.live import Live

    from servebench.cluster.api_client import ApiError

    api = _api(leader_url, token)

    def render() -> Table:
        return status_tables(api.jobs(), api.followers(), time.time())

    try:
        if once:
            console.print(render())
            return
        with Live(render(), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(), refresh=True)
    except ApiError as err:
        raise fail(err.message) from None
    except KeyboardInterrupt:
        return


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="job id")],
    leader_url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel a job: a waiting one at once; a running one is interrupted and keeps what
    it measured (fetch it with `cluster results`)."""
    from servebench.cluster.api_client import ApiError

    try:
        job = _api(leader_url, token).cancel(job_id)
    except ApiError as err:
        raise fail(err.message) from None
    console.print(
        escape(f"{job['id']}: {job['state']} ({job.get('reason') or ''})"), highlight=False
    )


@app.command()
def results(
    job_id: Annotated[str, typer.Argument(help="job id")],
    out: Annotated[
        Path, typer.Option(help="folder to put the run directory in", parser=OutputDir())
    ] = DEFAULT_RESULTS,
    leader_url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Fetch a job's result directory into OUT/<job id> (open it with `servebench report`)."""
    from servebench.cluster.api_client import ApiError
    from servebench.cluster.archive import ArchiveError, unpack

    target = out / job_id
    if target.exists():
        raise fail(f"{target} exists; remove it or give another --out")
    try:
        data = _api(leader_url, token).results(job_id)
        unpack(data, target)
    except ApiError as err:
        raise fail(err.message) from None
    except (ArchiveError, OSError) as err:
        raise fail(f"{target}: {err}") from None
    console.print(escape(f"results: {target}  (servebench report {target})"), highlight=False)
