"""Mahimahi packet-delivery traces: trace-driven link capacity.

Format (Mahimahi `mm-link`, Netravali et al., USENIX ATC 2015): one integer per line, a
timestamp in milliseconds from the start of the trace. Each line is one opportunity to
deliver a 1500-byte packet; several lines with the same timestamp are several
opportunities in that millisecond. The trace repeats with a period equal to its last
timestamp, which therefore must be positive.

We treat the link as a byte stream: every opportunity carries up to 1500 payload bytes and
a partly used opportunity can carry the start of the next write, as Mahimahi's byte queue
does. Opportunities that find the queue empty are lost, as on a real cellular link.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from servebench.common.textfile import TextFileError, read_text
from servebench.netem.errors import ProfileError

#: Bytes one delivery opportunity carries (Mahimahi's MTU-sized packet).
OPPORTUNITY_BYTES = 1500


@dataclass(frozen=True)
class MahimahiTrace:
    """A parsed trace: delivery-opportunity timestamps (ms) within one period."""

    path: Path
    opportunities_ms: tuple[int, ...]

    @classmethod
    def load(cls, path: str | Path) -> MahimahiTrace:
        """Parse a trace file; errors name the file and line, since traces are hand-edited."""
        path = Path(path)
        try:
            text = read_text(path)
        except TextFileError as exc:
            raise ProfileError(f"trace file {exc}") from None
        stamps: list[int] = []
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            try:
                stamp = int(line)
            except ValueError:
                raise ProfileError(
                    f"trace file {path}:{lineno}: {line!r} is not an integer millisecond timestamp"
                ) from None
            if stamp < 0:
                raise ProfileError(f"trace file {path}:{lineno}: timestamp {stamp} is negative")
            if stamps and stamp < stamps[-1]:
                raise ProfileError(
                    f"trace file {path}:{lineno}: timestamp {stamp} is smaller than the one "
                    f"before it ({stamps[-1]}); timestamps must not decrease"
                )
            stamps.append(stamp)
        if not stamps:
            raise ProfileError(f"trace file {path}: no timestamps in it")
        if stamps[-1] <= 0:
            raise ProfileError(
                f"trace file {path}: the last timestamp is {stamps[-1]}, but it is the period "
                "the trace repeats with and must be positive"
            )
        return cls(path=path, opportunities_ms=tuple(stamps))

    @property
    def period_s(self) -> float:
        """Length of one repetition of the trace."""
        return self.opportunities_ms[-1] / 1000.0

    @property
    def mean_bps(self) -> float:
        """Average capacity over one period, in bits per second."""
        return len(self.opportunities_ms) * OPPORTUNITY_BYTES * 8 / self.period_s

    def opportunity_time(self, index: int) -> float:
        """Seconds from the trace start to opportunity `index` (counting across repetitions)."""
        cycle, pos = divmod(index, len(self.opportunities_ms))
        return (cycle * self.opportunities_ms[-1] + self.opportunities_ms[pos]) / 1000.0

    def first_index_at_or_after(self, t: float) -> int:
        """Index of the first opportunity at or after `t` seconds from the trace start."""
        stamps = self.opportunities_ms
        period = stamps[-1]
        ms = max(0.0, t) * 1000.0
        cycle = int(ms // period)
        pos = bisect.bisect_left(stamps, ms - cycle * period)
        if pos == len(stamps):
            cycle, pos = cycle + 1, 0
        return cycle * len(stamps) + pos
