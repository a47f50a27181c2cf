"""Reading a result directory: clear errors for what is not one, tolerance for what a
crashed run leaves behind."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_analysis_rundir import make_run_dir, run_without_trials

from servebench.analysis.loader import ResultDirError, load_run


def test_reads_every_file(tmp_path: Path) -> None:
    data = load_run(make_run_dir(tmp_path, duration=20))
    assert data.run_id == "fixture-20261129T120000Z"
    assert data.status == "complete"
    assert len(data.trials) == 17
    assert len(data.ok_trials) == 16
    assert data.records is not None and set(data.records["trial_id"]) == set(
        data.trials["trial_id"]
    )
    assert data.cold_start is not None and set(data.cold_start["phase"]) == {
        "server_ready",
        "model_load",
        "first_inference",
        "warm_median",
    }
    assert data.telemetry is not None and "metric" in data.telemetry.columns
    assert data.scenario_text and "links" in data.scenario_text
    # Numbers are numbers, missing values are empty, text stays text.
    assert data.trials["latency_p99"].dtype.kind == "f"
    assert data.trials["link_up_mbps"].isna().sum() == 9  # the direct trials
    assert data.trials["trial_id"].map(type).eq(str).all()
    # This run is older than confidence intervals: its True/False read as met/missed.
    assert set(data.trials["slo_met"].dropna()) == {"met", "missed"}


def test_missing_directory_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ResultDirError, match=f"{tmp_path / 'nope'}: no such run directory"):
        load_run(tmp_path / "nope")


def test_folder_without_run_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ResultDirError, match=r"run\.json: missing; not a servebench run directory"):
        load_run(tmp_path)


def test_file_instead_of_folder(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("x")
    with pytest.raises(ResultDirError, match="not a directory"):
        load_run(tmp_path / "report.html")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", r"run\.json: not valid JSON"),
        (b"[" * 100_000, r"run\.json: not valid JSON \(maximum recursion depth"),
        (b'{"run_id": "caf\xe9"}', r"run\.json:1: not UTF-8 text \(byte 0xe9 at offset 15\)"),
        (b"[1, 2]", r"run\.json: expected a JSON object, found list"),
    ],
)
def test_corrupt_run_json(tmp_path: Path, content: bytes, says: str) -> None:
    run = make_run_dir(tmp_path, duration=10)
    (run / "run.json").write_bytes(content)
    with pytest.raises(ResultDirError, match=says):
        load_run(run)


def test_trials_without_trial_id_column(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=10)
    pd.read_csv(run / "trials.csv").drop(columns="trial_id").to_csv(run / "trials.csv", index=False)
    with pytest.raises(ResultDirError, match=r"trials\.csv: no trial_id column"):
        load_run(run)


def test_non_numeric_value_names_column(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=10)
    frame = pd.read_csv(run / "trials.csv")
    frame["latency_p99"] = frame["latency_p99"].astype(object)
    frame.loc[3, "latency_p99"] = "fast"
    frame.to_csv(run / "trials.csv", index=False)
    with pytest.raises(ResultDirError, match=r"column latency_p99: 'fast' is not a number"):
        load_run(run)


def test_crashed_run_reads_per_trial_records(tmp_path: Path) -> None:
    """No merged records.parquet (the runner died): the per-trial files are used, and a
    file cut off mid-write is skipped rather than failing the report."""
    run = make_run_dir(tmp_path, duration=10)
    (run / "records.parquet").unlink()
    parts = sorted((run / "records").glob("*.parquet"))
    broken = parts[0]
    broken.write_bytes(broken.read_bytes()[:100])
    data = load_run(run)
    assert data.records is not None
    assert broken.stem not in set(data.records["trial_id"])
    assert len(set(data.records["trial_id"])) == len(parts) - 1


def test_interrupted_before_first_trial(tmp_path: Path) -> None:
    data = load_run(run_without_trials(tmp_path, "r1", "interrupted", "SIGINT"))
    assert data.trials.empty and data.records is None and data.cold_start is None
    assert data.status == "interrupted"


def test_older_runner_without_some_columns(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=10)
    frame = pd.read_csv(run / "trials.csv").drop(columns=["host_peak_flops", "cost_per_million"])
    frame.to_csv(run / "trials.csv", index=False)
    data = load_run(run)
    assert data.trials["host_peak_flops"].isna().all()
    assert data.trials["cost_per_million"].isna().all()
