"""A load's counts while it runs: each part's mergeable counts, merged by the coordinator.

A load's final figures come from its merged records (`load.executors`). While it runs, each
part (one process, or one of a gang's generators) keeps `PartCounts` of its completed
measured requests: ok and error counts, how many answered within the early stop's bound,
a DDSketch of the ok latencies, and the same per stability window. A part publishes them
(`PartCounts.snapshot`: counts and each sketch's own protobuf encoding, never the samples)
with a watermark, the schedule offset up to which every completion is counted. The
coordinator merges every part's latest snapshot (`MergedCounts`: a sketch merge adds bin
counts, so the merged sketch is the sketch of all their samples; percentiles are never
averaged), and its stop rules (`load.rules`) and the live figures (`LiveFigures`, like
Locust's "RPS / failures / p50 / p99") read the merge. Counts are cumulative, so the
latest snapshot of each part is all the coordinator needs, however many it missed.

DDSketch (`ddsketch` on the package index) rather than HdrHistogram: its guarantee is a
relative accuracy over any range of values with nothing to configure (HdrHistogram needs
integer values in a range fixed up front), its merge is exact, and its encoding is a
documented protobuf shared with the other DDSketch implementations.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ddsketch.ddsketch import BaseDDSketch
from ddsketch.mapping import LogarithmicMapping
from ddsketch.pb.ddsketch_pb2 import DDSketch as SketchMessage
from ddsketch.pb.proto import DDSketchProto
from ddsketch.store import DenseStore

from servebench.common.slo_judge import count_at_or_under
from servebench.load.records import OK
from servebench.load.stats import Columns

# Every live percentile is within 1 % of the value at its rank (the sketch's guarantee).
RELATIVE_ACCURACY = 0.01
# Seconds between a gang generator's snapshots (and the coordinator's updates).
PUBLISH_EVERY = 1.0


@dataclass(frozen=True)
class LiveFigures:
    """A load's figures so far: measured requests completed (each part's share in
    `by_generator`), failures, the completion rate over the last interval and the latency
    percentiles (s) of the merged sketch, each within `relative_accuracy` of the latency at
    the sketch's rank, q(n - 1) (the records' nearest rank, ceil(qn), may be one further:
    the final figures, from the records, are the ones to quote)."""

    elapsed: float  # seconds since the shared start
    completed: int
    errors: int
    sent: int  # completed, plus requests in flight (warm-up ones too)
    rate: float  # completions per second over the last interval
    p50: float | None
    p90: float | None
    p99: float | None
    by_generator: tuple[int, ...]
    relative_accuracy: float = RELATIVE_ACCURACY


def new_sketch(mapping: LogarithmicMapping | None = None) -> BaseDDSketch:
    """An empty sketch at `RELATIVE_ACCURACY` (what `ddsketch.DDSketch` builds, with its
    mapping at hand for `_Tally.add`)."""
    return BaseDDSketch(
        mapping=mapping or LogarithmicMapping(RELATIVE_ACCURACY),
        store=DenseStore(),
        negative_store=DenseStore(),
        zero_count=0.0,
    )


def decode(encoded: bytes) -> BaseDDSketch:
    """A sketch from its protobuf encoding (`PartCounts.snapshot`)."""
    message = SketchMessage()
    message.ParseFromString(encoded)
    return DDSketchProto.from_proto(message)


def _encode(sketch: BaseDDSketch) -> bytes:
    return DDSketchProto.to_proto(sketch).SerializeToString()


class _Tally:
    """Completed requests: counts, and a sketch of the ok ones' latencies."""

    def __init__(self, mapping: LogarithmicMapping) -> None:
        self.mapping = mapping
        self.sketch = new_sketch(mapping)
        self.ok = 0
        self.errors = 0

    def add(self, latency: np.ndarray, ok: np.ndarray) -> None:
        """Add a batch. Adding each value costs 1.7-2.8 µs of Python (measured here), taken
        from the event loop's share of the GIL at tens of thousands of requests per second;
        instead each bin gets its count at once (0.1-0.25 µs a request in a chunk of 8192).
        The bin of a value is the sketch's logarithmic mapping, key = ceil(ln v / ln gamma),
        and the bin's own value stands for it, so the bins are those of adding each value."""
        good = latency[ok].astype(np.float64)
        positive = good[good > 0]
        log_gamma = math.log(self.mapping.gamma)
        keys, counts = np.unique(np.ceil(np.log(positive) / log_gamma), return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
            self.sketch.add(self.mapping.value(int(key)), float(count))
        if good.size > positive.size:
            self.sketch.add(0.0, float(good.size - positive.size))
        self.ok += int(good.size)
        self.errors += int(ok.size - good.size)


@dataclass(frozen=True)
class CountRules:
    """What a part counts besides its totals: answers within `bound_s` (early stop), and
    completions per stability window of `window_s` from offset `windows_from`."""

    bound_s: float | None = None
    window_s: float | None = None
    windows_from: float = 0.0


class PartCounts:
    """One part's measured requests as mergeable counts. Fed by the engine's writer thread
    (`add`, with the columns it measured), read by the publisher (`snapshot`): a lock keeps
    the two apart."""

    def __init__(self, rules: CountRules = CountRules()) -> None:
        self.rules = rules
        self._mapping = LogarithmicMapping(RELATIVE_ACCURACY)
        self._total = _Tally(self._mapping)
        self._windows: dict[int, _Tally] = {}
        self._at_or_under = 0
        self._lock = threading.Lock()

    def add(self, cols: Columns) -> None:
        if not len(cols):
            return
        ok = cols.code == OK
        with self._lock:
            self._total.add(cols.latency, ok)
            if self.rules.bound_s is not None:
                # The one comparison with a bound (`common.slo_judge`), as the row's.
                latency = cols.latency[ok].astype(np.float64)
                self._at_or_under += count_at_or_under(latency, self.rules.bound_s)
            if self.rules.window_s is not None:
                index = np.floor(
                    (cols.completion.astype(np.float64) - self.rules.windows_from)
                    / self.rules.window_s
                ).astype(np.int64)
                for i in np.unique(index[index >= 0]).tolist():
                    mine = index == i
                    tally = self._windows.setdefault(i, _Tally(self._mapping))
                    tally.add(cols.latency[mine], ok[mine])

    def snapshot(self, in_flight: int, watermark: float) -> dict[str, Any]:
        """What a part publishes: its counts, each sketch's encoding, how many requests it
        has in flight and its `watermark` (every completion before that offset is counted)."""
        with self._lock:
            return {
                "ok": self._total.ok,
                "errors": self._total.errors,
                "at_or_under": self._at_or_under,
                "sketch": _encode(self._total.sketch),
                "windows": {
                    i: (t.ok, t.errors, _encode(t.sketch)) for i, t in self._windows.items()
                },
                "in_flight": in_flight,
                "watermark": watermark,
            }


@dataclass
class WindowCounts:
    """One stability window's completions over every part."""

    ok: int = 0
    errors: int = 0
    sketch: BaseDDSketch = field(default_factory=new_sketch)


class MergedCounts:
    """The parts' latest snapshots, merged: what stop rules and live figures read."""

    def __init__(self, snapshots: Sequence[dict[str, Any] | None], lost: Sequence[bool]):
        self.by_part = tuple(0 if s is None else s["ok"] + s["errors"] for s in snapshots)
        present = [s for s in snapshots if s is not None]
        self.ok = sum(s["ok"] for s in present)
        self.errors = sum(s["errors"] for s in present)
        self.at_or_under = sum(s["at_or_under"] for s in present)
        self.in_flight = sum(s["in_flight"] for s in present)
        # Every completion before this offset is counted by every part still running (a
        # lost part counts no more); -inf until each has published once.
        marks = [
            -math.inf if s is None else s["watermark"]
            for s, gone in zip(snapshots, lost, strict=True)
            if not gone
        ]
        self.watermark = min(marks, default=math.inf)
        self._present = present

    @property
    def completed(self) -> int:
        return self.ok + self.errors

    def sketch(self) -> BaseDDSketch:
        merged = new_sketch()
        for s in self._present:
            merged.merge(decode(s["sketch"]))
        return merged

    def window(self, index: int) -> WindowCounts:
        merged = WindowCounts()
        for s in self._present:
            part = s["windows"].get(index)
            if part is not None:
                merged.ok += part[0]
                merged.errors += part[1]
                merged.sketch.merge(decode(part[2]))
        return merged


class LiveRate:
    """The completion rate between successive figures."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None

    def figures(self, merged: MergedCounts, elapsed: float) -> LiveFigures:
        rate = 0.0
        if self._last is not None and elapsed > self._last[0]:
            rate = (merged.completed - self._last[1]) / (elapsed - self._last[0])
        self._last = (elapsed, merged.completed)
        sketch = merged.sketch()
        p50, p90, p99 = (sketch.get_quantile_value(q) for q in (0.5, 0.9, 0.99))
        return LiveFigures(
            elapsed=elapsed,
            completed=merged.completed,
            errors=merged.errors,
            sent=merged.completed + merged.in_flight,
            rate=rate,
            p50=p50,
            p90=p90,
            p99=p99,
            by_generator=merged.by_part,
        )
