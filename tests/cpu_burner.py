"""CPU burners a test or a benchmark starts and stops: one busy-looping Python process per
burner, each able to keep one core fully busy. Used to disturb a measurement on purpose
(tests/test_interference.py, benchmarks/interference.py); stress-ng would do the same but is
not installed everywhere, and a busy loop needs nothing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


@contextmanager
def cpu_burners(count: int) -> Iterator[list[psutil.Popen]]:
    """`count` busy processes for the duration of the block (killed and reaped after it)."""
    burners = [
        psutil.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


def cpu_seconds(burners: list[psutil.Popen]) -> float:
    """The CPU seconds the burners have used so far (user + system)."""
    return sum(sum(burner.cpu_times()[:2]) for burner in burners)
