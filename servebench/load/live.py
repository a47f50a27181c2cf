"""Live figures of a gang while it runs: each generator's latency sketch, merged.

A gang's final figures come from its merged records, which travel once each generator
ends (`load.gang`). While it runs, each generator keeps a DDSketch of its completed
requests' latencies beside its counts (`GeneratorSketch`, fed from the record batches its
engine writes), and publishes it every `PUBLISH_EVERY` s in the sketch's own protobuf
encoding (its bins, never the samples). The coordinator merges every generator's latest
sketch (`LiveMerge`: a sketch merge adds bin counts, so the merged sketch is the sketch
of all their samples; percentiles are never averaged) into `LiveFigures`, what a live
display shows, like Locust's "RPS / failures / p50 / p99".

DDSketch (`ddsketch` on the package index) rather than HdrHistogram: its guarantee is a
relative accuracy over any range of values with nothing to configure (HdrHistogram needs
integer values in a range fixed up front), its merge is exact, and its encoding is a
documented protobuf shared with the other DDSketch implementations.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from ddsketch.ddsketch import BaseDDSketch
from ddsketch.mapping import LogarithmicMapping
from ddsketch.pb.ddsketch_pb2 import DDSketch as SketchMessage
from ddsketch.pb.proto import DDSketchProto
from ddsketch.store import DenseStore

from servebench.load.records import RecordSink

# Every live percentile is within 1 % of the value at its rank (the sketch's guarantee).
RELATIVE_ACCURACY = 0.01
# Seconds between a generator's snapshots (and the coordinator's updates).
PUBLISH_EVERY = 1.0


@dataclass(frozen=True)
class LiveFigures:
    """A gang's figures so far: measured requests completed (each generator's share in
    `by_generator`), failures, the completion rate over the last interval and the
    latency percentiles (s) of the merged sketch, each within `relative_accuracy` of the
    latency at the sketch's rank, q(n - 1) (the records' nearest rank, ceil(qn), may be one
    further: the final figures, from the records, are the ones to quote)."""

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
    mapping at hand for `GeneratorSketch.add`)."""
    return BaseDDSketch(
        mapping=mapping or LogarithmicMapping(RELATIVE_ACCURACY),
        store=DenseStore(),
        negative_store=DenseStore(),
        zero_count=0.0,
    )


def decode(encoded: bytes) -> BaseDDSketch:
    """A sketch from its protobuf encoding (`GeneratorSketch.snapshot`)."""
    message = SketchMessage()
    message.ParseFromString(encoded)
    return DDSketchProto.from_proto(message)


class GeneratorSketch:
    """One generator's completed requests: counts, and a sketch of the ok ones' latencies
    (the ones the final percentiles are taken over). Fed by the engine's writer thread,
    read by the publisher: a lock keeps the two apart."""

    def __init__(self) -> None:
        self._mapping = LogarithmicMapping(RELATIVE_ACCURACY)
        self._sketch = new_sketch(self._mapping)
        self._log_gamma = math.log(self._mapping.gamma)
        self._lock = threading.Lock()
        self.ok = 0
        self.errors = 0

    def add(self, latency: np.ndarray, ok: np.ndarray) -> None:
        """Add a batch of requests. Adding each value costs 1.7-2.8 µs of Python (measured
        here), taken from the event loop's share of the GIL at tens of thousands of
        requests per second; instead each bin gets its count at once (0.1-0.25 µs a request
        in a chunk of 8192, the same as one by one in a second's few dozen at a low rate).
        The bin of a value is the
        sketch's logarithmic mapping, key = ceil(ln v / ln gamma), and the bin's own value
        stands for it, so the sketch's bins are those of adding each value."""
        good = latency[ok]
        positive = good[good > 0]
        keys, counts = np.unique(np.ceil(np.log(positive) / self._log_gamma), return_counts=True)
        with self._lock:
            for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
                self._sketch.add(self._mapping.value(int(key)), float(count))
            if good.size > positive.size:
                self._sketch.add(0.0, float(good.size - positive.size))
            self.ok += int(good.size)
            self.errors += int(ok.size - good.size)

    def snapshot(self, in_flight: int) -> dict[str, Any]:
        """What a generator publishes: its counts and its sketch's protobuf encoding."""
        with self._lock:
            encoded = DDSketchProto.to_proto(self._sketch).SerializeToString()
            ok, errors = self.ok, self.errors
        return {"ok": ok, "errors": errors, "in_flight": in_flight, "sketch": encoded}


class LiveSink:
    """A record sink that feeds a `GeneratorSketch` on its way to `inner`."""

    def __init__(self, inner: RecordSink, sketch: GeneratorSketch):
        self.inner = inner
        self.sketch = sketch

    def write(self, batch: pa.RecordBatch) -> None:
        self.sketch.add(
            batch.column("latency").to_numpy(zero_copy_only=False),
            batch.column("ok").to_numpy(zero_copy_only=False),
        )
        self.inner.write(batch)

    def close(self) -> None:
        self.inner.close()


class LiveMerge:
    """The coordinator's side: the generators' latest snapshots merged into `LiveFigures`."""

    def __init__(self, generators: int):
        self._latest: list[dict[str, Any] | None] = [None] * generators
        self._last: tuple[float, int] | None = None  # (elapsed, completed) at the last figures

    def update(self, index: int, snapshot: dict[str, Any]) -> None:
        self._latest[index] = snapshot

    def figures(self, elapsed: float) -> LiveFigures:
        merged = new_sketch()
        by_generator = []
        errors = sent = 0
        for snapshot in self._latest:
            if snapshot is None:
                by_generator.append(0)
                continue
            merged.merge(decode(snapshot["sketch"]))
            done = snapshot["ok"] + snapshot["errors"]
            by_generator.append(done)
            errors += snapshot["errors"]
            sent += done + snapshot["in_flight"]
        completed = sum(by_generator)
        rate = 0.0
        if self._last is not None and elapsed > self._last[0]:
            rate = (completed - self._last[1]) / (elapsed - self._last[0])
        self._last = (elapsed, completed)
        p50, p90, p99 = (merged.get_quantile_value(q) for q in (0.5, 0.9, 0.99))
        return LiveFigures(
            elapsed=elapsed,
            completed=completed,
            errors=errors,
            sent=sent,
            rate=rate,
            p50=p50,
            p90=p90,
            p99=p99,
            by_generator=tuple(by_generator),
        )
