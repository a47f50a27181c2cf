"""What a running load tells its caller (typed events) and how a caller stops it (`LoadControl`).

Every executor (`load.executors`: one process, or a gang on Dask) publishes the same events
in the same order, so a caller subscribes once whatever runs the load: `Started` (the
schedule's time 0 is set), `Measuring` (the measured window opens: a subscriber may read the
server's counters there), `Progress` (the live figures, about every second), `PartLost`
(a gang's generator died; the others go on) and `Stopped` (why the load ended, with its
verdict code). A subscriber that raises is dropped with a warning: the load goes on.

`LoadControl` is the one way in: `stop` from any thread (a Ctrl-C, the scenario runner's
signal handler, a stop button) ends the load as its own rules do, keeping what it measured;
a load given a control that was stopped before it began ends at once. `signals_stop` is the
one signal policy of a load run from the command line: the first SIGINT or SIGTERM stops it
(the records are kept and the verdict says it stopped early), a second aborts.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from servebench.common.verdict_codes import VerdictCode
from servebench.load.live import LiveFigures

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Started:
    """The schedule's time 0 is set: `start_at` on this process's wall clock. A gang's
    `name` starts the names of its variables and events on the Dask scheduler (all gone
    once it ends); one process has none."""

    start_at: float
    parts: int
    name: str = ""


@dataclass(frozen=True)
class Measuring:
    """The measured window opens. One process: before its first measured send (which waits
    for every subscriber); a gang: when the warm-up ends on the shared start, so requests in
    flight around that instant may fall on either side of it."""


@dataclass(frozen=True)
class Progress:
    """The live figures so far (`load.live`)."""

    figures: LiveFigures


@dataclass(frozen=True)
class PartLost:
    """Part `index` (a gang's generator) is lost: its records with it."""

    index: int
    why: str


@dataclass(frozen=True)
class Stopped:
    """The load ended: `reason` None at its planned end (its schedule, or stability windows
    that agreed), else why it stopped early, with `code` saying what kind of stop."""

    reason: str | None
    code: VerdictCode | None


LoadEvent = Started | Measuring | Progress | PartLost | Stopped
Subscriber = Callable[[LoadEvent], None]


class Events:
    """The subscribers of one load; `publish` calls each in turn. `live`: whether they want
    `Progress` (its figures cost the parts live counting, so only when asked)."""

    def __init__(self, *subscribers: Subscriber | None, live: bool = False) -> None:
        self._subscribers = [s for s in subscribers if s is not None]
        self.live = live and bool(self._subscribers)

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def publish(self, event: LoadEvent) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.warning(
                    "load events: a subscriber failed on %s; it gets no more",
                    type(event).__name__,
                    exc_info=True,
                )
                self._subscribers.remove(subscriber)


class LoadControl:
    """Stops a load from any thread: the first request wins and goes to every part (a
    running engine stops issuing, its requests in flight are answered and recorded). A
    signal handler may call in while a thread holds the lock, hence an RLock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._listeners: list[Callable[[str | None, VerdictCode], None]] = []
        self.requested: tuple[str | None, VerdictCode] | None = None

    def stop(
        self, reason: str | None = "stop requested", code: VerdictCode = VerdictCode.STOPPED_EARLY
    ) -> None:
        with self._lock:
            if self.requested is not None:
                return
            self.requested = (reason, code)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(reason, code)

    @contextlib.contextmanager
    def listening(self, listener: Callable[[str | None, VerdictCode], None]) -> Iterator[None]:
        """Call `listener` on a stop while the block runs (at once, if already stopped)."""
        with self._lock:
            self._listeners.append(listener)
            requested = self.requested
        try:
            if requested is not None:
                listener(*requested)
            yield
        finally:
            with self._lock:
                self._listeners.remove(listener)


@contextlib.contextmanager
def signals_stop(control: LoadControl, enabled: bool = True) -> Iterator[None]:
    """The first SIGINT/SIGTERM stops the load through `control`, keeping what it measured;
    a second aborts (KeyboardInterrupt). Only in the main thread, where signals arrive; the
    handlers before are put back after."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[str] = []

    def handle(signum: int, frame: Any) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signal.Signals(signum).name)
        log.warning("%s: stopping the load, keeping what it measured (again to abort)", received[0])
        control.stop(f"interrupted by {received[0]}")

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
