"""The Linux system calls servebench needs that Python 3.11's `os` lacks: timerfd, prctl
and mincore.

One binding for the whole project: `load.timer` (exact send times), `netem.clock` (the
link emulator's event loop), `servers.process` (servers die with their parent) and the
overhead suite's page-cache check (`cached_pages`) all use it. It imports nothing of
servebench, so every layer may import it. Python 3.13 adds
`os.timerfd_*`; until 3.11 is dropped, these are a few ctypes calls.

Why timerfd: asyncio's epoll timeouts are whole milliseconds rounded up and uvloop keeps
time in milliseconds, so a send or a packet delivery would be up to 1 ms late. A timerfd
is a kernel hrtimer with nanosecond resolution whose fd an event loop can watch.

Where this is not Linux, or the C library lacks the calls, `TIMERFD_AVAILABLE` is False,
`Timerfd()` raises OSError and the prctl helpers return False; callers fall back to the
ordinary timers or do without.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys

#: The clock every timerfd here runs on: time.monotonic, time.perf_counter (on Linux) and
#: asyncio's loop.time all read it, so a deadline taken from them needs no conversion.
CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1  # from <sys/timerfd.h>
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PR_SET_TIMERSLACK = 29


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # dlopen(NULL): libc is already loaded; find_library would run ldconfig (~20 ms).
        lib = ctypes.CDLL(None, use_errno=True)
        lib.timerfd_create  # noqa: B018 - probe that the symbols exist
        lib.timerfd_settime  # noqa: B018
        lib.prctl  # noqa: B018
    except (OSError, AttributeError):
        return None
    return lib


_LIBC = _load_libc()
#: Whether `Timerfd()` can work here (Linux with a C library that has the calls).
TIMERFD_AVAILABLE = _LIBC is not None


def _os_error(call: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{call}: {os.strerror(err)}")


class Timerfd:
    """A non-blocking, close-on-exec one-shot timer on CLOCK_MONOTONIC; watch `fd` for it.

    Two ways to arm it, because its two users get their wake-up time in two forms:
    `arm_at` takes an absolute deadline (the load generator's schedule is a list of
    perf_counter times, and an absolute deadline does not drift by the time between reading
    the clock and arming), `arm_after` a delay (an event loop's selector is handed a
    relative timeout). Both run on the same clock; only the form of the time differs.
    """

    def __init__(self) -> None:
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "timerfd is not available on this platform")
        fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _os_error("timerfd_create")
        self.fd: int = fd
        self._settime = _LIBC.timerfd_settime
        self._spec = _Itimerspec()

    def arm_at(self, deadline: float) -> None:
        """Fire at `deadline`, an absolute CLOCK_MONOTONIC time in seconds (now if past)."""
        self._arm(deadline, _TFD_TIMER_ABSTIME, 0)

    def arm_after(self, delay: float) -> None:
        """Fire `delay` seconds from now (> 0)."""
        self._arm(delay, 0, 1)  # at least 1 ns: a relative 0 s 0 ns would disarm it

    def _arm(self, seconds: float, flags: int, min_ns: int) -> None:
        value = self._spec.it_value
        whole = int(seconds)
        value.tv_sec = whole
        value.tv_nsec = max(min_ns, int((seconds - whole) * 1e9))
        if self._settime(self.fd, flags, ctypes.byref(self._spec), None) != 0:
            raise _os_error("timerfd_settime")

    def drain(self) -> bool:
        """Consume the expiry so the fd stops being readable; False if it had not fired."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def set_timer_slack(nanoseconds: int) -> bool:
    """Set the calling thread's timer slack (Linux adds up to 50 µs by default to save
    power by batching wake-ups); True if it was set."""
    return _LIBC is not None and _LIBC.prctl(_PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send `signum` to this process when the thread that forked it
    exits; True if it was set. Meant for a child between fork and exec."""
    return _LIBC is not None and _LIBC.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def _bind_page_calls(lib: ctypes.CDLL | None) -> tuple[ctypes._CFuncPtr, ...] | None:
    """mmap, mincore and munmap with their C signatures, or None where libc lacks them."""
    if lib is None:
        return None
    try:
        calls = (lib.mmap, lib.mincore, lib.munmap)
    except AttributeError:
        return None
    map_call, core_call, unmap_call = calls
    map_call.restype = ctypes.c_void_p
    map_call.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    core_call.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    unmap_call.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    return calls


_PAGE_CALLS = _bind_page_calls(_LIBC)
_MAP_FAILED = ctypes.c_void_p(-1).value


def cached_pages(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(pages of the file at `path` now in the page cache, pages of the file).

    Mapping a file and asking mincore reads no data and faults no page in, so this tells
    whether a cache drop worked without disturbing what it checks (a timed read would
    load the pages it measures). Raises OSError where the calls are missing or fail.
    """
    if _PAGE_CALLS is None:
        raise OSError(errno.ENOSYS, "mincore is not available on this platform")
    map_call, core_call, unmap_call = _PAGE_CALLS
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        pages = -(-size // mmap.PAGESIZE)
        if pages == 0:
            return 0, 0
        address = map_call(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address == _MAP_FAILED:
            raise _os_error("mmap")
        try:
            vector = (ctypes.c_ubyte * pages)()
            if core_call(address, size, vector) != 0:
                raise _os_error("mincore")
        finally:
            unmap_call(address, size)
    finally:
        os.close(fd)
    return sum(byte & 1 for byte in vector), pages
