"""A daemon thread that runs for the span of a `with` block.

What samples beside a measurement (NVML's utilization while GEMMs run, a benchmark's CPU
times while a load runs) starts a thread on entry and must stop and join it on exit, so
that its samples are complete before they are read: one definition of that start, stop
and join, with each sampler giving only its loop.
"""

from __future__ import annotations

import threading
from typing import Self


class BackgroundThread:
    """Runs `run` in a daemon thread named `name` from `__enter__`; `__exit__` sets `stop`
    and joins the thread. `run` returns once `stop` is set (`stop.wait(interval)` as the
    loop's pause does both)."""

    def __init__(self, name: str) -> None:
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)

    def run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join()
