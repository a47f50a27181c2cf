"""A leader as a long-running service: its store's lock held, its Dask client opened (a
LocalCluster of followers on this machine, or an existing scheduler), its API served
until SIGINT or SIGTERM, then closed so the store says what a restart should do.

What `servebench cluster up` and `servebench cluster leader` run once their options are
checked; each problem that stops the leader from starting is a `ClusterError` (or the
Dask bootstrap's `SchedulerUnreachable`) whose message says it in one line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from servebench.cluster.leader import STORE_FILE, Leader, LeaderError, StateLock

Connect = Callable[[], AbstractAsyncContextManager[tuple[Any, str]]]


def lead(
    connect: Connect, *, policy: Any, state_dir: Path, results: Path, host: str, port: int,
    token: str | None, say: Callable[[str], None],
) -> None:  # fmt: skip
    """Hold the store's lock, then serve a leader on the Dask client `connect` opens (with
    its scheduler's address) until a signal.

    The paths are made absolute, so the ones the store keeps (result_path) do not depend on
    where the next leader is started from."""
    state_dir, results = state_dir.resolve(), results.resolve()
    quiet_dask_logging()

    async def main() -> None:
        async with connect() as (client, scheduler):
            await serve(
                client, policy=policy, state_dir=state_dir, results=results, host=host,
                port=port, token=token, scheduler=scheduler, say=say,
            )  # fmt: skip

    with held(state_dir):
        asyncio.run(main())


def quiet_dask_logging() -> None:
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


@contextmanager
def held(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's lock (before any cluster starts: a second leader on one
    store is refused in one line, a LeaderError)."""
    lock = StateLock(state_dir)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


@asynccontextmanager
async def local_followers(followers: int, labels: dict[str, str]) -> AsyncIterator[tuple[Any, str]]:
    """A Dask LocalCluster of `followers` followers on this machine, and a client of it."""
    from distributed import Client

    from servebench.cluster.follower import PRELOAD, gpu_count, preload_argv
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


@asynccontextmanager
async def existing_scheduler(scheduler: str) -> AsyncIterator[tuple[Any, str]]:
    """A client of the Dask scheduler at `scheduler` (SchedulerUnreachable if it is not)."""
    from servebench.common.dask_cluster import connect_async

    client = await connect_async(scheduler)
    async with client:
        yield client, scheduler


async def serve(
    client: Any, *, policy: Any, state_dir: Path, results: Path, host: str, port: int,
    token: str | None, scheduler: str, say: Callable[[str], None],
) -> None:  # fmt: skip
    """Run a leader and its API on `client` until SIGINT/SIGTERM, then close it so the
    store says what a restart should do."""
    from aiohttp import web

    from servebench.cluster.api import make_app
    from servebench.cluster.store import JobStore

    store = JobStore(state_dir / STORE_FILE)
    leader = Leader(store, policy, client, results)
    try:
        requeued = await leader.start()
        runner = web.AppRunner(make_app(leader, token), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as err:
            await leader.close()
            raise LeaderError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
        say(
            f"leader: http://{host}:{port} — scheduler {scheduler}, policy {policy.name}, "
            f"{len(leader.followers)} follower(s), store {state_dir / STORE_FILE}, "
            f"results in {results}" + (f"; {len(requeued)} job(s) re-queued" if requeued else "")
        )
        signum = await until_signal()
        say(f"{signal.Signals(signum).name}: stopping the leader …")
        await leader.close()
        await runner.cleanup()
    finally:
        store.close()


async def until_signal() -> int:
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
