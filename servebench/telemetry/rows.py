"""Telemetry rows and `telemetry.parquet`: one row per measured value.

A row is (trial_id, timestamp, source, metric, value, labels). Long ("tidy") rows rather
than one column per metric, because what is measured differs by machine (no GPU here,
eight there) and by server (Triton's counters, TF Serving's histograms); labels hold what
tells series apart (GPU index, model name). Labels are stored as a JSON object string so
the file reads the same in pandas, DuckDB and Arrow without map-type quirks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from servebench.common.parquet import ParquetFile

SCHEMA = pa.schema(
    [
        ("trial_id", pa.string()),
        ("timestamp", pa.float64()),  # seconds since the epoch
        ("source", pa.string()),  # gpu, server_process, host, server_metrics
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("labels", pa.string()),  # JSON object, keys sorted
    ]
)


@dataclass(frozen=True)
class Reading:
    """One value a sampler read: metric name, value and the labels that identify it."""

    metric: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TelemetryRow:
    trial_id: str
    timestamp: float
    source: str
    metric: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def series(self) -> tuple[str, str, str]:
        """What identifies a time series: source, metric and labels."""
        return self.source, self.metric, labels_key(self.labels)


def labels_key(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(labels.items())), separators=(",", ":"))


def rows_to_table(rows: Iterable[TelemetryRow]) -> pa.Table:
    rows = list(rows)
    return pa.table(
        {
            "trial_id": [r.trial_id for r in rows],
            "timestamp": [float(r.timestamp) for r in rows],
            "source": [r.source for r in rows],
            "metric": [r.metric for r in rows],
            "value": [float(r.value) for r in rows],
            "labels": [labels_key(r.labels) for r in rows],
        },
        schema=SCHEMA,
    )


def table_to_rows(table: pa.Table) -> list[TelemetryRow]:
    data = table.to_pydict()
    return [
        TelemetryRow(t, ts, s, m, v, json.loads(lb))
        for t, ts, s, m, v, lb in zip(
            data["trial_id"], data["timestamp"], data["source"], data["metric"],
            data["value"], data["labels"], strict=True,
        )
    ]  # fmt: skip


def read_telemetry(path: Path) -> list[TelemetryRow]:
    return table_to_rows(pq.read_table(path, schema=SCHEMA))


class TelemetryWriter(ParquetFile):
    """Appends batches of rows to one Parquet file, one row group each.

    The file is valid once closed: a process killed before `close` leaves no footer and
    nothing readable. That is why a scenario run writes each trial's telemetry as its own
    closed file (`RunDirectory.write_trial_telemetry`) rather than through one writer.
    """

    def __init__(self, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, SCHEMA)

    def write(self, rows: Iterable[TelemetryRow]) -> None:
        if self._writer is None:
            raise ValueError(f"{self.path}: writer already closed")
        table = rows_to_table(rows)
        if table.num_rows:
            self._writer.write_table(table)


def write_telemetry(rows: Iterable[TelemetryRow], path: Path) -> Path:
    """Write rows as one Parquet file (replacing it); return the path."""
    with TelemetryWriter(path) as writer:
        writer.write(rows)
    return Path(path)
