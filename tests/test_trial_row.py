"""The trial-row contract: one builder (`servebench.trial_row`) makes every producer's row,
and the row is a `TrialRow` whose fields are exactly `TRIAL_SCHEMA`'s columns.

The scenario runner's row (from a real load summary and telemetry summary), its failed
row, and the Locust adapter's row are each handed to a `RunDirectory`. The runner end to
end (search, SLO costs, a server killed mid-trial) goes through the same builder in
tests/test_scenario_run.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from test_scenario_run import scenario as scenario_file

from servebench.analysis.loader import BOOL_COLUMNS, NUMBER_COLUMNS, TEXT_COLUMNS, read_trials
from servebench.load import LoadControl, LoadSettings, LoadSummary, columns_from_table, summarize
from servebench.load.records import TIMEOUT_CODE, Chunk, Clock, chunk_to_batch
from servebench.load.summary import MAX_ERROR_SHARE, judge
from servebench.locust.facts import TrialFacts
from servebench.locust.records import Coordinates
from servebench.locust.results import LocustRun
from servebench.netem import resolve_link
from servebench.pricing import InstancePrice
from servebench.results import (
    TRIAL_SCHEMA,
    TRIALS_FILE,
    RunDirectory,
    TrialRow,
    TrialRowError,
)
from servebench.scenario.plan import Trial, expand
from servebench.scenario.round_runner import failed_replicate_row
from servebench.scenario.rounds import Replicate
from servebench.scenario.schema import Scenario
from servebench.scenario.trial import TrialContext, TrialSink, trial_row
from servebench.scenario.validate import load_scenario
from servebench.telemetry import aggregate
from servebench.trial_row import Slo, TrialCoordinates, build_row


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    """The runner tests' tiny scenario (SLO, priced instance) over an emulated link."""
    return load_scenario(scenario_file(tmp_path, batch_sizes="[2]", links="[wifi]"))


@pytest.fixture
def trial(scenario: Scenario, tmp_path: Path) -> Trial:
    return expand(scenario, tmp_path).trials[0]


def _chunk(n: int = 50, latency: np.ndarray | None = None) -> Chunk:
    """n requests 25 ms apart, 4 ms each (or `latency`), the last one timed out."""
    start = 1000.0 + 0.025 * np.arange(n)
    code = np.zeros(n, dtype=np.int8)
    code[-1] = TIMEOUT_CODE
    return Chunk(
        seq=np.arange(n, dtype=np.int64),
        intended=start,
        send=start + 1e-4,
        completion=start + (4e-3 if latency is None else latency),
        code=code,
        request_bytes=np.full(n, 300, dtype=np.int64),
        response_bytes=np.full(n, 200, dtype=np.int64),
    )


def _batch(trial_id: str, chunk: Chunk, batch_size: int = 2) -> pa.RecordBatch:
    return chunk_to_batch(
        chunk, trial_id=trial_id, batch_size=batch_size, clock=Clock(0.0, 0.0),
        latency_from_send=True,
    )  # fmt: skip


def _load_summary(batch: pa.RecordBatch, mode: str = "open") -> LoadSummary:
    summary = summarize(
        columns_from_table(pa.Table.from_batches([batch])), mode=mode, target_rate=40.0
    )
    return judge(summary, late_threshold=1e-3, late_limit=0.01, max_error_share=MAX_ERROR_SHARE)


def _context(scenario: Scenario, tmp_path: Path) -> TrialContext:
    return TrialContext(
        scenario=scenario,
        base_dir=tmp_path,
        server=None,  # the row reads no server
        records_path=lambda trial_id: tmp_path / f"{trial_id}.parquet",
        host_peak_flops=5e10,
        price=InstancePrice("c6i.xlarge", 0.17),
        control=LoadControl(),
    )


def scenario_row(
    scenario: Scenario, trial: Trial, tmp_path: Path, chunk: Chunk | None = None
) -> TrialRow:
    """The scenario runner's row from real parts: a load summary, the telemetry summary,
    the sink's byte counts."""
    batch = _batch(trial.id, chunk or _chunk(), trial.batch_size)
    sink = TrialSink(tmp_path / f"{trial.id}.parquet")
    sink.write(batch)
    sink.close()
    telemetry = aggregate([], model=trial.model.id)
    ctx = _context(scenario, tmp_path)
    return trial_row(trial, ctx, resolve_link("wifi"), _load_summary(batch), telemetry, sink)


def run_directory(tmp_path: Path) -> RunDirectory:
    return RunDirectory.create(tmp_path / "results", "r", "name: rows\n", Path("rows.yaml"))


def test_the_row_type_is_the_schema() -> None:
    """TrialRow's fields are TRIAL_SCHEMA's columns, in order, typed as the schema says."""
    fields = dataclasses.fields(TrialRow)
    assert [f.name for f in fields] == TRIAL_SCHEMA.names
    python = {"string": "str", "int64": "int", "double": "float", "bool": "bool"}
    for f in fields:
        assert f.type == f"{python[str(TRIAL_SCHEMA.field(f.name).type)]} | None", f.name
    empty = TrialRow()
    assert all(value is None for value in empty.to_record().values())


def test_a_row_refuses_a_column_or_a_type_the_schema_lacks() -> None:
    row = TrialRow(trial_id="t1", count=np.int64(3), latency_p99=np.float32(0.5))
    assert (type(row.count), type(row.latency_p99)) == (int, float)  # numpy scalars converted
    with pytest.raises(TrialRowError, match=r"\['queue_depth'\].*TRIAL_SCHEMA"):
        TrialRow.from_record({"trial_id": "t1", "queue_depth": 3})
    with pytest.raises(TrialRowError, match="column count holds str"):
        row.update(count="many")
    with pytest.raises(TrialRowError, match="column slo_met holds float"):
        TrialRow(slo_met=0.5)
    with pytest.raises(AttributeError):
        row.queue_depth = 3  # slots: no column appears by assignment either


def test_scenario_row_fits_the_schema(scenario: Scenario, trial: Trial, tmp_path: Path) -> None:
    row = scenario_row(scenario, trial, tmp_path)
    assert isinstance(row, TrialRow)
    # The values have the schema's types too (a count is an integer, a rate a number).
    pa.Table.from_pylist([row.to_record()], schema=TRIAL_SCHEMA)
    # 1 of 50 requests timed out: over the 1 % error share, INVALID with its code.
    assert (row.verdict, row.verdict_reason_codes, row.reason) == ("INVALID", "errors", None)
    assert row.flops_per_sample > 0 and row.link_time_analytic_s > row.link_rtt_s > 0
    directory = run_directory(tmp_path)
    directory.add_trial(row)
    assert (directory.path / TRIALS_FILE).is_file()
    # Read back, the row is the same row (an empty cell is None again, integers integers).
    assert RunDirectory.open(directory.path).rows == [row]


def test_failed_row_fits_the_schema(trial: Trial, tmp_path: Path) -> None:
    row = failed_replicate_row(Replicate(trial, 1, 1, 1), "RuntimeError: boom")
    assert (row.status, row.reason, row.layer_type, row.params) == (
        "failed", "RuntimeError: boom", trial.model.layer_type, None,
    )  # fmt: skip
    pa.Table.from_pylist([row.to_record()], schema=TRIAL_SCHEMA)
    run_directory(tmp_path).add_trial(row)


def locust_row(tmp_path: Path, chunk: Chunk | None = None, facts: TrialFacts | None = None):
    """One swarm's row, as the Locust adapter writes it (with the generator's CPU time)."""
    run = LocustRun(tmp_path, "locust", facts=facts)
    coords = Coordinates("http://h:1", "triton", "triton-grpc", "m", "", 2, "wifi")
    swarm = run.start_swarm()
    (row,) = run.add_swarm(swarm, [(coords, chunk or _chunk())], users=3, client_cpu_s=0.4)
    return row


def test_locust_row_fits_the_schema(tmp_path: Path) -> None:
    row = locust_row(tmp_path)
    assert isinstance(row, TrialRow)
    pa.Table.from_pylist([row.to_record()], schema=TRIAL_SCHEMA)
    assert (row.launch, row.load_kind, row.load_level, row.client_cpu_s) == (
        "locust", "users", 3, 0.4,
    )  # fmt: skip


def test_both_producers_write_the_same_columns_from_the_same_records(
    scenario: Scenario, trial: Trial, tmp_path: Path
) -> None:
    """One builder: a scenario trial and a Locust swarm that measured the same requests
    over the same link, priced and held to the same SLO, say the same in every column
    that is not about where they ran."""
    facts = TrialFacts("c6i.xlarge", 0.17, 99.0, scenario.slo.latency_ms / 1e3)
    mine = scenario_row(scenario, trial, tmp_path, _chunk())
    theirs = locust_row(tmp_path / "l", _chunk(), facts)
    # format_version: set when a row is written (the Locust row was, the other not yet).
    where = {f.name for f in dataclasses.fields(TrialCoordinates)} | {
        "trial_id", "index", "format_version",
    }  # fmt: skip
    only_scenario = {  # what a Locust swarm does not have: telemetry, model counts, settings
        *aggregate([], model="m"), "client_minus_server_s", "host_peak_flops",
        "layer_type", "depth", "width", "params", "flops_per_sample", "weight_bytes",
        "activation_bytes", "load", "concurrency", "generators", "client_cpu_s",
    }  # fmt: skip
    # The scenario's load summary here is an open loop's (lateness judged), Locust's closed.
    loop = {"mode", "target_rate", "scheduled_rate", "latency_mean"}
    different = {
        name
        for name, value in mine.to_record().items()
        if name not in where | only_scenario | loop and value != theirs[name]
    }
    assert different == set()
    assert mine.slo_latency_s == theirs.slo_latency_s == mine.latency_p99
    assert mine.errors_by_kind == theirs.errors_by_kind == json.dumps({"timeout": 1})


@pytest.mark.parametrize("producer", ["scenario", "locust"])
def test_a_new_load_field_without_the_schema_fails_loudly(
    producer: str,
    scenario: Scenario,
    trial: Trial,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LoadSummary field added later reaches both producers' rows under its own name;
    until the schema has it, the row refuses it, before trials.csv."""
    plain = LoadSummary.to_dict
    monkeypatch.setattr(LoadSummary, "to_dict", lambda self: {**plain(self), "queue_depth": 3})
    with pytest.raises(TrialRowError, match=r"\['queue_depth'\].*TRIAL_SCHEMA"):
        if producer == "scenario":
            run_directory(tmp_path).add_trial(scenario_row(scenario, trial, tmp_path))
        else:
            locust_row(tmp_path)
    assert not list(tmp_path.rglob(TRIALS_FILE))


def test_a_column_set_in_place_is_refused(trial: Trial, tmp_path: Path) -> None:
    """The runner sets SLO costs on rows in place and rewrites trials.csv: checked too."""
    directory = run_directory(tmp_path)
    directory.add_trial(failed_replicate_row(Replicate(trial, 1, 1, 1), "boom"))
    with pytest.raises(TrialRowError, match="cost_at_slo_usd"):
        directory.rows[0].update(cost_at_slo_usd=1.0)
    with pytest.raises(TrialRowError, match="add_trial takes a TrialRow"):
        directory.add_trial({"trial_id": "t2", "status": "ok"})


def test_every_column_has_a_unit_a_meaning_and_a_reading() -> None:
    names = TRIAL_SCHEMA.names
    assert len(names) == len(set(names))
    for field in TRIAL_SCHEMA:
        assert field.metadata[b"doc"], field.name
        assert b"unit" in field.metadata, field.name
    # The loader types every column the producers write, from the same schema.
    assert sorted((*TEXT_COLUMNS, *NUMBER_COLUMNS, *BOOL_COLUMNS)) == sorted(names)


def test_one_error_share_threshold() -> None:
    assert LoadSettings(concurrency=1, count=1).max_error_share == MAX_ERROR_SHARE == 0.01


# -- the SLO verdict and the p99 it is taken from (issue 21's acceptance) -----------------


def _at_the_bound(bound_from_p99) -> tuple[LoadSummary, float]:
    """100 answered requests whose nearest-rank p99 (the 99th smallest latency) sits right
    at the SLO bound: 98 fast ones, the 99th at the bound, one slow one above it. Numpy's
    linear p99 lies 1 % of the way to the slow one, over the bound: the two definitions
    would give a row that says "p99 50 ms" and "SLO 50 ms missed"."""
    latency = np.full(101, 0.010)
    latency[98], latency[99] = 0.050, 0.400
    chunk = _chunk(101, latency)  # the 101st times out: 100 answered
    summary = _load_summary(_batch("t", chunk, 1), mode="closed")
    ok = np.sort(chunk.completion - chunk.send)[:100]
    assert np.percentile(ok, 99) > ok[98]  # numpy's default would miss the bound
    return summary, bound_from_p99(summary.latency_p99)


def test_the_slo_row_shows_the_nearest_rank_p99_and_cannot_bound_it_from_100() -> None:
    summary, bound = _at_the_bound(lambda p99: p99)
    assert summary.ok == 100
    where = TrialCoordinates(
        "t", 1, "triton", "triton", "triton", "m", 1, "direct", "concurrency", 4.0, "local", "http"
    )
    row = build_row(where, summary, slo=Slo(99.0, bound))
    assert row.slo_latency_s == row.latency_p99  # the same number, not merely close
    # 100 requests cannot bound a p99 from above (0.99^100 > 2.5 %): the point is at the
    # bound, but the SLO is undecided, whatever the point says.
    assert row.slo_latency_high is None and row.slo_met == "undecided"


@pytest.mark.parametrize(
    ("bound_from", "decision"),
    [
        (lambda low, high: high, "met"),  # the high bound is the SLO bound exactly
        (lambda low, high: float(np.nextafter(high, -np.inf)), "undecided"),  # one ulp under
        (lambda low, high: low, "undecided"),  # the low bound is the SLO's: not over it
        (lambda low, high: float(np.nextafter(low, -np.inf)), "missed"),  # low one ulp over
    ],
    ids=["high-at-bound", "high-one-ulp-over", "low-at-bound", "low-one-ulp-over"],
)
def test_slo_met_agrees_with_the_interval_the_row_shows(bound_from, decision: str) -> None:
    latency = np.random.default_rng(5).lognormal(-4, 0.5, size=2001)
    chunk = _chunk(2001, latency)  # the last one times out: 2000 answered
    summary = _load_summary(_batch("t", chunk, 1), mode="closed")
    low, high = summary.latency_p99_low, summary.latency_p99_high
    where = TrialCoordinates(
        "t", 1, "triton", "triton", "triton", "m", 1, "direct", "concurrency", 4.0, "local", "http"
    )
    row = build_row(where, summary, slo=Slo(99.0, bound_from(low, high)))
    assert (row.slo_latency_low, row.slo_latency_s, row.slo_latency_high) == (
        row.latency_p99_low, row.latency_p99, row.latency_p99_high
    )  # fmt: skip
    assert row.slo_met == decision
    assert row.confidence_level == 0.95 and row.slo_requests_to_decide is not None


@pytest.mark.parametrize("producer", ["scenario", "locust"])
def test_each_producer_decides_the_slo_from_its_row_p99(
    producer: str, scenario: Scenario, trial: Trial, tmp_path: Path
) -> None:
    """Through the scenario runner's and the Locust adapter's own paths, written to
    trials.csv and read back as the report reads it."""
    latency = np.full(101, 0.010)
    latency[98], latency[99] = 0.050, 0.400  # p99 just under 50 ms; numpy's linear one over
    chunk = _chunk(101, latency)
    if producer == "scenario":
        slo = scenario.slo.model_copy(update={"latency_ms": 50.0})
        row = scenario_row(scenario.model_copy(update={"slo": slo}), trial, tmp_path, chunk)
        directory = run_directory(tmp_path)
        directory.add_trial(row)
        path = directory.path
    else:
        row = locust_row(tmp_path, chunk, TrialFacts(slo_percentile=99.0, slo_latency_s=0.05))
        path = tmp_path / "locust"
    # 100 answered requests cannot bound p99 from above: undecided, though the point meets.
    assert row.slo_latency_s == row.latency_p99 and row.slo_met == "undecided"
    read = read_trials(path / TRIALS_FILE).iloc[0]
    assert read["slo_latency_s"] == read["latency_p99"] and read["slo_met"] == "undecided"
