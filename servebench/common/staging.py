"""Staged work that is undone after a failure or a stop, SIGTERM included.

Work that writes many files (an import of a user's model: gigabytes, minutes) is written
into a hidden folder beside its destination and moved into place only when it is whole,
so nothing half written is ever found there. The folder must also go when the work does
not finish: on an error, on Ctrl-C (SIGINT, which Python raises as KeyboardInterrupt) and
on SIGTERM, which `timeout`, systemd and Kubernetes send and whose default action ends the
process without running any cleanup. Under `sigterm_stops` (a context manager or a
decorator) SIGTERM raises KeyboardInterrupt("SIGTERM") instead, so the same `finally`
runs; where the process handles SIGTERM itself (the scenario runner's event loop) or the
work runs outside the main thread, that handling is kept. `remove_staged` then removes the
folder without a second stop cutting it short.
"""

from __future__ import annotations

import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    # A KeyboardInterrupt, as Ctrl-C raises, so that `except Exception` (a library's broad
    # refusal of a file) does not catch it; its argument names the signal.
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """Within the block (or the decorated function), SIGTERM raises
    KeyboardInterrupt("SIGTERM") where it would otherwise end the process on the spot
    (main thread, default action); the previous action is restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def remove_staged(folder: Path) -> None:
    """Remove a staging folder and everything in it; a Ctrl-C or SIGTERM that comes
    meanwhile is held until it is gone (then raised as usual), so a second stop cannot
    leave half of it behind."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


_STOPS = {signal.SIGINT, signal.SIGTERM}
