"""An asyncio event loop whose timers fire within microseconds instead of a millisecond.

Why: asyncio waits for timers with epoll_wait(), whose timeout is whole milliseconds
rounded up, so every delivery would be up to 1 ms late — 50 % of a 2 ms wired RTT. uvloop
(libuv) also keeps time in milliseconds. Linux's timerfd has nanosecond resolution: we arm
one for the loop's next deadline and put it into the same epoll set, so epoll_wait wakes
at the deadline. Python 3.11 has no os.timerfd_* (added in 3.13), hence ctypes.

Where timerfd is missing (not Linux) the loop falls back to the standard one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import math
import os
import select
import selectors
import sys

_CLOCK_MONOTONIC = 1  # time.monotonic() and asyncio's loop.time() use this clock
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_PR_SET_TIMERSLACK = 29


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.timerfd_create  # noqa: B018 - probe that the symbol exists
        return lib
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class TimerfdEpollSelector(selectors.EpollSelector):
    """EpollSelector whose select(timeout) wakes at `timeout` with sub-millisecond precision."""

    def __init__(self) -> None:
        super().__init__()
        assert _LIBC is not None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            super().close()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._timerfd = fd
        self._spec = _Itimerspec()
        # Registered on the raw epoll object, not through the selector map, so the loop
        # never sees it as one of its file descriptors.
        self._selector.register(fd, select.EPOLLIN)

    def _arm(self, timeout: float) -> None:
        sec = int(timeout)
        spec = self._spec
        spec.it_value.tv_sec = sec
        spec.it_value.tv_nsec = max(1, int((timeout - sec) * 1e9))  # 0/0 would disarm
        _LIBC.timerfd_settime(self._timerfd, 0, ctypes.byref(spec), None)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            poll_timeout = -1.0
        elif timeout <= 0:
            poll_timeout = 0.0
        else:
            self._arm(timeout)
            # Backstop in case the timer event is lost: epoll's own (late) timeout.
            poll_timeout = math.ceil(timeout * 1e3) * 1e-3 + 0.001
        max_ev = len(self._fd_to_key) + 1
        ready: list[tuple[selectors.SelectorKey, int]] = []
        try:
            fd_event_list = self._selector.poll(poll_timeout, max_ev)
        except InterruptedError:
            return ready
        for fd, event in fd_event_list:
            if fd == self._timerfd:
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 8)
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
            os.close(self._timerfd)
        finally:
            super().close()


def precise_timers_available() -> bool:
    """True where the timerfd loop can be used (Linux with a usable libc)."""
    return _LIBC is not None


def reduce_timer_slack() -> None:
    """Linux adds up to 50 µs 'slack' to each wake-up to save power; ask for 1 ns instead.

    It applies to the calling thread, so call it in the thread (process) that runs the loop.
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)


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
    if _LIBC is None:
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(TimerfdEpollSelector())
