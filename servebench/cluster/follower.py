"""A follower is a Dask worker that runs one benchmark at a time.

What makes a Dask worker a servebench follower, wherever it was started:
- the worker resource `slot` (1): the leader hands jobs only to workers that have it, and
  every job asks for `slot=1`, so Dask itself never runs two benchmarks on one follower;
- the worker resource `GPU` (how many GPUs NVML sees; 0 where NVML is missing): jobs that
  need GPUs go only where there are enough;
- labels (`zone=a`, `gpu=a100`), which Dask resources cannot carry (they are numbers):
  this module, loaded as a Dask preload, publishes them in the scheduler's metadata
  under `["servebench-followers", <worker name>]` before the worker registers, so the
  leader sees a follower and its labels at the same moment.

`servebench cluster follower --leader ADDR` starts such a worker in its own process (no
nanny: killing the process takes the follower away, and the leader re-queues its job).
Workers started by other tools (`dask worker`, dask-jobqueue, dask-kubernetes) become
followers with `--resources "slot=1 GPU=N" --preload servebench.cluster.follower` and,
for labels, `--preload-argv "--label zone=a"` (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Iterable, Mapping
from typing import Any

import click

from servebench.cluster import execute
from servebench.common.dask_cluster import worker_resources

META_KEY = "servebench-followers"
PRELOAD = __name__
# How long a closing follower waits for its interrupted run to finish the current trial.
CLOSE_TIMEOUT_S = execute.STOP_GRACE_S + 30


def gpu_count() -> int:
    """The GPUs NVML sees; 0 where NVML cannot start (no driver, no library: CPU hosts)."""
    try:
        import pynvml  # nvidia-ml-py, imported here: most machines that run this have none

        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        pynvml.nvmlShutdown()


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """`["zone=a", "gpu=a100"]` → `{"zone": "a", "gpu": "a100"}`; ValueError naming the
    item for one without `=`, with an empty key, or repeating a key."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"label {item!r}: expected key=value")
        if key in labels:
            raise ValueError(f"label {key!r} given twice")
        labels[key] = value
    return labels


def preload_argv(labels: Mapping[str, str]) -> list[str]:
    """The `--preload-argv` that hands `labels` to this module's `dask_setup`."""
    return [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]


async def publish(worker: Any, labels: Mapping[str, str]) -> None:
    """Put the worker's labels in the scheduler's metadata (see the module docstring)."""
    await worker.scheduler.set_metadata(
        keys=[META_KEY, str(worker.name)],
        value={"labels": dict(labels), "address": worker.address},
    )


@click.command()
@click.option("--label", "label_items", multiple=True, help="key=value, repeatable")
def dask_setup(worker: Any, label_items: tuple[str, ...]) -> Any:
    """Dask's preload hook: runs in every worker started with
    `--preload servebench.cluster.follower` before it registers with the scheduler."""
    return publish(worker, parse_labels(label_items))


async def run_follower(
    scheduler: str,
    *,
    name: str | None = None,
    gpus: int | None = None,
    labels: Mapping[str, str] | None = None,
    host: str | None = None,
    local_directory: str | None = None,
    on_started: Any = None,
) -> None:
    """Run a follower until SIGINT/SIGTERM or until the scheduler goes away.

    On a signal the run in progress is interrupted first (it keeps what it measured and
    stops its servers), then the worker leaves the scheduler; the leader re-queues the
    job. `on_started(worker)` is called once the worker has registered."""
    from distributed import Worker

    worker = Worker(
        scheduler,
        name=name or socket.gethostname(),
        nthreads=1,
        resources=worker_resources(gpu_count() if gpus is None else gpus),
        host=host,
        local_directory=local_directory,
        preload=[PRELOAD],
        preload_argv=[preload_argv(labels or {})],
        dashboard=False,
    )
    await worker
    if on_started is not None:
        on_started(worker)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        finished = asyncio.ensure_future(worker.finished())
        signalled = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({finished, signalled}, return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        if not finished.done():
            execute.stop_all("the follower was stopped")
            await worker.close(timeout=CLOSE_TIMEOUT_S, reason="follower stopped")
            await finished
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
