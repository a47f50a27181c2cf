"""The trial-row contract: every producer writes only `TRIAL_SCHEMA`'s columns.

The scenario runner's row (`build_row`, from a real load summary and telemetry summary),
its failed row, and the Locust adapter's row are each handed to a `RunDirectory`, which
refuses a column the schema lacks. The runner end to end (search, SLO costs, a server
killed mid-trial) goes through the same check in tests/test_scenario_run.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from test_scenario_run import scenario as scenario_file

from servebench.analysis.loader import BOOL_COLUMNS, NUMBER_COLUMNS, TEXT_COLUMNS
from servebench.load import LoadSettings, LoadSummary, columns_from_table, summarize
from servebench.load.records import TIMEOUT_CODE, Chunk, Clock, chunk_to_batch
from servebench.load.summary import MAX_ERROR_SHARE, judge
from servebench.locust.records import Coordinates
from servebench.locust.results import LocustRun
from servebench.netem import resolve_link
from servebench.pricing import InstancePrice
from servebench.results import (
    TRIAL_COLUMNS,
    TRIAL_SCHEMA,
    TRIALS_FILE,
    RunDirectory,
    TrialRow,
    TrialRowError,
)
from servebench.scenario.plan import Trial, expand
from servebench.scenario.runner import _failed_row
from servebench.scenario.schema import Scenario
from servebench.scenario.trial import TrialContext, TrialSink, build_row
from servebench.scenario.validate import load_scenario
from servebench.telemetry import aggregate


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    """The runner tests' tiny scenario (SLO, priced instance) over an emulated link."""
    return load_scenario(scenario_file(tmp_path, batch_sizes="[2]", links="[wifi]"))


@pytest.fixture
def trial(scenario: Scenario, tmp_path: Path) -> Trial:
    return expand(scenario, tmp_path).trials[0]


def _chunk(n: int = 50) -> Chunk:
    """n requests 25 ms apart, 4 ms each, the last one timed out."""
    start = 1000.0 + 0.025 * np.arange(n)
    code = np.zeros(n, dtype=np.int8)
    code[-1] = TIMEOUT_CODE
    return Chunk(
        seq=np.arange(n, dtype=np.int64),
        intended=start,
        send=start + 1e-4,
        completion=start + 4e-3,
        code=code,
        request_bytes=np.full(n, 300, dtype=np.int64),
        response_bytes=np.full(n, 200, dtype=np.int64),
    )


def _load_summary(batch: pa.RecordBatch) -> LoadSummary:
    summary = summarize(
        columns_from_table(pa.Table.from_batches([batch])), mode="open", target_rate=40.0
    )
    return judge(summary, late_threshold=1e-3, late_limit=0.01, max_error_share=MAX_ERROR_SHARE)


def scenario_row(scenario: Scenario, trial: Trial, tmp_path: Path) -> TrialRow:
    """`build_row` from real parts: a load summary, the telemetry summary, the sink."""
    ctx = TrialContext(
        scenario=scenario,
        base_dir=tmp_path,
        server=None,  # build_row reads no server
        records_path=lambda trial_id: tmp_path / f"{trial_id}.parquet",
        host_peak_flops=5e10,
        price=InstancePrice("c6i.xlarge", 0.17),
        on_engine=lambda engine: None,
        stop_requested=lambda: False,
    )
    batch = chunk_to_batch(
        _chunk(), trial_id=trial.id, batch_size=trial.batch_size, clock=Clock(0.0, 0.0),
        latency_from_send=False,
    )  # fmt: skip
    sink = TrialSink(tmp_path / f"{trial.id}.parquet")
    sink.write(batch)
    sink.close()
    telemetry = aggregate([], model=trial.model.id)
    return build_row(
        trial, ctx, resolve_link("wifi"), _load_summary(batch), telemetry, sink, extra={}
    )


def run_directory(tmp_path: Path) -> RunDirectory:
    return RunDirectory.create(tmp_path / "results", "r", "name: rows\n", Path("rows.yaml"))


def test_scenario_row_fits_the_schema(scenario: Scenario, trial: Trial, tmp_path: Path) -> None:
    row = scenario_row(scenario, trial, tmp_path)
    assert set(row) <= TRIAL_COLUMNS, sorted(set(row) - TRIAL_COLUMNS)
    # The values have the schema's types too (a count is an integer, a rate a number).
    pa.Table.from_pylist([row], schema=TRIAL_SCHEMA)
    directory = run_directory(tmp_path)
    directory.add_trial(row)
    assert (directory.path / TRIALS_FILE).is_file()


def test_failed_row_fits_the_schema(trial: Trial, tmp_path: Path) -> None:
    row = _failed_row(trial, "RuntimeError: boom")
    assert set(row) <= TRIAL_COLUMNS
    pa.Table.from_pylist([row], schema=TRIAL_SCHEMA)
    run_directory(tmp_path).add_trial(row)


def locust_row(tmp_path: Path) -> TrialRow:
    """One swarm's row, as the Locust adapter writes it (with the generator's CPU time)."""
    run = LocustRun(tmp_path, "locust")
    coords = Coordinates("http://h:1", "triton", "triton-grpc", "m", "", 2, "wifi")
    (row,) = run.add_swarm(run.start_swarm(), [(coords, _chunk())], users=3, client_cpu_s=0.4)
    return row


def test_locust_row_fits_the_schema(tmp_path: Path) -> None:
    row = locust_row(tmp_path)
    assert set(row) <= TRIAL_COLUMNS, sorted(set(row) - TRIAL_COLUMNS)
    pa.Table.from_pylist([row], schema=TRIAL_SCHEMA)


@pytest.mark.parametrize("producer", ["scenario", "locust"])
def test_a_new_load_field_without_the_schema_fails_loudly(
    producer: str,
    scenario: Scenario,
    trial: Trial,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LoadSummary field added later reaches both producers' rows under its own name;
    until the schema has it, the run directory refuses the row, before trials.csv."""
    plain = LoadSummary.to_dict
    monkeypatch.setattr(LoadSummary, "to_dict", lambda self: {**plain(self), "queue_depth": 3})
    with pytest.raises(TrialRowError, match=r"\['queue_depth'\].*TRIAL_SCHEMA"):
        if producer == "scenario":
            run_directory(tmp_path).add_trial(scenario_row(scenario, trial, tmp_path))
        else:
            locust_row(tmp_path)
    assert not list(tmp_path.rglob(TRIALS_FILE))


def test_a_column_added_in_place_is_refused_at_the_rewrite(trial: Trial, tmp_path: Path) -> None:
    """The runner adds SLO costs to rows in place and rewrites trials.csv: checked too."""
    directory = run_directory(tmp_path)
    directory.add_trial(_failed_row(trial, "boom"))
    directory.rows[0]["cost_at_slo_usd"] = 1.0
    with pytest.raises(TrialRowError, match="cost_at_slo_usd"):
        directory.write_trials()


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
