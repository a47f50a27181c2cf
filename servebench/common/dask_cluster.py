"""The one way servebench starts or reaches Dask: the load gang (`load.gang`) and the
cluster of benchmark followers (`servebench cluster`, `cluster/`) both come here, so that
they agree on the loopback rules, the one timeout and what a worker offers.

What a worker offers is one `slot` (and its `GPU`s): every benchmark job asks for the slot,
and so does every gang generator, because both measure — a generator placed beside a job
that is measuring a server (or beside another gang's generator) would measure the two of
them. Dask itself then never runs two on one worker; a gang only picks workers whose slot
is free now (`free_slot_workers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servebench.common.errors import ServebenchError

SLOT = "slot"
GPU = "GPU"
# Seconds to reach a scheduler, and to wait for enough of its workers. One figure for the
# gang and the cluster: a scheduler on loopback or a LAN answers in milliseconds, and a
# user who typed a wrong address should hear so before long.
SCHEDULER_TIMEOUT = 10.0


class SchedulerUnreachable(ServebenchError, ValueError):
    """The Dask scheduler address does not answer, or has too few workers."""


def worker_resources(gpus: int) -> dict[str, float]:
    """The Dask resources every servebench worker offers: one slot and its GPUs."""
    return {SLOT: 1, GPU: gpus}


def local_cluster(
    n: int,
    *,
    gpus: int = 0,
    asynchronous: bool = False,
    preload: Sequence[str] = (),
    preload_argv: Sequence[str] = (),
) -> Any:
    """A LocalCluster of `n` worker processes on loopback, each with one thread (a worker
    runs one generator or one job, which owns its process), one slot and `gpus` GPUs.
    No dashboard: its health and metrics pages still listen, so on a free loopback port
    (on 8787, Dask's default, a second cluster warned "Port 8787 is already in use").
    No memory limit: a worker holds records or a job's measurement, not Dask data, and
    must not be paused for them."""
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=n,
        processes=True,
        threads_per_worker=1,
        resources=worker_resources(gpus),
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        memory_limit=0,
        preload=list(preload),
        preload_argv=list(preload_argv),
        asynchronous=asynchronous,
    )


def connect(scheduler: str) -> Any:
    """A Dask client on `scheduler`; SchedulerUnreachable in one line if it does not
    answer within SCHEDULER_TIMEOUT."""
    from distributed import Client

    try:
        return Client(scheduler, timeout=SCHEDULER_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise _unreachable(scheduler, exc) from None


async def connect_async(scheduler: str) -> Any:
    """`connect` for an asyncio caller (its client is asynchronous)."""
    from distributed import Client

    try:
        return await Client(scheduler, asynchronous=True, timeout=SCHEDULER_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise _unreachable(scheduler, exc) from None


def _unreachable(scheduler: str, exc: BaseException) -> SchedulerUnreachable:
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return SchedulerUnreachable(
        f"scheduler {scheduler}: the Dask scheduler does not answer "
        f"within {SCHEDULER_TIMEOUT:g} s ({first})"
    )


def free_slot_workers(identity: dict[str, Any], processing: dict[str, Sequence[Any]]) -> list[str]:
    """The workers of a scheduler's `identity` that offer a slot and run nothing now
    (`processing`: `Client.processing()`), by address."""
    return sorted(
        address
        for address, worker in identity.get("workers", {}).items()
        if (worker.get("resources") or {}).get(SLOT, 0) >= 1 and not processing.get(address)
    )
