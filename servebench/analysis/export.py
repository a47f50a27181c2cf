"""A run's trials in the forms other tools read: perf_analyzer's CSV, and the plain trial
table as CSV, Parquet or JSON.

perf_analyzer's CSV (its `-f` file; ReportWriter::GenerateReport in report_writer.cc) is
one file per measured configuration, one row per load level sorted by inferences/s: the
first column is `Concurrency` (closed loop) or `Request Rate` (open loop), then
Inferences/Second, Client Send, the server's split when the server is Triton (Network+
Server Send/Recv, Server Queue, Server Compute Input/Infer/Output), Client Recv and the
p50/p90/p95/p99 latencies — every time in whole microseconds, truncated as its
nanosecond integers divided by 1000 are. Dashboards and Model Analyzer-style plots that
read those files read servebench's runs the same way.

What differs, and is said in the notes rather than in the file (a comment line would
break the readers): latency percentiles are servebench's — from the intended send time
in open loop, where perf_analyzer times from the actual send; a time the run did not
measure is an empty cell, never a 0 (gRPC's client send, the server's split for a server
without Triton's metrics); an SLO-search trial is the one row of its chosen rate, with
server times taken over all of its steps. Failed, INVALID and trace-driven trials have no
row.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from servebench.analysis.labels import missing
from servebench.analysis.loader import RunData
from servebench.analysis.search import search_steps
from servebench.common.serving_apis import serving_api
from servebench.results import TRIAL_SCHEMA

FORMATS = ("perf_analyzer", "csv", "parquet", "json")
CONCURRENCY, REQUEST_RATE = "Concurrency", "Request Rate"
PERCENTILES = ((50, "latency_p50"), (90, "latency_p90"), (95, "latency_p95"), (99, "latency_p99"))
# perf_analyzer writes the server's split only when it has the server's statistics:
# Triton's (include_server_stats); TF Serving runs get none of these columns.
SERVER_COLUMNS = (
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
)
_SERVER_FIGURES = (
    "server_queue_s",
    "server_compute_input_s",
    "server_compute_infer_s",
    "server_compute_output_s",
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


def perf_analyzer_header(mode: str, server_stats: bool) -> list[str]:
    """perf_analyzer's header for `mode` (CONCURRENCY or REQUEST_RATE), without response
    cache columns, decoupled models or --verbose-csv (none of which servebench measures)."""
    return [
        mode,
        "Inferences/Second",
        "Client Send",
        *(SERVER_COLUMNS if server_stats else ()),
        "Client Recv",
        *(f"p{p} latency" for p, _ in PERCENTILES),
    ]


@dataclass
class PerfAnalyzerFile:
    """One configuration's rows in perf_analyzer's layout."""

    name: str  # a file name stem: setting, model, batch, link
    mode: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def text(self) -> str:
        lines = [",".join(self.header), *(",".join(row) for row in self.rows)]
        return "\n".join(lines) + "\n"


@dataclass
class Export:
    """What an export wrote, and what a reader of the files should know."""

    paths: list[Path]
    notes: list[str]


def perf_analyzer_files(trials: pd.DataFrame) -> tuple[list[PerfAnalyzerFile], list[str]]:
    """The run's trials as perf_analyzer CSVs (one per setting × model × batch × link ×
    mode), and notes on what the files cannot say."""
    notes: list[str] = []
    usable = trials[trials["status"] == "ok"]
    skipped = len(trials) - len(usable)
    invalid = usable["verdict"] == "INVALID"
    if invalid.any():
        skipped += int(invalid.sum())
        usable = usable[~invalid]
    if skipped:
        notes.append(f"{skipped} failed or INVALID trials have no row")
    trace = usable["load_kind"] == "trace"
    if trace.any():
        notes.append(f"{int(trace.sum())} trace-driven trials have no row (no single rate)")
        usable = usable[~trace]
    chosen = _chosen_rates(usable)
    if chosen:
        notes.append(
            "SLO-search trials: one row at the chosen rate; their server times cover every "
            "search step"
        )
    opened = ~(usable["load_kind"].isin(["concurrency", "users"]) | (usable["mode"] == "closed"))
    if opened.any():
        notes.append(
            "latency percentiles are servebench's: from the intended send time in open loop "
            "(perf_analyzer times from the actual send)"
        )
    files: dict[tuple[Any, ...], PerfAnalyzerFile] = {}
    sort_keys: dict[tuple[Any, ...], list[float]] = {}
    untimed: set[str] = set()
    for row in usable.to_dict("records"):
        closed = row.get("load_kind") in ("concurrency", "users") or row.get("mode") == "closed"
        mode = CONCURRENCY if closed else REQUEST_RATE
        server_stats = _has_stage_times(row)
        key = (row["setting"], row["model"], row["batch_size"], row["link"], mode, server_stats)
        if key not in files:
            files[key] = PerfAnalyzerFile(
                _file_name(row, mode), mode, perf_analyzer_header(mode, server_stats)
            )
            sort_keys[key] = []
        level = _level(row, mode, chosen)
        if level is None:
            continue
        cells, missed = _cells(row, level, server_stats)
        untimed.update(missed)
        files[key].rows.append(cells)
        sort_keys[key].append(float(row.get("throughput_ips") or 0.0))
    for key, file in files.items():
        order = sorted(range(len(file.rows)), key=lambda i: sort_keys[key][i])
        file.rows = [file.rows[i] for i in order]
    if untimed:
        notes.append(f"empty cells where the run did not measure: {', '.join(sorted(untimed))}")
    return [f for f in files.values() if f.rows], notes


def _has_stage_times(row: dict[str, Any]) -> bool:
    """Whether perf_analyzer would show the server's split for this row's server: unless
    its API is one known to publish no per-stage times (TF Serving); a raw HTTP endpoint
    or a name servebench does not know keeps the columns, empty where unmeasured."""
    api = serving_api(str(row.get("server_kind") or ""))
    return api is None or api.stage_times


def _chosen_rates(trials: pd.DataFrame) -> dict[str, float]:
    """Each search trial's chosen (offered) rate: the one its row's figures belong to."""
    steps = search_steps(trials)
    if steps.empty:
        return {}
    picked = steps[steps["chosen"].astype(bool)]
    return dict(zip(picked["trial_id"], picked["rate"], strict=True))


def _level(row: dict[str, Any], mode: str, chosen: dict[str, float]) -> str | None:
    if mode == CONCURRENCY:
        level = row.get("concurrency")
        level = row.get("load_level") if missing(level) else level
        return None if missing(level) else str(int(level))
    if row.get("load_kind") == "search":
        rate = chosen.get(str(row["trial_id"]))
        return None if rate is None else _double(rate)
    rate = row.get("target_rate")
    rate = row.get("load_level") if missing(rate) else rate
    return None if missing(rate) else _double(rate)


def _cells(row: dict[str, Any], level: str, server_stats: bool) -> tuple[list[str], set[str]]:
    """One perf_analyzer row and the names of the figures it had to leave empty."""
    missed: set[str] = set()

    def us(column: str, what: str) -> str:
        value = row.get(column)
        if missing(value):
            missed.add(what)
            return ""
        return microseconds(value)

    cells = [level, _double(row.get("throughput_ips") or 0.0), us("client_send_s", "client send")]
    if server_stats:
        wait = row.get("network_server_s")
        if missing(wait):
            missed.add("network+server")
            network = ""
        else:
            network = microseconds(max(float(wait) - _accounted(row), 0.0))
        cells.append(network)
        cells += [us(c, c.removesuffix("_s").replace("_", " ")) for c in _SERVER_FIGURES]
    cells.append(us("client_recv_s", "client recv"))
    cells += [us(column, f"p{p} latency") for p, column in PERCENTILES]
    return cells, missed


def _accounted(row: dict[str, Any]) -> float:
    """The server's accounted time per request, as perf_analyzer subtracts it from the
    client's wait to leave network+server: queue plus compute (the total where the run
    has it, else its parts); what the server did not report counts as 0."""
    compute = row.get("server_compute_s")
    if missing(compute):
        parts = [row.get(c) for c in _SERVER_FIGURES[1:]]
        compute = sum(float(v) for v in parts if not missing(v))
    queue = row.get("server_queue_s")
    return (0.0 if missing(queue) else float(queue)) + float(compute)


def microseconds(seconds: float) -> str:
    """Whole microseconds as perf_analyzer writes them: whole nanoseconds // 1000 (a
    thousandth of a nanosecond is allowed for the float's error: 0.000123 s × 1e9 is
    122999.99999999999)."""
    return str(math.floor(float(seconds) * 1e9 + 1e-3) // 1000)


def _double(value: float) -> str:
    """A double as C++'s default stream formatting writes it (six significant digits)."""
    return f"{float(value):g}"


def _file_name(row: dict[str, Any], mode: str) -> str:
    parts = [
        row.get("setting") or row.get("server"),
        row.get("model"),
        f"b{int(row['batch_size'])}",
    ]
    parts += [row.get("link"), "concurrency" if mode == CONCURRENCY else "request_rate"]
    return _UNSAFE.sub("_", "__".join(str(p) for p in parts if not missing(p))).strip("_")


# -- the plain trial table --------------------------------------------------------------


def trial_table(trials: pd.DataFrame) -> pa.Table:
    """trials.csv as a typed Arrow table: TRIAL_SCHEMA's types, units and meanings (in
    each field's metadata), in its order; a column the schema lacks is kept as text."""
    fields, arrays = [], []
    for f in TRIAL_SCHEMA:
        if f.name not in trials.columns:
            continue
        values = [None if missing(v) else v for v in trials[f.name]]
        arrays.append(pa.array(values, type=f.type, from_pandas=True))
        fields.append(f)
    for name in trials.columns:
        if name not in TRIAL_SCHEMA.names:
            arrays.append(pa.array([None if missing(v) else str(v) for v in trials[name]]))
            fields.append(pa.field(name, pa.string()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=TRIAL_SCHEMA.metadata))


def trial_json(data: RunData) -> dict[str, Any]:
    """The run, each column's unit and meaning, and one object per trial (null: not
    measured)."""
    table = trial_table(data.trials)
    columns = {
        f.name: {
            "type": str(f.type),
            "unit": (f.metadata or {}).get(b"unit", b"").decode(),
            "doc": (f.metadata or {}).get(b"doc", b"").decode(),
        }
        for f in table.schema
    }
    rows = [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]
    return {"run": data.run, "columns": columns, "trials": rows}


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def export(data: RunData, fmt: str, out: Path) -> Export:
    """Write `data` in `fmt` under `out` (a folder for perf_analyzer's files; a file, or a
    folder to hold `trials.<ext>`, for the plain table)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "perf_analyzer":
        files, notes = perf_analyzer_files(data.trials)
        if not files:
            raise ValueError(f"{data.path}: no ok, VALID trial to export")
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for file in files:
            path = out / f"{file.name}.csv"
            path.write_text(file.text())
            paths.append(path)
        return Export(paths, notes)
    path = out / f"trials.{fmt}" if out.is_dir() or not out.suffix else out
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        pa_csv.write_csv(trial_table(data.trials), path)
    elif fmt == "parquet":
        pq.write_table(trial_table(data.trials), path)
    else:
        path.write_text(json.dumps(trial_json(data), indent=2, default=str) + "\n")
    return Export([path], [])
