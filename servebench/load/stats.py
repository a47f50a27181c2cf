"""Statistics computed from per-request records.

`Columns` is the part of the records statistics need; it comes either from the chunks a
running engine produces (`Measurements`, kept compact: float32, offsets from the run's
start, about 17 bytes a request) or from a records table read back from Parquet
(`columns_from_table`). Both go through the same `summarize`, so a summary can always be
recomputed from the file.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servebench.common.quantiles import CONFIDENCE, percentile, percentile_bounds
from servebench.load.records import OK, Chunk, kind_code, kind_name
from servebench.load.summary import (
    LATE_THRESHOLD,
    PERCENTILE_FIELDS,
    LoadSummary,
    WindowStats,
)
from servebench.results import CLIENT_SPLIT_COLUMNS

PERCENTILES = tuple(PERCENTILE_FIELDS.values())


_FIELDS = (
    "latency",
    "lag",
    "send",
    "completion",
    "code",
    "batch_size",
    "client_send",
    "client_recv",
    "network_server",
    "model",
)


@dataclass
class Columns:
    """One entry per measured request; times are seconds from any common origin.

    The client-side split (seconds, NaN where not timed; all NaN when not given):
    `client_send` and `client_recv` as the client timed them, and `network_server`, what
    is left of completion − actual send once both are taken off (a send the client could
    not time counts as 0, so for gRPC it holds the send too; NaN where the receive was
    not timed). `model`: the mix's model each request went to, 1 + its index in the mix
    (`load.mix`); 0 throughout for a load of one model.
    """

    latency: np.ndarray
    lag: np.ndarray  # actual send - intended send
    send: np.ndarray
    completion: np.ndarray
    code: np.ndarray  # 0 = ok, else records.ERROR_CODE
    batch_size: np.ndarray
    client_send: np.ndarray | None = None
    client_recv: np.ndarray | None = None
    network_server: np.ndarray | None = None
    model: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("client_send", "client_recv", "network_server"):
            if getattr(self, name) is None:
                setattr(self, name, np.full(self.code.size, np.nan, np.float32))
        if self.model is None:
            self.model = np.zeros(self.code.size, np.int8)

    def __len__(self) -> int:
        return int(self.code.size)

    def select(self, mask: np.ndarray | slice) -> Columns:
        return Columns(*(getattr(self, name)[mask] for name in _FIELDS))

    @staticmethod
    def concat(parts: Sequence[Columns]) -> Columns:
        if not parts:
            f = np.empty(0, np.float32)
            return Columns(f, f, f, f, np.empty(0, np.int8), np.empty(0, np.int32))
        return Columns(*(np.concatenate([getattr(p, name) for p in parts]) for name in _FIELDS))


def network_server(
    send: np.ndarray, completion: np.ndarray, client_send: np.ndarray, client_recv: np.ndarray
) -> np.ndarray:
    """Per request: completion − send − client send − client recv (float64 inputs: epoch
    or perf_counter times); see `Columns`."""
    return (completion - send) - np.nan_to_num(client_send, nan=0.0) - client_recv


class Measurements:
    """The compact columns of every measured request of one run, fed chunk by chunk.

    `add` runs on the writer thread and readers run on the event loop, hence the lock.
    """

    def __init__(self, origin: float, *, batch_size: int, latency_from_send: bool):
        self.origin = origin
        self.batch_size = batch_size
        self.latency_from_send = latency_from_send
        self._parts: list[Columns] = []
        self._lock = threading.Lock()

    def add(self, chunk: Chunk) -> Columns:
        """Add a chunk's requests; returns their columns (for a reader of the same)."""
        if not len(chunk):
            return Columns.concat([])
        start = chunk.send if self.latency_from_send else chunk.intended
        part = Columns(
            latency=(chunk.completion - start).astype(np.float32),
            lag=(chunk.send - chunk.intended).astype(np.float32),
            send=(chunk.send - self.origin).astype(np.float32),
            completion=(chunk.completion - self.origin).astype(np.float32),
            code=chunk.code.copy(),
            batch_size=np.full(len(chunk), self.batch_size, dtype=np.int32),
            client_send=chunk.client_send.astype(np.float32),
            client_recv=chunk.client_recv.astype(np.float32),
            network_server=network_server(
                chunk.send, chunk.completion, chunk.client_send, chunk.client_recv
            ).astype(np.float32),
            model=np.array(chunk.model, np.int8),
        )
        with self._lock:
            self._parts.append(part)
        return part

    def extend(self, other: Columns) -> None:
        with self._lock:
            self._parts.append(other)

    def columns(self) -> Columns:
        with self._lock:
            merged = Columns.concat(self._parts)
            self._parts = [merged] if len(merged) else []
        return merged

    def since(self, count: int) -> Columns:
        """The requests added after the first `count`, in the order added: what a reader
        polling the run has not seen yet, without concatenating what it has (`columns`
        copies every request at each call)."""
        with self._lock:
            parts = list(self._parts)
        new: list[Columns] = []
        for part in parts:
            n = len(part)
            if count < n:
                new.append(part if count <= 0 else part.select(slice(count, None)))
            count -= n
        return Columns.concat(new)

    def completed_between(self, start: float, end: float) -> Columns:
        """Requests that completed in [start, end) (offsets from the origin)."""
        cols = self.columns()
        return cols.select((cols.completion >= start) & (cols.completion < end))


def columns_from_table(
    table: pa.Table, *, origin: float | None = None, latency_from_send: bool | None = None
) -> Columns:
    """Columns from a records table; latency is taken as recorded unless told otherwise.

    `origin` is the wall-clock time offsets count from (the schedule start); by default
    the earliest intended send. (Its loads are of one model: Locust's, and those split over
    processes, which a mix is not.)
    """
    send = table["send_time"].to_numpy()
    intended = table["intended_time"].to_numpy()
    completion = table["completion_time"].to_numpy()
    if latency_from_send is None:
        latency = table["latency"].to_numpy()
    else:
        latency = completion - (send if latency_from_send else intended)
    if origin is None:
        origin = float(pc.min(table["intended_time"]).as_py() or 0.0) if table.num_rows else 0.0
    kinds = table["error_kind"].to_pylist()
    split = {
        name: (
            table[name].to_numpy(zero_copy_only=False).astype(np.float64)  # null → NaN
            if name in table.column_names
            else np.full(table.num_rows, np.nan)  # a run from before the split
        )
        for name in CLIENT_SPLIT_COLUMNS
    }
    client_send, client_recv = split["client_send_s"], split["client_recv_s"]
    return Columns(
        latency=latency,
        lag=send - intended,
        send=send - origin,
        completion=completion - origin,
        code=np.fromiter((kind_code(k) for k in kinds), dtype=np.int8, count=len(kinds)),
        batch_size=table["batch_size"].to_numpy().astype(np.int32),
        client_send=client_send,
        client_recv=client_recv,
        network_server=network_server(send, completion, client_send, client_recv),
    )


def rate(count: int, span: float) -> float:
    """Events per second over a span holding `count` events: (n - 1) gaps in the span."""
    return (count - 1) / span if count >= 2 and span > 0 else 0.0


def measured_span(cols: Columns) -> float:
    """Seconds from the first measured send to the last measured completion, failures included.

    Throughput is successes over this span. Taking the span of the successes alone would
    let a server that died early keep its healthy rate: 882 answers in the 4.4 s before it
    died and 1,518 refusals after read as 200 req/s instead of 73.
    """
    if not len(cols):
        return 0.0
    return max(float(cols.completion.max()) - float(cols.send.min()), 0.0)


def summarize(
    cols: Columns,
    *,
    mode: str,
    target_rate: float | None,
    late_threshold: float = LATE_THRESHOLD,
    confidence: float = CONFIDENCE,
) -> LoadSummary:
    """Everything measured about a set of requests, each latency percentile with its
    interval at two-sided `confidence`; the verdict is added by the caller."""
    n = len(cols)
    ok_mask = cols.code == OK
    ok = int(ok_mask.sum())
    latency = cols.latency[ok_mask].astype(np.float64)
    codes, counts = np.unique(cols.code[~ok_mask], return_counts=True)
    errors_by_kind = {kind_name(int(c)): int(k) for c, k in zip(codes, counts, strict=True)}
    lag = cols.lag.astype(np.float64)
    send = cols.send.astype(np.float64)
    send_span = float(send.max() - send.min()) if n >= 2 else 0.0
    intended = send - lag
    intended_span = float(intended.max() - intended.min()) if n >= 2 else 0.0
    span = measured_span(cols)
    throughput = ok / span if span > 0 else 0.0
    mean_batch = float(cols.batch_size[ok_mask].mean()) if ok else 0.0
    quantiles = {q: percentile(latency, q) for q in PERCENTILES}
    lows, highs = percentile_bounds(latency, PERCENTILES, confidence)
    bounds = {
        f"{name}_{side}": float(values[i])
        for i, name in enumerate(PERCENTILE_FIELDS)
        for side, values in (("low", lows), ("high", highs))
    }
    return LoadSummary(
        mode=mode,
        count=n,
        ok=ok,
        errors=n - ok,
        errors_by_kind=errors_by_kind,
        target_rate=target_rate,
        achieved_rate=rate(n, send_span),
        scheduled_rate=rate(n, intended_span) if mode == "open" else None,
        throughput_rps=throughput,
        throughput_ips=throughput * mean_batch,
        latency_mean=float(latency.mean()) if ok else float("nan"),
        latency_p50=quantiles[50.0],
        latency_p90=quantiles[90.0],
        latency_p95=quantiles[95.0],
        latency_p99=quantiles[99.0],
        latency_p99_9=quantiles[99.9],
        latency_max=float(latency.max()) if ok else float("nan"),
        schedule_lag_p99=percentile(lag, 99.0),
        late_share=float((lag > late_threshold).mean()) if n else 0.0,
        duration=span,
        error_rate=(n - ok) / n if n else 0.0,
        client_send_s=_mean(cols.client_send[ok_mask]),
        client_recv_s=_mean(cols.client_recv[ok_mask]),
        network_server_s=_mean(cols.network_server[ok_mask]),
        latencies=latency,
        confidence_level=confidence,
        **bounds,
    )


def mix_figures(
    cols: Columns, models: Sequence[str], weights: Sequence[float]
) -> dict[str, dict[str, float | int]]:
    """Per model of a mix (`Columns.model` codes in `models`' order): its weight, its share
    of the requests, its counts, and the p50 and p99 of its successful requests' latencies
    (nearest rank, as the whole load's; NaN where it had none)."""
    n = len(cols)
    ok_mask = cols.code == OK
    figures: dict[str, dict[str, float | int]] = {}
    for code, (model, weight) in enumerate(zip(models, weights, strict=True), start=1):
        mine = cols.model == code
        count = int(mine.sum())
        ok = int((mine & ok_mask).sum())
        latency = cols.latency[mine & ok_mask].astype(np.float64)
        figures[model] = {
            "weight": float(weight),
            "share": count / n if n else float("nan"),
            "count": count,
            "ok": ok,
            "errors": count - ok,
            "latency_p50": percentile(latency, 50.0),
            "latency_p99": percentile(latency, 99.0),
        }
    return figures


def _mean(values: np.ndarray) -> float:
    """The mean of the values that were timed (NaN: not timed); NaN if none was."""
    timed = values[np.isfinite(values)].astype(np.float64)
    return float(timed.mean()) if timed.size else float("nan")


def window_stats(index: int, cols: Columns, start: float, end: float, q: float) -> WindowStats:
    """perf_analyzer's window numbers: completions in the window and their percentile."""
    ok_mask = cols.code == OK
    ok = int(ok_mask.sum())
    return WindowStats(
        index=index,
        start=start,
        end=end,
        completed=len(cols),
        errors=len(cols) - ok,
        throughput_rps=ok / (end - start),
        latency=percentile(cols.latency[ok_mask].astype(np.float64), q),
    )


def agree(windows: Sequence[WindowStats], tolerance: float) -> bool:
    """True when every window's throughput and latency lie within ±tolerance of their mean."""
    if not windows:
        return False
    for values in ([w.throughput_rps for w in windows], [w.latency for w in windows]):
        arr = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            return False
        mean = arr.mean()
        if mean <= 0 or np.any(np.abs(arr - mean) > tolerance * mean):
            return False
    return True
