"""A run's trials in the forms other tools read: perf_analyzer's CSV, LoadGen's summary
(its Server scenario), and the plain trial table as CSV, Parquet or JSON.

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
without Triton's metrics); an SLO-search trial is the one row of its chosen rate, its
server times from the telemetry samples taken during that step alone (the row's own
server columns span every step: one overloaded step would put the queue time above the
chosen rate's p50). Failed, INVALID and trace-driven trials have no row.

LoadGen's summary (`loadgen_summaries`; the layout of mlperf_log_summary.txt, LogSummary
in LoadGen's results.cc) is one text file per open-loop trial at one rate: scenario
Server, the target and achieved rates, min/max/mean and the 50/90/95/97/99/99.9th
percentile latencies in whole nanoseconds (servebench's nearest rank over the trial's
answered requests; LoadGen reads index floor(n·p) of the sorted latencies, one rank
higher when n·p is whole), the early-stopping result at the trial's SLO (`decides` at
LoadGen's confidence, one-sided 99 %) and servebench's verdict with its reasons. Each file
says it is not an MLPerf result: no accuracy run, no audit, servebench's own schedule.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from servebench.analysis.loader import RunData
from servebench.analysis.search import search_steps
from servebench.common.quantiles import decides, percentiles, requests_to_decide
from servebench.common.readable import missing
from servebench.common.serving_apis import serving_api
from servebench.common.slo_judge import count_at_or_under, judge_slo
from servebench.results import TRIAL_SCHEMA

FORMATS = ("perf_analyzer", "loadgen", "csv", "parquet", "json")
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


def perf_analyzer_files(
    trials: pd.DataFrame,
    records: pd.DataFrame | None = None,
    telemetry: pd.DataFrame | None = None,
) -> tuple[list[PerfAnalyzerFile], list[str]]:
    """The run's trials as perf_analyzer CSVs (one per setting × model × batch × link ×
    mode), and notes on what the files cannot say. `records` and `telemetry` (the run's
    files) give an SLO search's server times at its chosen step."""
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
            "SLO-search trials: one row at the chosen rate; their server times from the "
            "telemetry samples of that step alone (empty where it had fewer than two)"
        )
    step_times = _chosen_step_server_times(usable, records, telemetry) if chosen else {}
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
        if row.get("load_kind") == "search":
            row = {**row, **step_times.get(str(row["trial_id"]), _NO_SERVER_TIMES)}
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
    api = serving_api(str(row.get("api") or ""))
    return api is None or api.stage_times


def _chosen_rates(trials: pd.DataFrame) -> dict[str, float]:
    """Each search trial's chosen (offered) rate: the one its row's figures belong to."""
    steps = search_steps(trials)
    if steps.empty:
        return {}
    picked = steps[steps["chosen"].astype(bool)]
    return dict(zip(picked["trial_id"], picked["rate"], strict=True))


# A search row's server figures where its chosen step's cannot be told: empty, not the
# figures of every step.
_NO_SERVER_TIMES: dict[str, Any] = dict.fromkeys((*_SERVER_FIGURES, "server_compute_s"))


def _chosen_step_server_times(
    trials: pd.DataFrame, records: pd.DataFrame | None, telemetry: pd.DataFrame | None
) -> dict[str, dict[str, Any]]:
    """Per search trial, the server's split over its chosen step alone: the telemetry
    samples taken between that step's first intended send and last completion (its
    records, `<trial id>.sN`), reduced by `telemetry.aggregate` as the runner reduces a
    trial's. A step with fewer than two samples of the server's counters has none."""
    if records is None or telemetry is None or telemetry.empty:
        return {}
    from servebench.telemetry.aggregate import aggregate  # the one reduction of counters
    from servebench.telemetry.rows import TelemetryRow

    steps = search_steps(trials)
    picked = steps[steps["chosen"].astype(bool)]
    models = dict(zip(trials["trial_id"].astype(str), trials["model"], strict=True))
    found: dict[str, dict[str, Any]] = {}
    for trial_id, step_id in zip(picked["trial_id"].astype(str), picked["step_id"], strict=True):
        step = records[records["trial_id"] == step_id]
        if step.empty:
            continue
        start, end = float(step["intended_time"].min()), float(step["completion_time"].max())
        samples = telemetry[
            (telemetry["trial_id"] == trial_id) & telemetry["timestamp"].between(start, end)
        ]
        rows = [
            TelemetryRow(trial_id, float(r.timestamp), r.source, r.metric, float(r.value),
                         json.loads(r.labels) if r.labels else {})
            for r in samples.itertuples()
        ]  # fmt: skip
        model = models.get(trial_id)
        summary = aggregate(rows, model=None if missing(model) else str(model))
        found[trial_id] = {k: summary.get(k) for k in _NO_SERVER_TIMES}
    return found


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


# -- LoadGen's summary (Server scenario) -------------------------------------------------

# The percentiles LoadGen's summary lists (latency_percentiles in loadgen.cc), in order.
LOADGEN_PERCENTILES = (50.0, 90.0, 95.0, 97.0, 99.0, 99.9)
# LoadGen's early stopping is one-sided at 99 % (confidence 0.99 in its results.cc): the
# upper side of a two-sided 98 % interval, the level `decides` takes.
LOADGEN_LEVEL = 0.98
NOT_MLPERF = (
    "servebench trial in LoadGen's summary layout: not an MLPerf result "
    "(no accuracy run, no audit; servebench's schedule and client)"
)
_RULE = "=" * 48


def loadgen_summaries(
    trials: pd.DataFrame, records: pd.DataFrame | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """(file name stem, text) per open-loop, fixed-rate trial with records, in LoadGen's
    summary layout; notes say which trials have none and why."""
    notes: list[str] = []
    skipped: dict[str, int] = {}
    files = []
    answered: dict[str, np.ndarray] = {}
    if records is not None:
        latencies = records[records["ok"].astype(bool)].groupby("trial_id")["latency"]
        answered = {str(k): v.to_numpy(dtype=float) for k, v in latencies}
    for row in trials.to_dict("records"):
        why = _not_a_server_run(row)
        if why is None and answered.get(str(row["trial_id"])) is None:
            why = (
                "no answered request in the records"
                if records is not None
                else "the run has no records (records.parquet)"
            )
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        stem = f"{_file_name(row, REQUEST_RATE)}__{row['trial_id']}"
        files.append((stem, loadgen_summary(row, answered[str(row["trial_id"])])))
    for why, count in skipped.items():
        notes.append(f"{count} trial{'s' if count > 1 else ''} skipped: {why}")
    if files:
        notes.append(
            "latencies from the intended send time; percentiles nearest rank (LoadGen's "
            "index floor(n·p) is one rank higher where n·p is whole)"
        )
    return files, notes


def _not_a_server_run(row: dict[str, Any]) -> str | None:
    """Why a trial is no LoadGen Server run (one Poisson or constant rate, open loop)."""
    if row.get("load_kind") in ("concurrency", "users") or row.get("mode") == "closed":
        return "closed loop (LoadGen's Server scenario is open loop)"
    if row.get("status") != "ok":
        return "not ok (failed or interrupted)"
    if row.get("load_kind") == "search":
        return "SLO search (its records span several rates; a Server run has one target QPS)"
    if row.get("load_kind") == "trace" or missing(row.get("target_rate")):
        return "no single target rate (trace-driven)"
    return None


def loadgen_summary(row: dict[str, Any], latencies: np.ndarray) -> str:
    """One trial as LoadGen's mlperf_log_summary.txt lays it out (key : value lines),
    from its answered requests' latencies (seconds) and its trial row."""
    batch = int(row.get("batch_size") or 1)
    verdict = str(row.get("verdict") or "VALID")
    reasons = [r.strip() for r in str(row.get("verdict_reasons") or "").split(";") if r.strip()]
    stopping, met = _early_stopping(row, latencies)
    lines = [
        _RULE,
        NOT_MLPERF,
        _RULE,
        f"SUT name : {row.get('setting') or row.get('server')} / {row.get('model')}",
        "Scenario : Server",
        "Mode     : PerformanceOnly",
        f"Completed samples per second    : {float(row.get('throughput_ips') or 0.0):.2f}",
        f"Result is : {verdict}",
    ]
    if met is not None:
        # LoadGen's own rule: its percentile, the point, against the target (an interval
        # of one value to the judge); early stopping below is the interval's.
        point = _slo_latency(row, latencies)
        performance = judge_slo(
            point, point, percentile=float(row["slo_percentile"]), bound_s=float(row["slo_bound_s"])
        ).met
        lines.append(f"  Performance constraints satisfied : {'Yes' if performance else 'NO'}")
        lines.append(f"  Early stopping satisfied: {'Yes' if met else 'NO'}")
    if reasons:
        lines.append("Why (servebench's verdict):")
        lines += [f" * {reason}" for reason in reasons]
    lines += ["Early Stopping Result:", *stopping, "", _RULE, "Additional Stats", _RULE]
    scheduled = row.get("scheduled_rate")
    if not missing(scheduled):
        lines.append(f"Scheduled samples per second : {float(scheduled) * batch:.2f}")
    if not missing(row.get("achieved_rate")):
        lines.append(f"Sent queries per second : {float(row['achieved_rate']):.2f}")
    lines += [
        f"Min latency (ns)                : {_ns(latencies.min())}",
        f"Max latency (ns)                : {_ns(latencies.max())}",
        f"Mean latency (ns)               : {_ns(latencies.mean())}",
    ]
    values = percentiles(latencies, LOADGEN_PERCENTILES)
    for q, value in zip(LOADGEN_PERCENTILES, values, strict=True):
        lines.append(f"{q:.2f} percentile latency (ns)   : {_ns(value)}")
    lines += ["", _RULE, "Test Parameters Used", _RULE, f"samples_per_query : {batch}"]
    lines.append(f"target_qps : {float(row['target_rate']):g}")
    if _has_slo(row):
        lines.append(f"target_latency (ns): {_ns(row['slo_bound_s'])}")
        lines.append(f"target_latency_percentile : {float(row['slo_percentile']):g}")
    lines.append(f"servebench trial : {row['trial_id']}")
    if not missing(row.get("load")):
        lines.append(f"servebench load : {row['load']}")
    return "\n".join(lines) + "\n"


def _ns(seconds: float) -> str:
    """Whole nanoseconds, as LoadGen's summary writes its latencies."""
    return str(round(float(seconds) * 1e9))


def _has_slo(row: dict[str, Any]) -> bool:
    return not (missing(row.get("slo_bound_s")) or missing(row.get("slo_percentile")))


def _slo_latency(row: dict[str, Any], latencies: np.ndarray) -> float:
    return float(percentiles(latencies, [float(row["slo_percentile"])])[0])


def _early_stopping(row: dict[str, Any], latencies: np.ndarray) -> tuple[list[str], bool | None]:
    """LoadGen's early-stopping lines for the trial's SLO and whether it is satisfied
    (None: the run has no SLO)."""
    if not _has_slo(row):
        return [" * no SLO: the run set no latency bound to decide"], None
    q, bound = float(row["slo_percentile"]), float(row["slo_bound_s"])
    n = latencies.size
    over = n - count_at_or_under(latencies, bound)
    said = f"p{q:g} <= {bound * 1e3:g} ms, one-sided 99 %: {n} queries, {over} over the bound"
    decision = decides(n, n - over, q, LOADGEN_LEVEL)
    if decision == "met":
        return [" * Run successful.", f" * {said}"], True
    needed = requests_to_decide(n, over, q, LOADGEN_LEVEL) if decision is None else None
    lines = [" * Run unsuccessful.", f" * {said}"]
    if decision == "missed":
        lines.append(f" * the p{q:g} latency is over the bound at this confidence")
    elif needed is not None:
        lines.append(f" * undecided: about {needed} queries in all would decide it at this share")
    else:
        lines.append(" * undecided: the share over the bound sits at the percentile's edge")
    return lines, False


# -- the plain trial table --------------------------------------------------------------


def trial_table(trials: pd.DataFrame) -> pa.Table:
    """trials.csv as a typed Arrow table: TRIAL_SCHEMA's types, units and meanings (in
    each field's metadata), in its order (the loader's trials have every column, whatever
    run wrote them); a column the schema lacks is kept as text."""
    fields, arrays = [], []
    for f in TRIAL_SCHEMA:
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
    if fmt == "loadgen":
        return _write_loadgen(data, out)
    if fmt == "perf_analyzer":
        files, notes = perf_analyzer_files(data.trials, data.records, data.telemetry)
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


def _write_loadgen(data: RunData, out: Path) -> Export:
    """LoadGen summaries under the folder `out`, one `<trial>_summary.txt` per trial."""
    files, notes = loadgen_summaries(data.trials, data.records)
    if not files:
        why = "; ".join(notes) or "no trial"
        raise ValueError(f"{data.path}: no open-loop trial to export as LoadGen's summary ({why})")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, text in files:
        path = out / f"{stem}_summary.txt"
        path.write_text(text)
        paths.append(path)
    return Export(paths, notes)
