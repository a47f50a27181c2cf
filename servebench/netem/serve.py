"""Run one LinkProxy in a fresh event loop until told to stop (the CLI and the worker)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from servebench.netem.address import Address
from servebench.netem.clock import (
    new_precise_event_loop,
    reduce_timer_slack,
    try_realtime_priority,
)
from servebench.netem.profiles import LinkProfile
from servebench.netem.proxy import LinkProxy


def new_event_loop_for(profile: LinkProfile) -> asyncio.AbstractEventLoop:
    """Precise timers where the link keeps time; uvloop for a pure forwarder.

    A forwarder sets no timers, and uvloop's faster I/O path halves the latency the
    extra hop adds (benchmarks/netem.py); its timers are whole milliseconds, so a link
    with delays or a rate must use the timerfd loop instead.
    """
    if not profile.shapes_traffic:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return new_precise_event_loop()


def run_proxy(
    profile: LinkProfile,
    target: Address,
    listen: Address,
    *,
    seed: int | None,
    until: Callable[[LinkProxy], Awaitable[None]],
    realtime: bool = True,
) -> LinkProxy:
    """Start the proxy, await `until(proxy)`, stop it cleanly; return it (for final stats).

    The loop is private to this call: the emulator's timing must not depend on what else a
    process's main loop is busy with. With `realtime`, the calling process asks for a
    real-time scheduling class (clock.try_realtime_priority); `proxy.realtime` says
    whether it got one.
    """
    reduce_timer_slack()
    granted = realtime and try_realtime_priority()
    loop = new_event_loop_for(profile)
    proxy = LinkProxy(profile, target, seed=seed)
    proxy.realtime = granted

    async def main() -> None:
        await proxy.start(listen)
        try:
            await until(proxy)
        finally:
            await proxy.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return proxy
