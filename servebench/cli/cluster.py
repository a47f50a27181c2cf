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
import functools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from servebench.cli import cluster_simulate
from servebench.cli.command import with_options
from servebench.cli.usage import fail, say
from servebench.cli.values import BadValue, Host, Number, OutputDir, Port, ScenarioFile, Url
from servebench.common.limits import MAX_GPUS

if TYPE_CHECKING:
    from rich.console import Group

    from servebench.cluster.service import Connect

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


@dataclass(frozen=True)
class LeadOptions:
    """What `up` and `leader` share: the leader's policy, store, results and API."""

    policy: PolicyOption = "two-tier"
    state_dir: StateDirOption = DEFAULT_STATE_DIR
    results: ResultsOption = DEFAULT_RESULTS
    host: HostOption = "127.0.0.1"
    port: PortOption = 8642
    token: TokenOption = None
    max_wait_s: MaxWaitOption = 3600.0

    def lead(self, connect: Connect) -> None:
        """Check the options, then serve a leader on the Dask client `connect` opens until
        a signal (`servebench.cluster.service.lead`)."""
        from servebench.cluster.leader import LeaderError
        from servebench.cluster.service import lead
        from servebench.cluster.store import StoreError
        from servebench.common.dask_cluster import SchedulerUnreachable

        chosen = _policy(self.policy, self.max_wait_s)
        _check_bind(self.host, self.token)
        try:
            lead(
                connect, policy=chosen, state_dir=self.state_dir, results=self.results,
                host=self.host, port=self.port, token=self.token, say=_say,
            )  # fmt: skip
        except (LeaderError, StoreError, SchedulerUnreachable) as err:
            raise fail(str(err)) from None


def _say(text: str) -> None:
    console.print(escape(text), highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class UpOptions(LeadOptions):
    """`servebench cluster up`'s options: the leader's, and its local followers'."""

    followers: Annotated[
        int,
        typer.Option(
            help="followers to start on this machine",
            parser=Number(int, ge=1, le=MAX_LOCAL_FOLLOWERS, why="this machine's CPUs x 4"),
        ),
    ] = 1
    label: Annotated[
        list[str], typer.Option(help="key=value for every local follower (repeatable)")
    ] = field(default_factory=list)


@app.command()
@with_options(UpOptions)
def up(options: UpOptions) -> None:
    """A leader and a Dask LocalCluster of FOLLOWERS followers on this machine; Ctrl-C
    stops all of them and leaves the store consistent."""
    from servebench.cluster.service import local_followers

    labels = _labels(options.label)
    options.lead(functools.partial(local_followers, options.followers, labels))


@dataclass(frozen=True)
class LeaderOptions(LeadOptions):
    """`servebench cluster leader`'s options: the leader's, and the scheduler it joins."""

    scheduler: Annotated[
        str, typer.Option(help="the Dask scheduler's address, tcp://HOST:PORT", parser=SCHEDULER)
    ] = field(kw_only=True)


@app.command()
@with_options(LeaderOptions)
def leader(options: LeaderOptions) -> None:
    """A leader on an existing Dask scheduler: followers (`servebench cluster follower`,
    or `dask worker` with servebench's resources and preload) join that scheduler."""
    from servebench.cluster.service import existing_scheduler

    options.lead(functools.partial(existing_scheduler, options.scheduler))


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
    from servebench.cluster.service import quiet_dask_logging

    labels = _labels(label)
    quiet_dask_logging()

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
    from servebench.cluster.status_table import status_tables

    api = _api(leader_url, token)

    def render() -> Group:
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
