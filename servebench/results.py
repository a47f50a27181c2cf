"""The result directory of one run (DESIGN.md's contract), written as the run goes.

    results/<run-id>/
      scenario.yaml        the scenario as run
      run.json             machine, versions, start/end, status and why, warnings
      records/<trial>.parquet   one file per trial, streamed while the trial runs
      telemetry/<trial>.parquet one closed file per trial, written when the trial ends
      records.parquet      every per-request record of the run   } merged from the per-trial
      telemetry.parquet    samples from the telemetry samplers   } files when the run ends
      trials.csv           one summary row per trial (a replicate), rewritten after each
      settings.csv         one row per setting over its replicates (median, interval, CV)
      cold_start.csv       server start and model load timings
      overhead_raw.csv     `servebench overhead`: every probe figure, per side and repetition
      overhead.csv         `servebench overhead`: host vs container per metric (statistics)

Every file is either complete or recoverable after a kill at any instant: whole files are
written to a hidden temp file and renamed over the old one, and the only file written in
place (the records of the trial in flight) belongs to a trial with no summary row yet, so
`recover` removes what a kill tore and --resume runs that trial again. A full disk fails
the write with the path it could not write (`OSError.filename`) and leaves no temp file.

Every run.json, trials.csv row and settings.csv row says which result format it was
written in (`format_version`, `FORMAT_VERSION` today; a file without one is format 1, the
shape of every run written before versions). Readers never ask: `upgrade` brings what was
read from an older run to today's shape, once, where the files are read (`read_run_json`,
`RunDirectory.open`, and `analysis.loader`); what each version changed is
`FORMAT_HISTORY`.

Nothing here knows how a trial runs: the scenario runner and the Locust integration both
hand finished rows over, so this contract sits below both and imports nothing of
servebench's own. It also defines the two row shapes every producer writes and every
reader reads: `RECORD_SCHEMA` (records.parquet) and `TRIAL_SCHEMA` (trials.csv).
"""

from __future__ import annotations

import errno
import json
import math
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, make_dataclass
from datetime import UTC, datetime
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from servebench.common.errors import ServebenchError
from servebench.common.quantiles import MET, MISSED, UNDECIDED
from servebench.common.textfile import TextFileError, read_json_object
from servebench.common.verdict_codes import VerdictCode, join_codes

RUN_FILE = "run.json"
TRIALS_FILE = "trials.csv"
RECORDS_FILE = "records.parquet"
RECORDS_DIR = "records"
TELEMETRY_FILE = "telemetry.parquet"
TELEMETRY_DIR = "telemetry"
COLD_START_FILE = "cold_start.csv"
SETTINGS_FILE = "settings.csv"
# cold_start.csv: one row per phase of one start of a server setting (servers.cold_start
# measures them; `model` is "" for container_start and server_ready, which are the
# server's), phases in order. container_start (the engine creating and starting the
# container) only for servers in containers, whose server_ready counts from then on.
COLD_START_COLUMNS = ("server", "setting", "model", "phase", "repeat", "seconds")
COLD_START_PHASES = (
    "container_start", "server_ready", "model_load", "first_inference", "warm_median",
)  # fmt: skip
SCENARIO_FILE = "scenario.yaml"
# A configuration search's path (`tune:`): per server, its method, objective and every step
# (setting, trials, objective value, decision and why); written by the scenario runner.
TUNE_FILE = "tune.json"
# `servebench overhead` runs: the raw figures and the per-metric comparison of them.
OVERHEAD_RAW_FILE = "overhead_raw.csv"
OVERHEAD_FILE = "overhead.csv"
TEMP_SUFFIX = ".tmp"

# -- the result format ----------------------------------------------------------------------

#: The result format today's writers write: run.json's `format_version`, and the column of
#: that name in trials.csv and settings.csv (each row says its own, so a file is readable
#: without its run.json, and a run resumed by a newer servebench is rewritten whole).
FORMAT_VERSION = 3
#: What a run.json or a row without `format_version` is: written before versions existed.
UNVERSIONED = 1
#: What each version is, against the one before it; `upgrade` turns each older shape into
#: today's.
FORMAT_HISTORY = {
    1: "every run written before format versions: columns added since (codes, intervals, "
    "replicates, mixes, gangs, ...) absent, verdict codes only as the reasons' text, slo_met "
    "True/False, search_steps a positional JSON array of 4, 5 or 8 entries",
    2: "format_version in run.json, trials.csv and settings.csv; run.json's status one of "
    "RunStatus; every trials.csv column present, verdict codes beside their text, slo_met "
    "met/missed/undecided, search_steps a JSON list of objects (SearchStepRecord)",
    3: "one meaning per word: trials.csv's and settings.csv's `server_kind` (the API) is "
    "`api`; an imported model's file format is in `format`, no longer in `layer_type`",
}
# The merged files and the per-trial files they are made of.
MERGED = ((RECORDS_DIR, RECORDS_FILE), (TELEMETRY_DIR, TELEMETRY_FILE))

_VERSIONED = (
    "servebench",
    "torch",
    "onnxruntime",
    "tensorflow",
    "tritonclient",
    "nvidia-pytriton",
    "numpy",
)


class RunStatus(StrEnum):
    """run.json's `status`: how the run stands (a trial's own is trials.csv's `status`).
    Its writers (`RunDirectory.create`, `RunDirectory.finish`) take only these, and its
    reader (`read_run_json`) refuses any other word."""

    RUNNING = "running"  # started and not closed (a process that died leaves it so)
    COMPLETE = "complete"  # went through, nothing failed
    PARTIAL = "partial"  # went through, some trials (or probe runs) failed
    FAILED = "failed"  # nothing usable, or it could not go on
    INTERRUPTED = "interrupted"  # stopped (a signal, a pause): --resume continues it
    UNKNOWN = "unknown"  # read only: a run.json that names no status


# -- the per-request record (records.parquet) --------------------------------------------

# One row per measured request, the columns DESIGN.md names. Times are wall-clock seconds
# (epoch) as float64; latency is seconds, measured from the intended send time in open loop
# and from the actual send in closed loop. The client-side split (perf_analyzer's "client
# send" and "client recv"; network+server is what remains of completion − send) is null
# where the client could not time it (gRPC sends, Locust) and absent from runs written
# before it existed: `conform_records` adds it as null, so those runs still read.
CLIENT_SPLIT_COLUMNS = ("client_send_s", "client_recv_s")
RECORD_SCHEMA = pa.schema(
    [
        pa.field("trial_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("intended_time", pa.float64(), nullable=False),
        pa.field("send_time", pa.float64(), nullable=False),
        pa.field("completion_time", pa.float64(), nullable=False),
        pa.field("latency", pa.float64(), nullable=False),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("error_kind", pa.string()),
        pa.field("batch_size", pa.int32(), nullable=False),
        pa.field("request_bytes", pa.int64(), nullable=False),
        pa.field("response_bytes", pa.int64(), nullable=False),
        pa.field(
            "client_send_s",
            pa.float64(),
            metadata={"unit": "s", "doc": "call start to the request's last byte written"},
        ),
        pa.field(
            "client_recv_s",
            pa.float64(),
            metadata={"unit": "s", "doc": "answer arrived to answer read, decoded and checked"},
        ),
        pa.field(
            "model",
            pa.string(),
            metadata={"unit": "", "doc": "a mix's model this request went to (null: the trial's)"},
        ),
        pa.field(
            "generator",
            pa.int32(),
            metadata={"unit": "", "doc": "the gang's generator that sent it (null: one process)"},
        ),
    ],
    metadata={"servebench.records": "1", "time_unit": "s"},
)
# Columns a run written before them lacks: `conform_records` adds them as null. `model` is
# the model of a weighted mix (`workload.mix`) the request went to; null in a trial of one
# model (its trials.csv row names it) and in runs written before mixes existed. `generator`
# is the generator of a gang (`load.gang`) that sent the request; null for a load of one
# process and in runs written before gangs.
OPTIONAL_RECORD_COLUMNS = (*CLIENT_SPLIT_COLUMNS, "model", "generator")


def conform_records(table: pa.Table, where: object) -> pa.Table:
    """`table` with exactly `RECORD_SCHEMA`'s columns, in order: a column an older run
    lacks (`OPTIONAL_RECORD_COLUMNS`) is added as null; any other missing column is an
    error naming `where`."""
    missing = [n for n in RECORD_SCHEMA.names if n not in table.column_names]
    lacking = [n for n in missing if n not in OPTIONAL_RECORD_COLUMNS]
    if lacking:
        raise ValueError(f"{where}: records lack columns {lacking}")
    for name in missing:
        column = RECORD_SCHEMA.field(name)
        table = table.append_column(column, pa.nulls(table.num_rows, column.type))
    return table.select(RECORD_SCHEMA.names)


# -- the trial row (trials.csv) -----------------------------------------------------------

_TEXT, _INT, _FLOAT, _BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()


def _column(name: str, kind: pa.DataType, unit: str, doc: str) -> pa.Field:
    """A trials.csv column; its unit and meaning travel in the field's metadata."""
    return pa.field(name, kind, metadata={"unit": unit, "doc": doc})


# Which trial, and whether it stands as a result.
_OUTCOME = (
    _column("trial_id", _TEXT, "", "hash of the coordinates and settings: stable across runs"),
    _column("index", _INT, "", "the trial's place in the plan (Locust: in the run)"),
    _column("status", _TEXT, "", "ok | failed | interrupted"),
    _column("reason", _TEXT, "", "why a trial is not ok"),
    _column("verdict", _TEXT, "", "VALID | INVALID, as MLPerf LoadGen says it"),
    _column("verdict_reasons", _TEXT, "", "why INVALID, '; '-separated"),
    _column("verdict_warnings", _TEXT, "", "what to read with care though VALID, '; '-separated"),
    # Readers decide on these, never on the text (servebench/common/verdict_codes.py).
    _column("verdict_reason_codes", _TEXT, "", "the reasons' codes, ';'-separated, e.g. errors"),
    _column("verdict_warning_codes", _TEXT, "", "the warnings' codes, ';'-separated"),
)
# Where the trial sits in the study: what `report compare` joins on.
_COORDINATES = (
    _column("server", _TEXT, "", "the scenario's name for the server"),
    _column("api", _TEXT, "", "the API the server serves: triton | tfs"),
    _column("setting", _TEXT, "", "server name with the settings that vary, e.g. triton[b=on]"),
    _column("model", _TEXT, "", "model id"),
    _column("batch_size", _INT, "samples", "samples per request"),
    _column("link", _TEXT, "", "link profile name (direct: no emulated link)"),
    _column("load_kind", _TEXT, "", "rate | concurrency | trace | search | users (Locust)"),
    _column("load_level", _FLOAT, "req/s or clients", "the rate, or closed-loop clients"),
)
# How the server was reached and configured.
_SERVER = (
    _column("launch", _TEXT, "", "local | docker | remote | locust"),
    _column("protocol", _TEXT, "", "http | grpc"),
    _column("client_protocol", _TEXT, "", "Locust: the user class's protocol, e.g. triton-grpc"),
    _column("settings_json", _TEXT, "", "the server setting's values as JSON"),
    _column("model_version", _TEXT, "", "Locust: the model version requested ('' = latest)"),
    _column("swarm", _INT, "", "Locust: the swarm the trial belongs to"),
)
# The model's size and cost (model_zoo.counting), for the roofline.
_MODEL = (
    _column(
        "layer_type",
        _TEXT,
        "",
        "a generated model's family: dense | conv | lstm | gru | attention | resnet50",
    ),
    _column(
        "format",
        _TEXT,
        "",
        "an imported model's file format: onnx | torchscript | torch-export | keras | "
        "savedmodel | triton (empty: a generated model)",
    ),
    _column("depth", _INT, "layers", "model depth"),
    _column("width", _INT, "units", "model width"),
    _column("params", _INT, "parameters", "trainable parameters"),
    _column("flops_per_sample", _FLOAT, "FLOP", "FLOP per inference of one sample"),
    _column("weight_bytes", _INT, "bytes", "weights (read once per batch)"),
    _column("activation_bytes", _INT, "bytes", "activations moved per sample"),
)
# The emulated link and what it should add.
_LINK = (
    _column("link_rtt_s", _FLOAT, "s", "round-trip time the link adds"),
    _column("link_down_mbps", _FLOAT, "Mbit/s", "server-to-client bandwidth (empty: unlimited)"),
    _column("link_up_mbps", _FLOAT, "Mbit/s", "client-to-server bandwidth (empty: unlimited)"),
    _column("request_bytes_mean", _FLOAT, "bytes", "mean request size on the wire"),
    _column("response_bytes_mean", _FLOAT, "bytes", "mean response size on the wire"),
    _column("link_time_analytic_s", _FLOAT, "s", "RTT + bytes / bandwidth: the link's share"),
)
# What the client measured (servebench.load's LoadSummary, after the warm-up).
_LOAD = (
    _column("mode", _TEXT, "", "open | closed loop"),
    _column("load", _TEXT, "", "the load in words, e.g. 'constant 500 req/s'"),
    _column("concurrency", _INT, "clients", "closed loop: clients in flight"),
    _column("generators", _INT, "", "generators that sent the load (a gang: more than 1)"),
    _column("count", _INT, "requests", "requests measured"),
    _column("ok", _INT, "requests", "requests answered successfully"),
    _column("errors", _INT, "requests", "requests that failed"),
    _column("errors_by_kind", _TEXT, "", "JSON object: error kind to count"),
    _column("error_rate", _FLOAT, "share", "errors / count"),
    _column("target_rate", _FLOAT, "req/s", "open loop: the rate asked for"),
    _column("scheduled_rate", _FLOAT, "req/s", "open loop: the rate the schedule held"),
    _column("achieved_rate", _FLOAT, "req/s", "requests sent per second"),
    _column("throughput_rps", _FLOAT, "req/s", "successful requests per second"),
    _column("throughput_ips", _FLOAT, "inferences/s", "successful samples per second"),
    _column("latency_mean", _FLOAT, "s", "mean latency of successful requests"),
    # Percentiles by nearest rank (servebench/common/quantiles.py): latencies requests had.
    _column("latency_p50", _FLOAT, "s", "latency percentile, nearest rank"),
    _column("latency_p90", _FLOAT, "s", "latency percentile, nearest rank"),
    _column("latency_p95", _FLOAT, "s", "latency percentile, nearest rank"),
    _column("latency_p99", _FLOAT, "s", "latency percentile, nearest rank"),
    _column("latency_p99_9", _FLOAT, "s", "latency percentile, nearest rank"),
    _column("latency_max", _FLOAT, "s", "largest latency"),
    _column("schedule_lag_p99", _FLOAT, "s", "p99 of actual minus intended send time"),
    _column("late_share", _FLOAT, "share", "sends later than the late threshold"),
    _column("duration", _FLOAT, "s", "first send to last completion"),
    _column("stable", _BOOL, "", "stability mode: whether the windows agreed"),
    _column("stop_reason", _TEXT, "", "why the load stopped early, if it did"),
    _column("client_cpu_s", _FLOAT, "CPU s", "Locust: the generator's own CPU time"),
    # perf_analyzer's client-side split (records' client_send_s / client_recv_s).
    _column("client_send_s", _FLOAT, "s", "mean: call start to request written (empty: untimed)"),
    _column("client_recv_s", _FLOAT, "s", "mean: answer arrived to read, decoded and checked"),
    _column("network_server_s", _FLOAT, "s", "mean: completion − send − client send − recv"),
)
# What the server and host said (servebench.telemetry's summary, after the warm-up).
# The server's counters (server_requests … server_executions) are the increase between a
# reading taken before the first measured send (the load waits for it) and one taken after
# the last measured completion, each let settle where nothing is in flight
# (servebench.telemetry.recorder). Which requests they count, against the client's `count`:
# - closed loop: exactly the measured requests (warm-up requests finish before the first
#   reading, and none is sent while it is taken), so server_requests == ok when none failed;
# - open loop: the measured ones plus the warm-up requests still in flight at the first
#   reading (at most rate × latency; the schedule cannot pause to drain them);
# - stability mode: every measured window, while `count` keeps only the agreeing ones;
#   an SLO search: every step after the first one's warm-up.
# A request the client gave up on (a timeout) may still be counted by the server.
_TELEMETRY = (
    _column("gpu_util_mean", _FLOAT, "share", "GPU busy, mean over samples"),
    _column("gpu_util_max", _FLOAT, "share", "GPU busy, largest sample"),
    _column("gpu_mem_max", _FLOAT, "bytes", "GPU memory used, peak of the sum over GPUs"),
    _column("gpu_power_mean", _FLOAT, "W", "GPU power, mean of the sum over GPUs"),
    _column("server_cpu_mean", _FLOAT, "cores", "server process tree (or container) CPU, mean"),
    _column("server_cpu_max", _FLOAT, "cores", "server process tree (or container) CPU, max"),
    _column("server_rss_max", _FLOAT, "bytes", "server process tree resident memory, peak"),
    _column("server_mem_max", _FLOAT, "bytes", "server container memory (engine stats), peak"),
    _column("host_cpu_mean", _FLOAT, "share", "whole-host CPU busy, mean"),
    _column(
        "server_requests",
        _FLOAT,
        "requests",
        "server's count of successful requests in the measured window (closed loop: the "
        "measured ones; open loop: also warm-up requests in flight when it opened)",
    ),
    _column("server_failures", _FLOAT, "requests", "server's count of failed requests"),
    _column("server_inferences", _FLOAT, "samples", "server's count of inferences"),
    _column("server_executions", _FLOAT, "", "model executions (batches) the server ran"),
    _column("server_avg_batch", _FLOAT, "samples", "inferences per execution"),
    _column("server_queue_s", _FLOAT, "s", "per request: waiting in the server's queue"),
    _column("server_compute_input_s", _FLOAT, "s", "per request: preparing inputs"),
    _column("server_compute_infer_s", _FLOAT, "s", "per request: running the model"),
    _column("server_compute_output_s", _FLOAT, "s", "per request: preparing outputs"),
    _column("server_compute_s", _FLOAT, "s", "per request: all compute"),
    _column("server_request_s", _FLOAT, "s", "per request: the server's whole time"),
    _column("client_minus_server_s", _FLOAT, "s", "mean latency minus server time: network"),
    _column("host_peak_flops", _FLOAT, "FLOP/s", "the host's measured GEMM peak (roofline)"),
)
# What it costs, and the SLO it is held to.
_COST = (
    _column("instance", _TEXT, "", "cloud instance type priced"),
    _column("usd_per_hour", _FLOAT, "USD/h", "the instance's on-demand price"),
    _column("cost_per_million", _FLOAT, "USD/1e6 inferences", "at the measured throughput"),
    _column("slo_percentile", _FLOAT, "%", "the SLO's latency percentile"),
    _column("slo_bound_s", _FLOAT, "s", "the SLO's latency bound"),
    _column("slo_latency_s", _FLOAT, "s", "latency at the SLO percentile (p99: = latency_p99)"),
    _column(
        "slo_met",
        _TEXT,
        "",
        "met | missed | undecided: slo_latency_high <= slo_bound_s | slo_latency_low > "
        "slo_bound_s | neither",
    ),
    _column("slo_throughput_ips", _FLOAT, "inferences/s", "highest throughput meeting the SLO"),
    _column("cost_per_million_at_slo", _FLOAT, "USD/1e6 inferences", "at slo_throughput_ips"),
    _column("max_rate", _FLOAT, "req/s", "SLO search: highest rate meeting the SLO"),
    _column(
        "search_steps",
        _TEXT,
        "",
        "SLO search: JSON list of steps, each {rate, latency_s, met, reasons, codes, verdict, "
        "low_s, high_s} (SearchStepRecord)",
    ),
)


@dataclass(frozen=True)
class SearchStepRecord:
    """One step of an SLO search as trials.csv's `search_steps` keeps it (a JSON object
    with these fields, in the order the steps ran)."""

    rate: float  # req/s offered
    latency_s: float | None  # the SLO percentile measured at that rate (None: nothing)
    met: bool  # whether the step met the SLO (usable, and its interval within the bound)
    reasons: str  # why the step's load was INVALID, '; '-separated ('' where VALID)
    codes: tuple[str, ...]  # those reasons' codes (servebench.common.verdict_codes)
    verdict: str | None  # met / missed / undecided (None: a format-1 step from before)
    low_s: float | None  # the percentile's interval (None: a side nothing bounds; a
    high_s: float | None  # format-1 step from before the judge: its one latency)


SEARCH_STEP_FIELDS = tuple(f.name for f in fields(SearchStepRecord))


def search_steps_json(steps: Sequence[SearchStepRecord]) -> str:
    """The `search_steps` cell of `steps`."""
    return json.dumps([{**asdict(s), "codes": list(s.codes)} for s in steps])


def read_search_steps(text: object) -> list[SearchStepRecord]:
    """The steps of a `search_steps` cell (none for an empty one); a cell that does not
    hold them as today's runs write them is a ValueError."""
    if not isinstance(text, str) or not text.strip():
        return []
    steps = json.loads(text)
    if not isinstance(steps, list):
        raise ValueError(f"search_steps: expected a list of steps, found {type(steps).__name__}")
    records = []
    for step in steps:
        if not isinstance(step, dict) or set(step) != set(SEARCH_STEP_FIELDS):
            raise ValueError(f"search_steps: a step is not {{{', '.join(SEARCH_STEP_FIELDS)}}}")
        records.append(
            SearchStepRecord(
                rate=float(step["rate"]),
                latency_s=_seconds_or_none(step["latency_s"]),
                met=bool(step["met"]),
                reasons=str(step["reasons"] or ""),
                codes=tuple(str(c) for c in step["codes"]),
                verdict=None if step["verdict"] is None else str(step["verdict"]),
                low_s=_seconds_or_none(step["low_s"]),
                high_s=_seconds_or_none(step["high_s"]),
            )
        )
    return records


def _seconds_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


# A weighted mix of models in one trial (`workload.mix`): the row's other columns are the
# whole system's (every request, whichever model it went to); this one splits them by model.
_MIX = (
    _column(
        "mix_json",
        _TEXT,
        "",
        "mix: JSON {model id: {weight, share, count, ok, errors, latency_p50, latency_p99}} "
        "(MixModelRecord); share = the model's requests / all requests, latencies in s "
        "(empty: one model)",
    ),
)


@dataclass(frozen=True)
class MixModelRecord:
    """One model of a weighted mix as trials.csv's `mix_json` keeps it (the cell is a JSON
    object of these, by model id): its weight, its share of all requests, its counts and
    the p50 and p99 of its successful requests' latencies (s; NaN where it had none)."""

    weight: float
    share: float
    count: int
    ok: int
    errors: int
    latency_p50: float
    latency_p99: float


def mix_json(models: Mapping[str, Mapping[str, Any]]) -> str:
    """The `mix_json` cell of a mix's per-model figures (each a `MixModelRecord`'s fields:
    a figure it lacks or one it has not is a TypeError, where the row is made)."""
    return json.dumps({model: asdict(MixModelRecord(**dict(f))) for model, f in models.items()})


def read_mix(text: object) -> dict[str, MixModelRecord]:
    """The models of a `mix_json` cell (none for an empty one); a cell that does not hold
    them as the runner writes them is a ValueError."""
    if not isinstance(text, str) or not text.strip():
        return {}
    models = json.loads(text)
    if not isinstance(models, dict):
        raise ValueError(f"mix_json: expected an object, found {type(models).__name__}")
    try:
        return {str(model): MixModelRecord(**figures) for model, figures in models.items()}
    except TypeError as err:
        raise ValueError(f"mix_json: {err}") from None


@dataclass(frozen=True)
class GeneratorRecord:
    """One generator of a gang as trials.csv's `gang_json` keeps it: its worker, its clock
    against the coordinator's, how late it began, and what its own records show."""

    index: int
    worker: str
    clock_offset_s: float
    clock_uncertainty_s: float
    late_start_s: float
    count: int
    sent_rate: float
    scheduled_rate: float | None  # its share of the schedule's rate (None: no schedule)
    shortfall: float | None  # 1 - sent / scheduled
    lag_p99_s: float | None
    lost: str | None  # why it was lost (None: it finished)


@dataclass(frozen=True)
class LinkRecord:
    """A gang's emulated link: `links` links of `profile`, one per generator."""

    profile: str
    per_generator: bool
    links: int


@dataclass(frozen=True)
class GangRecord:
    """A load sent by a gang (`load.gang`): how it started and what each generator did."""

    scheduler: str  # its address, or "local"
    start_skew_s: float
    start_skew_limit_s: float
    partial: bool  # a generator was lost
    generators: tuple[GeneratorRecord, ...]
    link: LinkRecord | None = None


def gang_json(gang: GangRecord) -> str:
    """The `gang_json` cell of `gang`."""
    document = asdict(gang)
    if gang.link is None:
        del document["link"]
    return json.dumps(document)


def read_gang(text: object) -> GangRecord | None:
    """The gang of a `gang_json` cell (None for an empty one); a cell that does not hold
    one as runs write it is a ValueError."""
    if not isinstance(text, str) or not text.strip():
        return None
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError(f"gang_json: expected an object, found {type(document).__name__}")
    try:
        link = document.pop("link", None)
        generators = tuple(GeneratorRecord(**g) for g in document.pop("generators"))
        return GangRecord(
            **document,
            generators=generators,
            link=LinkRecord(**link) if link is not None else None,
        )
    except (TypeError, KeyError) as err:
        raise ValueError(f"gang_json: {err}") from None


# A load sent by a gang of generators (`load.gang`, issue 24): the row's other columns are
# the merged records'; this one says how the gang started and what each generator did.
_GANG = (
    _column(
        "gang_json",
        _TEXT,
        "",
        "gang: JSON {scheduler, start_skew_s, start_skew_limit_s, partial, generators: [{index, "
        "worker, clock_offset_s, clock_uncertainty_s, late_start_s, count, sent_rate, "
        "scheduled_rate, shortfall, lag_p99_s, lost}], link (through a link, one emulator "
        "per generator): {profile, per_generator, links}} (empty: one process)",
    ),
)

# How sure the percentiles are (issue 23): each one's distribution-free interval from the
# order statistics of the measured latencies (servebench/common/quantiles.py), empty on a
# side too few requests bound, and what it takes to decide the SLO.
_CONFIDENCE = (
    _column("confidence_level", _FLOAT, "share", "two-sided confidence of every interval"),
    *(
        _column(f"latency_{name}_{side}", _FLOAT, "s", f"{side} bound of latency_{name}")
        for name in ("p50", "p90", "p95", "p99", "p99_9")
        for side in ("low", "high")
    ),
    _column("slo_latency_low", _FLOAT, "s", "low bound of slo_latency_s"),
    _column("slo_latency_high", _FLOAT, "s", "high bound of slo_latency_s"),
    _column(
        "slo_confidence_level",
        _FLOAT,
        "share",
        "two-sided confidence of slo_latency_low/_high and slo_met: confidence_level, or "
        "with early stop the level of the look that decided (the end's: what earlier looks left)",
    ),
    _column(
        "slo_requests_to_decide",
        _INT,
        "requests",
        "fewest requests that decide slo_met if the share over the bound stays as measured "
        "(empty: a share right at the SLO's, which no count decides)",
    ),
)

# Replicates (issue 34): a setting is measured R times, once per round, in a seeded random
# order; each replicate is a row of its own, and settings.csv holds one row per setting.
_REPLICATE = (
    _column(
        "replicate_of",
        _TEXT,
        "",
        "the setting this row replicates: its trial_id in settings.csv (the plan's trial "
        "id; the first replicate's own trial_id)",
    ),
    _column("replicate", _INT, "", "which replicate of the setting, 1..R"),
    _column("round", _INT, "", "the round it was measured in, 1-based"),
    _column("position", _INT, "", "its place in that round, 1-based"),
    _column("remeasure_of", _TEXT, "", "a re-measurement: the trial_id of the row it replaces"),
    _column(
        "remeasured",
        _BOOL,
        "",
        "measured again in a later round (disturbed): kept, but not counted in settings.csv",
    ),
)

# What disturbed the measured window from outside (telemetry.interference), judged by
# telemetry.disturbance: each figure over its limit is an interference_* warning code.
_INTERFERENCE = (
    _column(
        "interference_cpu_pressure",
        _FLOAT,
        "share",
        "share of the measured window some task waited for a CPU (PSI some; empty: no PSI)",
    ),
    _column("interference_steal", _FLOAT, "share", "share of all cores' time the hypervisor took"),
    _column(
        "interference_other_cpu",
        _FLOAT,
        "share",
        "share of all cores' time used by processes other than the server and the generator",
    ),
)

# The result format the row was written in (`FORMAT_VERSION`): the last column.
_FORMAT = (
    _column("format_version", _INT, "", "result format of the row (empty: 1, before versions)"),
)

TRIAL_SCHEMA = pa.schema(
    [
        *_OUTCOME,
        *_REPLICATE,
        *_INTERFERENCE,
        *_COORDINATES,
        *_SERVER,
        *_MODEL,
        *_LINK,
        *_LOAD,
        *_TELEMETRY,
        *_COST,
        *_CONFIDENCE,
        *_MIX,
        *_GANG,
        *_FORMAT,
    ],
    metadata={"servebench.trials": "1", "time_unit": "s"},
)
TRIAL_COLUMNS = frozenset(TRIAL_SCHEMA.names)

# -- the setting row (settings.csv) ---------------------------------------------------------

#: Figures summarized over a setting's replicates (`common.replicates.summarize`), each
#: with the columns `SETTING_STATISTICS` names: the median, its interval, the re-run range
#: and the between-replicate coefficient of variation.
SETTING_FIGURES = {
    "latency_p50": "s",
    "latency_p90": "s",
    "latency_p95": "s",
    "latency_p99": "s",
    "latency_p99_9": "s",
    "slo_latency_s": "s",
    "throughput_rps": "req/s",
    "throughput_ips": "inferences/s",
    "achieved_rate": "req/s",
    "max_rate": "req/s",
    "cost_per_million": "USD/1e6 inferences",
}
SETTING_STATISTICS = {
    "": "median over the replicates",
    "_low": "low end of the median's interval (replicates' order statistics)",
    "_high": "high end of the median's interval",
    "_rerun_low": "re-run range low (the replicates' min)",
    "_rerun_high": "re-run range high (the replicates' max)",
    "_cv": "between-replicate coefficient of variation (share)",
}
SETTING_SCHEMA = pa.schema(
    [
        _column("trial_id", _TEXT, "", "the plan's trial id: replicates' replicate_of"),
        *_COORDINATES,
        *(f for f in _SERVER if f.name in ("launch", "protocol", "settings_json")),
        _column("status", _TEXT, "", "ok | partial (replicates missing or failed) | failed"),
        _column("replicates_planned", _INT, "", "R, the scenario's workload.repeats"),
        _column("replicates", _INT, "", "replicates counted: ok, VALID, not re-measured"),
        _column("replicates_failed", _INT, "", "replicates failed or INVALID"),
        _column("replicates_remeasured", _INT, "", "replicates measured again (disturbed)"),
        _column("interval_coverage", _FLOAT, "share", "coverage of the medians' intervals"),
        _column("rerun_coverage", _FLOAT, "share", "(R-1)/(R+1): one more replicate in range"),
        _column("cv_band", _TEXT, "", "quiet <= 5 % | moderate <= 10 % | noisy <= 20 % | unstable"),
        *(
            _column(
                f"{figure}{suffix}",
                _FLOAT,
                "share" if suffix == "_cv" else unit,
                f"{figure}: {doc}",
            )
            for figure, unit in SETTING_FIGURES.items()
            for suffix, doc in SETTING_STATISTICS.items()
        ),
        _column("count", _INT, "requests", "requests measured, over the counted replicates"),
        _column("errors", _INT, "requests", "failed requests, over the counted replicates"),
        # The same columns as a trial's, copied from its replicates.
        *(
            f
            for f in _COST
            if f.name in ("instance", "usd_per_hour", "slo_percentile", "slo_bound_s")
        ),
        _column(
            "slo_met",
            _TEXT,
            "",
            "met | missed | undecided, judged on slo_latency_s's interval over replicates "
            "(R = 1: the one replicate's request-level interval, warning single_run)",
        ),
        _column("warning_codes", _TEXT, "", "what to read with care, ';'-separated codes"),
        _column("replicate_ids", _TEXT, "", "the counted replicates' trial_ids, ';'-separated"),
        *_FORMAT,
    ],
    metadata={"servebench.settings": "1", "time_unit": "s"},
)
SETTING_COLUMNS = tuple(SETTING_SCHEMA.names)


class TrialRowError(ServebenchError, ValueError):
    """A trial row with a column `TRIAL_SCHEMA` lacks, or a value of the wrong type: a
    producer changed without the contract, which every reader relies on (a programming
    error, raised loudly)."""


_PYTHON_TYPES: dict[pa.DataType, type] = {_TEXT: str, _INT: int, _FLOAT: float, _BOOL: bool}
TRIAL_TEXT_COLUMNS = tuple(f.name for f in TRIAL_SCHEMA if f.type == _TEXT)


class _TrialRowMethods:
    """What a `TrialRow` does; its fields are `TRIAL_SCHEMA`'s columns (made below)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for name in TRIAL_SCHEMA.names:
            setattr(self, name, _conform(self, name, getattr(self, name)))

    def get(self, column: str, default: Any = None) -> Any:
        """The column's value, `default` where it is empty (None)."""
        value = self[column]
        return default if value is None else value

    def __getitem__(self, column: str) -> Any:
        if column not in TRIAL_COLUMNS:
            raise _unknown(getattr(self, "trial_id", None), [column])
        return getattr(self, column)

    def update(self, **values: Any) -> None:
        """Set columns by name (in place), each checked as at construction."""
        unknown = sorted(set(values) - TRIAL_COLUMNS)
        if unknown:
            raise _unknown(getattr(self, "trial_id", None), unknown)
        for name, value in values.items():
            setattr(self, name, _conform(self, name, value))

    def to_record(self) -> dict[str, Any]:
        """Column name to value, every column of the schema in its order (None: empty)."""
        return {name: getattr(self, name) for name in TRIAL_SCHEMA.names}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Any:
        """A row from a mapping of column names (a producer's values, or a row read back
        from trials.csv, where an empty cell is NaN and an integer may read as 3.0)."""
        unknown = sorted(set(record) - TRIAL_COLUMNS)
        if unknown:
            raise _unknown(record.get("trial_id"), unknown)
        return cls(**record)


def _unknown(trial_id: object, columns: list[str]) -> TrialRowError:
    return TrialRowError(
        f"trial {trial_id!r}: columns {columns} are not in TRIAL_SCHEMA "
        "(servebench/results.py): add them there, with their unit"
    )


# What `slo_met` holds: whether the SLO percentile's interval lies under the bound, over
# it, or around it (issue 23). Format-1 runs hold True/False there (`upgrade` reads them).
SLO_MET, SLO_MISSED, SLO_UNDECIDED = MET, MISSED, UNDECIDED
SLO_DECISIONS = (SLO_MET, SLO_MISSED, SLO_UNDECIDED)


def _conform(row: object, name: str, value: Any) -> Any:
    """`value` as column `name` holds it: None for empty (NaN and "" too), else the schema's
    type (numpy scalars become Python's, a whole float an int in an integer column)."""
    if name == "slo_met" and isinstance(value, str) and value not in SLO_DECISIONS:
        raise TrialRowError(
            f"trial {getattr(row, 'trial_id', None)!r}: column slo_met holds {value!r}, "
            f"not one of {', '.join(SLO_DECISIONS)}"
        )
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()  # a numpy scalar
    if (isinstance(value, float) and math.isnan(value)) or value == "":
        return None  # empty, as trials.csv reads it back
    kind = _PYTHON_TYPES[TRIAL_SCHEMA.field(name).type]
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    elif kind is bool and value in ("True", "False"):
        value = value == "True"
    if kind is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    else:
        fits = isinstance(value, kind)
    if not fits:
        raise TrialRowError(
            f"trial {getattr(row, 'trial_id', None)!r}: column {name} holds "
            f"{type(value).__name__} {value!r}, TRIAL_SCHEMA says {kind.__name__}"
        )
    return value


TrialRow = make_dataclass(
    "TrialRow",
    [
        (f.name, f"{_PYTHON_TYPES[f.type].__name__} | None", field(default=None))
        for f in TRIAL_SCHEMA
    ],
    bases=(_TrialRowMethods,),
    namespace={
        "__module__": __name__,
        "__doc__": """One trial's row of trials.csv, as producers hand it to
        `RunDirectory.add_trial` (the one builder is `servebench.trial_row`).

        A dataclass whose fields are exactly `TRIAL_SCHEMA`'s columns, in order, each None
        (empty) unless given: a column the schema lacks or a value of the wrong type fails
        where the row is made or changed, not in a reader.""",
    },
    kw_only=True,
    slots=True,
)


class ResultDirError(ServebenchError, ValueError):
    """A results folder or run directory that cannot be made, written or read, said in one
    line that names the path and why (a bad --output or --resume, a report of a folder that
    is no run: the command exits 2). The one class for it: producers and readers alike."""


# run.json's fields that its readers use, with the JSON types each may hold (None: null);
# other fields are kept as they are. A field of another type is refused by name, so a
# damaged or hand-edited run.json is one line, not a traceback in whichever reader trips.
RUN_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "status": (str,),
    "reason": (str, type(None)),
    "scenario": (str, type(None)),
    "source": (str,),
    "started_at": (str, type(None)),
    "ended_at": (str, type(None)),
    "resumed_at": (list,),
    "machine": (dict,),
    "versions": (dict,),
    "warnings": (list,),
    "trials_planned": (int,),
    "overhead": (dict,),
    "locust": (dict,),
    "instance": (str,),
    "format_version": (int,),
    "upgraded_from": (int,),
}
_JSON_NAMES = {str: "a string", type(None): "null", list: "a list", dict: "an object",
               int: "an integer"}  # fmt: skip


def read_tune_json(path: Path) -> dict[str, Any] | None:
    """A run's tune.json (None: the run searched nothing), checked as far as readers rely
    on it: `servers` maps each server's name to its search, whose `steps` is a list of
    objects; anything else is a ResultDirError naming the file."""
    if not path.is_file():
        return None
    try:
        search = read_json_object(path)
    except TextFileError as err:
        raise ResultDirError(str(err)) from None
    servers = search.get("servers")
    if not isinstance(servers, dict) or not all(
        isinstance(s, dict)
        and isinstance(s.get("steps"), list)
        and all(isinstance(step, dict) for step in s["steps"])
        for s in servers.values()
    ):
        raise ResultDirError(f"{path}: field servers: expected each server's search with steps")
    return search


def read_run_json(path: Path) -> dict[str, Any]:
    """A run's run.json: an object whose fields (RUN_FIELDS) have their types; anything
    else is a ResultDirError naming the file and the field. The one reader of it, for
    --resume and for every report, export and recommendation."""
    if not path.is_file():
        raise ResultDirError(f"{path}: missing; not a servebench run directory")
    try:
        run = read_json_object(path)
    except TextFileError as err:
        raise ResultDirError(str(err)) from None
    for name, types in RUN_FIELDS.items():
        value = run.get(name)
        if name in run and (not isinstance(value, types) or isinstance(value, bool)):
            expected = " or ".join(_JSON_NAMES[t] for t in types)
            found = _JSON_NAMES.get(type(value), type(value).__name__)
            raise ResultDirError(f"{path}: field {name}: expected {expected}, found {found}")
    upgraded = upgrade(RunFiles(run=run), path.parent).run
    assert upgraded is not None
    return upgraded


# -- older runs: the one upgrade -----------------------------------------------------------

# The verdict texts of runs from before verdict codes, and the code each stands for; a
# cell's text is split at "; ". A piece that starts with none of them continues the piece
# before it (a stop reason may hold "; "); a first piece that matches none reads as
# LEGACY_UNKNOWN, which no reader treats as any check (`recommend` keeps such a step).
_LEGACY_TEXTS = (
    ("stopped early: server unreachable", VerdictCode.SERVER_UNREACHABLE),
    ("stopped early", VerdictCode.STOPPED_EARLY),
    ("no requests measured", VerdictCode.NO_REQUESTS),
    ("generator fell behind: sent ", VerdictCode.RATE_SHORT),
    ("generator fell behind: schedule lag", VerdictCode.LAG_HIGH),
    ("generator fell behind", VerdictCode.LATE_SENDS),  # when late sends still invalidated
    ("generator lag", VerdictCode.LATE_SENDS),
    ("errors:", VerdictCode.ERRORS),
    ("unstable", VerdictCode.UNSTABLE),
)
LEGACY_UNKNOWN = "unknown"
# The code columns and the text columns a format-1 row's codes are read from.
_CODE_COLUMNS = {
    "verdict_reason_codes": "verdict_reasons",
    "verdict_warning_codes": "verdict_warnings",
}


def legacy_codes(text: object) -> tuple[str, ...]:
    """The codes of a reasons (or warnings) cell written before codes, from its text."""
    if not isinstance(text, str) or not text.strip():
        return ()
    codes: list[str] = []
    for piece in (p.strip() for p in text.split("; ")):
        code = next((c for prefix, c in _LEGACY_TEXTS if piece.startswith(prefix)), None)
        if code is not None:
            codes.append(str(code))
        elif not codes:
            codes.append(LEGACY_UNKNOWN)
    return tuple(codes)


#: run.json's fields every reader may take as there: what a run.json without one (an
#: older or hand-made one) reads as. `run_id` is the run's folder name, `status` unknown.
RUN_DEFAULTS: dict[str, Any] = {
    "reason": None,
    "scenario": None,
    "source": "",
    "started_at": None,
    "ended_at": None,
    "machine": {},
    "versions": {},
    "trials_planned": 0,
}


@dataclass(frozen=True)
class RunFiles:
    """What was read of one run, as `upgrade` takes and gives it: run.json's object, and
    trials.csv and settings.csv as read (their text columns as text); None: not read."""

    run: dict[str, Any] | None = None
    trials: pd.DataFrame | None = None
    settings: pd.DataFrame | None = None


def upgrade(files: RunFiles, directory: Path) -> RunFiles:
    """The one upgrade of older runs: what was read from the run directory `directory`,
    written in any format up to `FORMAT_VERSION`, in today's shape. Every reader of a
    run's files goes through it (`read_run_json`, `RunDirectory.open`, `read_setting_rows`,
    `analysis.loader`), so none of them asks how old a run is.

    run.json: `format_version` today's (`upgraded_from`: the one it was written in, where
    older), `run_id` (else the folder's name), `status` (else unknown) and `RUN_DEFAULTS`
    where absent. trials.csv and settings.csv: every column of their schema (empty where
    the writer had none of it; columns of no schema are kept, those renamed since are not),
    each older row through one step per version (`_TRIAL_STEPS`, `_SETTING_STEPS`: format
    1 to 2, 2 to 3, ...), `format_version` today's on every row.

    A file or row of a newer format than this servebench knows is refused, naming it.
    """
    run = files.run
    if run is not None:
        run = _upgrade_run(run, directory / RUN_FILE)
    trials = files.trials
    if trials is not None:
        trials = _upgrade_rows(trials, TRIAL_SCHEMA, directory / TRIALS_FILE, _TRIAL_STEPS)
    settings = files.settings
    if settings is not None:
        settings = _upgrade_rows(
            settings, SETTING_SCHEMA, directory / SETTINGS_FILE, _SETTING_STEPS
        )
    return RunFiles(run=run, trials=trials, settings=settings)


def _upgrade_run(run: dict[str, Any], path: Path) -> dict[str, Any]:
    version = run.get("format_version", UNVERSIONED)
    if version < 1:
        raise ResultDirError(f"{path}: field format_version: {version} is not a format version")
    if version > FORMAT_VERSION:
        raise ResultDirError(_newer(path, version))
    run = dict(run)
    if version < FORMAT_VERSION:
        run.setdefault("upgraded_from", version)
    run["format_version"] = FORMAT_VERSION
    run["run_id"] = run.get("run_id") or path.parent.name
    status = run.get("status") or RunStatus.UNKNOWN
    if status not in set(RunStatus):
        raise ResultDirError(
            f"{path}: field status: {status!r} is not one of {', '.join(RunStatus)}"
        )
    run["status"] = RunStatus(status)
    for name, default in RUN_DEFAULTS.items():
        if name not in run:
            run[name] = default.copy() if isinstance(default, dict) else default
    return run


def _newer(path: Path, version: object) -> str:
    return (
        f"{path}: written in result format {version}, newer than this servebench reads "
        f"(up to {FORMAT_VERSION}); read it with the servebench that wrote it, or a newer one"
    )


#: One step of an upgrade: the rows (`rows`, a mask) of the version it is filed under, as
#: the next version has them; every column of today's schema is there already (empty).
Step = Callable[[pd.DataFrame, pd.Series], pd.DataFrame]


def _upgrade_rows(
    frame: pd.DataFrame, schema: pa.Schema, path: Path, steps: Mapping[int, Step]
) -> pd.DataFrame:
    """A CSV's rows as today's: every column of `schema`, in its order (then any others
    but the names `RENAMED_COLUMNS` retired), each row through the steps from its version on."""
    version = _row_versions(frame, path)
    absent = [name for name in schema.names if name not in frame.columns]
    if absent:  # added at once (one by one fragments the frame)
        empty = {
            name: None if schema.field(name).type in (_TEXT, _BOOL) else float("nan")
            for name in absent
        }
        frame = pd.concat([frame, pd.DataFrame(empty, index=frame.index)], axis=1)
    else:
        frame = frame.copy()
    for step_version, step in sorted(steps.items()):
        rows = version <= step_version
        if rows.any():
            frame = step(frame, rows)
    frame["format_version"] = FORMAT_VERSION
    others = [
        name for name in frame.columns if name not in schema.names and name not in RENAMED_COLUMNS
    ]
    return frame[[*schema.names, *others]]


#: Columns renamed since, by their old name (format 3: the API was `server_kind`, the word
#: that means a registry entry elsewhere; the generators were `processes`, the gang's
#: older name).
RENAMED_COLUMNS = {"server_kind": "api", "processes": "generators"}


def _renamed_from_2(frame: pd.DataFrame, rows: pd.Series) -> pd.DataFrame:
    """Format-2 rows (trials.csv or settings.csv) as format 3's names: each renamed
    column's values under its new name."""
    for old, new in RENAMED_COLUMNS.items():
        if old in frame.columns:
            frame[new] = frame[new].where(~rows, frame[old])
    return frame


def _trial_rows_from_2(frame: pd.DataFrame, rows: pd.Series) -> pd.DataFrame:
    """Format-2 rows of trials.csv as format 3: `_renamed_from_2`, and an imported model's
    file format (which format 2 put in `layer_type`) in `format`. An imported model is the
    one with a `layer_type` but no depth or width: a generated model always has both, a
    mix or an unknown model none of the three."""
    frame = _renamed_from_2(frame, rows)
    imported = rows & frame["layer_type"].notna() & frame["depth"].isna() & frame["width"].isna()
    frame["format"] = frame["format"].where(~imported, frame["layer_type"])
    frame["layer_type"] = frame["layer_type"].where(~imported, None)
    return frame


def _row_versions(frame: pd.DataFrame, path: Path) -> pd.Series:
    """Each row's format: its `format_version` cell, `UNVERSIONED` where there is none."""
    if "format_version" not in frame.columns:
        return pd.Series(UNVERSIONED, index=frame.index, dtype=int)
    cells = frame["format_version"]
    version = pd.to_numeric(cells, errors="coerce")
    bad = cells.notna() & (version.isna() | (version % 1 != 0) | (version < 1))
    if bad.any():
        raise ResultDirError(
            f"{path}: column format_version: {cells[bad].iloc[0]!r} is not a format version"
        )
    version = version.fillna(UNVERSIONED).astype(int)
    if (version > FORMAT_VERSION).any():
        raise ResultDirError(_newer(path, version.max()))
    return version


def _trial_rows_from_1(frame: pd.DataFrame, rows: pd.Series) -> pd.DataFrame:
    """Format-1 rows (`rows`) of trials.csv as format 2: a reasons (warnings) text without
    codes has its codes read from the text (`legacy_codes`; a row with codes keeps them,
    as a run resumed since has both kinds), `slo_met` True/False (before intervals) is
    met/missed, a row without a status is ok (the first runs wrote it for failures), and
    `search_steps` positional arrays are records (`_search_steps_from_1`)."""
    for codes, text in _CODE_COLUMNS.items():
        frame[codes] = [
            join_codes(legacy_codes(t)) if old and isinstance(t, str) and t and not isinstance(c, str)
            else c
            for old, t, c in zip(rows, frame[text], frame[codes], strict=True)
        ]  # fmt: skip
    frame["slo_met"] = [
        (SLO_MET if str(v) == "True" else SLO_MISSED)
        if old and isinstance(v, bool | str) and str(v) in ("True", "False")
        else v
        for old, v in zip(rows, frame["slo_met"], strict=True)
    ]
    frame["status"] = frame["status"].where(~rows | frame["status"].notna(), "ok")
    frame["search_steps"] = [
        _search_steps_from_1(v) if old else v
        for old, v in zip(rows, frame["search_steps"], strict=True)
    ]
    return frame


# Each file's steps, by the version they upgrade from.
_TRIAL_STEPS: dict[int, Step] = {1: _trial_rows_from_1, 2: _trial_rows_from_2}
_SETTING_STEPS: dict[int, Step] = {2: _renamed_from_2}


def _search_steps_from_1(text: object) -> object:
    """A format-1 `search_steps` cell, positional `[[rate, latency, met, reasons], ...]`
    with, as the runner grew, the reasons' codes (else read from the text) and then the
    judge's verdict, low and high (else none, and the interval is the one latency), as
    today's records; a cell that does not read so is left as it is (no steps, to readers)."""
    if not isinstance(text, str) or not text.strip():
        return text
    try:
        steps = []
        for s in json.loads(text):
            reasons = str(s[3]) if len(s) > 3 and s[3] else ""
            latency = _seconds_or_none(s[1])
            judged = len(s) > 7
            steps.append(
                SearchStepRecord(
                    rate=float(s[0]),
                    latency_s=latency,
                    met=bool(s[2]),
                    reasons=reasons,
                    codes=tuple(str(c) for c in s[4]) if len(s) > 4 else legacy_codes(reasons),
                    verdict=str(s[5]) if judged and s[5] is not None else None,
                    low_s=_seconds_or_none(s[6]) if judged else latency,
                    high_s=_seconds_or_none(s[7]) if judged else latency,
                )
            )
    except (ValueError, TypeError, IndexError, KeyError):
        return text
    return search_steps_json(steps)


def no_space(err: BaseException) -> OSError | None:
    """The "no space left on device" error behind `err`, if any.

    Writers wrap it (the load engine raises "writing records failed" from it), so the
    chain of causes is searched."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        stack += [current.__cause__, current.__context__]
    return None


def no_space_reason(path: str | Path) -> str:
    """The run's reason when the disk filled up (what run.json and the last line say)."""
    return f"no space left on device ({path})"


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then rename tmp over `path`: a kill leaves the old file or the new one.

    On failure the temp file is removed; a full disk is raised as ENOSPC naming `path`
    (pyarrow's own error names no file)."""
    tmp = path.parent / f".{path.name}{TEMP_SUFFIX}"
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if no_space(err) is not None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from err
        raise


def _readable(path: Path) -> bool:
    """Whether a Parquet file has its footer (a kill mid-write leaves none)."""
    try:
        pq.read_metadata(path)
    except (pa.ArrowInvalid, OSError):
        return False
    return True


def _versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _machine() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    }


def new_run_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def unused_run_id(root: Path, run_id: str) -> str:
    """`run_id`, or `<run_id>-2`, `-3`, … if a run of that name is already under `root`:
    for a generated id (to the second) that another process will create the folder for."""
    candidate, suffix = run_id, 1
    while (Path(root) / candidate).exists():
        suffix += 1
        candidate = f"{run_id}-{suffix}"
    return candidate


@dataclass
class RunDirectory:
    path: Path
    run: dict[str, Any] = field(default_factory=dict)
    rows: list[TrialRow] = field(default_factory=list)
    cold_starts: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        root: Path,
        run_id: str,
        scenario_text: str,
        scenario_path: Path,
        *,
        unique: bool = False,
    ) -> RunDirectory:
        """A new run directory under `root`.

        `unique`: `run_id` is a generated one (to the second), so a run started in the same
        second gets `<run_id>-2`, `-3`, …; without it an existing directory is an error
        (callers that told another process the id need exactly that one)."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise ResultDirError(f"{root}: not a directory (the results folder holds runs)")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ResultDirError(f"{root}: cannot make the results folder ({err})") from None
        path, suffix = root / run_id, 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                if not unique:
                    raise
                suffix += 1
                path = root / f"{run_id}-{suffix}"
            except OSError as err:
                raise ResultDirError(f"{path}: cannot make the run directory ({err})") from None
        directory = cls(path)
        directory.run = {
            "run_id": path.name,
            "format_version": FORMAT_VERSION,
            "scenario": str(scenario_path),
            "status": RunStatus.RUNNING,
            "reason": None,
            "started_at": datetime.now(UTC).isoformat(),
            "ended_at": None,
            "machine": _machine(),
            "versions": _versions(),
            "source": "servebench scenario runner",
            "trials_planned": 0,
        }
        try:
            (path / RECORDS_DIR).mkdir()
            write_atomically(path / SCENARIO_FILE, lambda tmp: tmp.write_text(scenario_text))
            directory.write_run()
        except OSError as err:
            raise ResultDirError(f"{path}: cannot write the run directory ({err})") from None
        return directory

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """An existing run, for --resume: earlier rows and status are read, nothing is
        changed yet (see `recover`). Anything unreadable is a `ResultDirError`."""
        path = Path(path)
        if not path.exists():
            raise ResultDirError(f"{path}: no such run directory")
        if not path.is_dir():
            raise ResultDirError(f"{path}: not a directory (give the run's folder)")
        directory = cls(path, run=read_run_json(path / RUN_FILE))
        trials = _read_frame(path / TRIALS_FILE, "trial_id", text=TRIAL_TEXT_COLUMNS)
        if trials is not None:
            trials = upgrade(RunFiles(trials=trials), path).trials
        try:
            directory.rows = [
                TrialRow.from_record(record)
                for record in ([] if trials is None else trials.to_dict("records"))
            ]
        except TrialRowError as err:
            raise ResultDirError(f"{path / TRIALS_FILE}: {err}") from None
        directory.cold_starts = _read_rows(path / COLD_START_FILE, "phase")
        return directory

    def recover(self) -> list[str]:
        """Make a run ready to resume: note the resume and repair what a kill left; return
        what was repaired (each line is also kept in run.json's warnings).

        Temp files are writes cut short: removed. A per-trial file without its footer is
        the trial that was in flight (or a damaged file): removed, so that trial runs
        again. A torn merged file is removed: the merge at the end rebuilds it. A
        telemetry.parquet from before per-trial telemetry files is split into them.
        """
        self.run.setdefault("resumed_at", []).append(datetime.now(UTC).isoformat())
        notes: list[str] = []
        folders = [self.path, *(self.path / folder for folder, _ in MERGED)]
        for tmp in sorted(t for f in folders for t in f.glob(f".*{TEMP_SUFFIX}")):
            tmp.unlink()
            notes.append(f"{tmp.relative_to(self.path)}: a write cut short; removed")
        for folder, merged in MERGED:
            (self.path / folder).mkdir(exist_ok=True)
            for part in sorted((self.path / folder).glob("*.parquet")):
                if not _readable(part):
                    part.unlink()
                    notes.append(
                        f"{part.relative_to(self.path)}: torn (the run stopped while writing "
                        f"it); removed, trial {part.stem} runs again"
                    )
            if (self.path / merged).is_file() and not _readable(self.path / merged):
                (self.path / merged).unlink()
                notes.append(f"{merged}: torn; removed (rebuilt from {folder}/ at the end)")
        legacy = self.path / TELEMETRY_FILE
        parts = self.path / TELEMETRY_DIR
        if legacy.is_file() and not any(parts.iterdir()):
            table = pq.read_table(legacy)
            for trial_id in pc.unique(table["trial_id"]).to_pylist():
                self.write_trial_telemetry(
                    trial_id, table.filter(pc.equal(table["trial_id"], trial_id))
                )
        for note in notes:
            self.warn(note)
        return notes

    def warn(self, text: str) -> None:
        """Keep a warning in run.json (written with the next `write_run`)."""
        self.run.setdefault("warnings", []).append(text)

    # -- run.json ---------------------------------------------------------------------

    def write_run(self) -> None:
        text = json.dumps(self.run, indent=2, default=str) + "\n"
        try:
            write_atomically(self.path / RUN_FILE, lambda tmp: tmp.write_text(text))
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            # A full disk has no room for a second copy, but run.json must still say why
            # the run stopped: rewriting it in place needs no new space while it fits in
            # the blocks it already has (it is a few KB). Not atomic; only for this case.
            with open(self.path / RUN_FILE, "r+") as out:
                out.write(text)
                out.truncate()

    def finish(self, status: RunStatus | str, reason: str | None = None) -> None:
        """Merge the per-trial files and close run.json with `status` (a RunStatus, not
        running or unknown) and why.

        A merge the disk has no room for fails the run (unless it already failed) and
        leaves the per-trial files, which hold every record, in place of the merged file.
        """
        status = RunStatus(status)
        if status in (RunStatus.RUNNING, RunStatus.UNKNOWN):
            raise ValueError(f"a run is not finished as {status}")
        for folder, merged in MERGED:
            try:
                self._merge(folder, merged)
            except OSError as err:
                if no_space(err) is None:
                    raise
                (self.path / merged).unlink(missing_ok=True)  # stale: parts are newer
                self.warn(f"{merged} not written ({err.strerror}): {folder}/ holds it per trial")
                if status != RunStatus.FAILED:
                    status, reason = RunStatus.FAILED, no_space_reason(err.filename or self.path)
        self.run.update(status=status, reason=reason, ended_at=datetime.now(UTC).isoformat())
        self.write_run()

    def write_tune(self, search: Mapping[str, Any]) -> None:
        """Write the configuration search's path (`tune.json`), whole, as it stands."""
        text = json.dumps(search, indent=2, default=str) + "\n"
        write_atomically(self.path / TUNE_FILE, lambda tmp: tmp.write_text(text))

    # -- trials -----------------------------------------------------------------------

    def completed_trials(self) -> set[str]:
        """Trials with a summary row and a closed records file: what --resume skips."""
        return {
            row["trial_id"]
            for row in self.rows
            if row.get("status") == "ok" and self.trial_records_path(row["trial_id"]).is_file()
        }

    def trial_records_path(self, trial_id: str) -> Path:
        return self.path / RECORDS_DIR / f"{trial_id}.parquet"

    def trial_telemetry_path(self, trial_id: str) -> Path:
        return self.path / TELEMETRY_DIR / f"{trial_id}.parquet"

    def add_trial(self, row: TrialRow) -> None:
        """Record (or replace, on resume) a trial's summary row and rewrite trials.csv."""
        if not isinstance(row, TrialRow):
            raise TrialRowError(
                f"add_trial takes a TrialRow (servebench.trial_row builds them), "
                f"not {type(row).__name__}"
            )
        self.rows = [r for r in self.rows if r.trial_id != row.trial_id]
        self.rows.append(row)
        self.write_trials()

    def write_trials(self) -> None:
        """Rewrite trials.csv from `rows` (also after columns were set on rows in place):
        every column of `TRIAL_SCHEMA`, in its order, whatever the rows hold; each row's
        `format_version` is today's."""
        for row in self.rows:  # each row as this servebench writes it
            row.format_version = FORMAT_VERSION
        frame = pd.DataFrame([row.to_record() for row in self.rows], columns=TRIAL_SCHEMA.names)
        write_atomically(self.path / TRIALS_FILE, lambda tmp: frame.to_csv(tmp, index=False))

    def write_settings(self, rows: list[dict[str, Any]]) -> None:
        """Rewrite settings.csv (one row per setting, over its replicates) with every column
        of `SETTING_SCHEMA`, in its order; a column the schema lacks is refused."""
        unknown = sorted({name for row in rows for name in row} - set(SETTING_COLUMNS))
        if unknown:
            raise TrialRowError(f"settings.csv has no column(s) {', '.join(unknown)}")
        frame = pd.DataFrame(rows, columns=list(SETTING_COLUMNS))
        frame["format_version"] = FORMAT_VERSION
        write_atomically(self.path / SETTINGS_FILE, lambda tmp: frame.to_csv(tmp, index=False))

    def add_cold_start(self, row: dict[str, Any]) -> None:
        self.cold_starts.append(row)
        self._write_csv(self.cold_starts, COLD_START_FILE)

    def _write_csv(self, rows: list[dict[str, Any]], name: str) -> None:
        frame = pd.DataFrame(rows)
        write_atomically(self.path / name, lambda tmp: frame.to_csv(tmp, index=False))

    # -- records and telemetry ----------------------------------------------------------

    def write_trial_telemetry(self, trial_id: str, table: pa.Table) -> Path:
        """Write one trial's telemetry as a closed file (written whole, then renamed)."""
        path = self.trial_telemetry_path(trial_id)
        path.parent.mkdir(exist_ok=True)
        write_atomically(path, lambda tmp: pq.write_table(table, tmp))
        return path

    def _merge(self, folder: str, name: str) -> int:
        """Concatenate `folder/*.parquet` into `name` (atomically); return the row count.

        A part without a footer (a trial whose writer died) holds nothing readable: it is
        removed, with a warning."""
        tables = []
        for part in sorted((self.path / folder).glob("*.parquet")):
            try:
                tables.append(pq.read_table(part))
            except (pa.ArrowInvalid, OSError):
                part.unlink()
                self.warn(f"{part.relative_to(self.path)}: torn (its writer died); removed")
        if not tables:
            return 0
        merged = pa.concat_tables(tables, promote_options="default")
        write_atomically(self.path / name, lambda tmp: pq.write_table(merged, tmp))
        return merged.num_rows


def read_setting_rows(run_dir: Path) -> list[dict[str, Any]]:
    """settings.csv's rows, upgraded (none where the run has no settings.csv, as a run
    written before replicates)."""
    text = tuple(f.name for f in SETTING_SCHEMA if f.type == _TEXT)
    frame = _read_frame(Path(run_dir) / SETTINGS_FILE, "trial_id", text=text)
    if frame is None:
        return []
    settings = upgrade(RunFiles(settings=frame), Path(run_dir)).settings
    assert settings is not None
    return settings.to_dict("records")


def _read_rows(path: Path, key: str, text: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows of one of the run's CSV files (none if it is absent or empty)."""
    frame = _read_frame(path, key, text)
    return [] if frame is None else frame.to_dict("records")


def _read_frame(path: Path, key: str, text: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """One of the run's CSV files as read (None if it is absent or empty); the `text`
    columns stay text (a model version "1" must not come back as 1.0)."""
    if not path.is_file():
        return None
    try:
        # round_trip: a number reads back as the very float written (pandas' default
        # parser can be an ulp off, and a p99 at an SLO bound must stay where it was).
        frame = pd.read_csv(path, dtype=dict.fromkeys(text, str), float_precision="round_trip")
    except pd.errors.EmptyDataError:
        return None
    except (ValueError, UnicodeDecodeError) as err:  # pandas' ParserError is a ValueError
        raise ResultDirError(f"{path}: not a readable CSV ({err})") from None
    if key not in frame.columns:
        raise ResultDirError(f"{path}: no {key} column (found {list(frame.columns)[:8]})")
    return frame
