"""A one-shot timer that wakes the event loop at an exact `perf_counter` time (Linux).

Why not the loop's own timers: uvloop's timers (libuv) have 1 ms granularity and
asyncio's epoll timeouts are rounded up to whole milliseconds, so an open-loop schedule at
2,000 req/s (0.5 ms apart) would be sent up to a millisecond late. Spinning on `sleep(0)`
until the send time fixes the granularity but keeps the process always runnable, and on a
shared machine the kernel then preempts it for whole time slices: measured here at 500
req/s on a busy 2-core machine, spinning sent 16 % of requests more than 1 ms late,
a timerfd 0.5 %, using a tenth of the CPU.

A Linux timerfd armed with an absolute CLOCK_MONOTONIC deadline (the clock behind
`time.perf_counter`) is an hrtimer without slack; the loop just watches its fd. Unlike the
link emulator (`netem.clock`), which owns its process's loop and makes all of that loop's
timers precise, the generator runs on whatever loop the caller gives it (often uvloop), so
it keeps one timer of its own for the next send instead of replacing the loop's selector.
"""

from __future__ import annotations

import asyncio
import sys
import time

from servebench.common.linux import Timerfd


class PreciseTimer:
    """Sleep until an absolute perf_counter time; one sleeper at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timerfd = Timerfd()
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        loop.add_reader(self._timerfd.fd, self._on_ready)

    async def sleep_until(self, due: float) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._timerfd.arm_at(due)
        await waiter

    def _on_ready(self) -> None:
        if not self._timerfd.drain():
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self._timerfd.fd >= 0:
            self._loop.remove_reader(self._timerfd.fd)
            self._timerfd.close()


def precise_timer(loop: asyncio.AbstractEventLoop) -> PreciseTimer | None:
    """A timerfd timer where the platform has one and perf_counter is CLOCK_MONOTONIC."""
    if not sys.platform.startswith("linux"):
        return None
    if "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
        return None
    try:
        return PreciseTimer(loop)
    except OSError:
        return None
