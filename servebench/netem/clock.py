"""An asyncio event loop whose timers fire within microseconds instead of a millisecond.

Why: asyncio waits for timers with epoll_wait(), whose timeout is whole milliseconds
rounded up, so every delivery would be up to 1 ms late — 50 % of a 2 ms wired RTT. uvloop
(libuv) also keeps time in milliseconds. Linux's timerfd has nanosecond resolution: we arm
one for the loop's next deadline and put it into the same epoll set, so epoll_wait wakes
at the deadline. The emulator owns its worker's loop, so it makes every timer of that loop
precise; the load generator (`load.timer`) runs on a caller's loop and keeps a timer of
its own instead. Both use the one binding in `servebench.common.linux`.

Where timerfd is missing (not Linux) the loop falls back to the standard one.
"""

from __future__ import annotations

import asyncio
import math
import os
import select
import selectors

from servebench.common.linux import TIMERFD_AVAILABLE, Timerfd, set_timer_slack


class TimerfdEpollSelector(selectors.EpollSelector):
    """EpollSelector whose select(timeout) wakes at `timeout` with sub-millisecond precision."""

    def __init__(self) -> None:
        super().__init__()
        try:
            self._timer = Timerfd()
        except OSError:
            super().close()  # the epoll fd
            raise
        # Registered on the raw epoll object, not through the selector map, so the loop
        # never sees it as one of its file descriptors.
        self._selector.register(self._timer.fd, select.EPOLLIN)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            poll_timeout = -1.0
        elif timeout <= 0:
            poll_timeout = 0.0
        else:
            self._timer.arm_after(timeout)
            # Backstop in case the timer event is lost: epoll's own (late) timeout.
            poll_timeout = math.ceil(timeout * 1e3) * 1e-3 + 0.001
        max_ev = len(self._fd_to_key) + 1
        ready: list[tuple[selectors.SelectorKey, int]] = []
        try:
            fd_event_list = self._selector.poll(poll_timeout, max_ev)
        except InterruptedError:
            return ready
        for fd, event in fd_event_list:
            if fd == self._timer.fd:
                self._timer.drain()
                continue
            events = 0
            if event & ~select.EPOLLIN:
                events |= selectors.EVENT_WRITE
            if event & ~select.EPOLLOUT:
                events |= selectors.EVENT_READ
            key = self._key_from_fd(fd)
            if key:
                ready.append((key, events & key.events))
        return ready

    def close(self) -> None:
        try:
            self._timer.close()
        finally:
            super().close()


def reduce_timer_slack() -> None:
    """Linux adds up to 50 µs 'slack' to each wake-up to save power; ask for 1 ns instead.

    It applies to the calling thread, so call it in the thread (process) that runs the loop.
    """
    set_timer_slack(1)


def try_realtime_priority() -> bool:
    """Ask for the lowest real-time (SCHED_FIFO) priority; True if granted.

    On a busy machine an ordinary process that wakes for a delivery can wait several
    milliseconds for a CPU (measured here under load: p99 9-12 ms late, against 0.1 ms with
    SCHED_FIFO). The emulator sleeps almost all the time and then needs the CPU for
    microseconds, which is exactly what a real-time class is for; the kernel's RT
    throttling still leaves other processes 5 % of each second. Needs root or
    CAP_SYS_NICE; without them the emulator runs as an ordinary process.
    """
    if not hasattr(os, "sched_setscheduler"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        return False
    return True


def new_precise_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop with microsecond timers where possible, else the default loop."""
    if not TIMERFD_AVAILABLE:
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(TimerfdEpollSelector())
