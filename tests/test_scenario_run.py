"""The scenario runner end to end against the real local Triton.

Each test runs a tiny scenario (one small dense model) so the whole file stays around a
minute: consistency of every result file, a server killed mid-trial, Ctrl-C, and --resume.
A test that acts mid-trial waits until the server has answered measured requests
(server_checks), not for a fixed time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest
from link_checks import p50_floor_s
from scenario_checks import TINY_WORKLOAD, interrupted_run, tiny_scenario, write
from server_checks import (
    Background,
    metrics_url,
    tritonservers,
    wait_for_a_trial,
    wait_for_measured_answers,
)

from servebench.netem import resolve_link
from servebench.results import TRIAL_COLUMNS
from servebench.scenario.runner import ScenarioRunner

SLO_AND_COST = {"slo": {"percentile": 99, "latency_ms": 500}, "cost": {"instance": "c6i.xlarge"}}


def scenario(tmp_path: Path, *, batch_sizes=(1, 2), duration=1.0, links=("direct",)) -> Path:
    workload = {**TINY_WORKLOAD, "batch_sizes": batch_sizes, "duration_s": duration}
    text = tiny_scenario("tiny", workload=workload, links=links, **SLO_AND_COST)
    return write(tmp_path, "# test scenario\n" + text, "tiny.yaml")


@pytest.fixture(autouse=True)
def _needs_triton(triton_install):
    """Skips (with the reason) where the nvidia-pytriton wheel is missing."""


def run_dir_of(root: Path) -> Path:
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    return run


def test_short_run_writes_consistent_result_files(tmp_path: Path):
    outcome = ScenarioRunner(
        scenario(tmp_path, links=("direct", "wifi")), output=tmp_path / "results"
    ).run()
    run = outcome.directory.path
    assert outcome.status == "complete", outcome.reason
    for name in (
        "scenario.yaml",
        "run.json",
        "records.parquet",
        "trials.csv",
        "telemetry.parquet",
        "cold_start.csv",
    ):
        assert (run / name).is_file(), name
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["trials_planned"] == 4
    trials = pd.read_csv(run / "trials.csv")
    assert len(trials) == 4 and set(trials.status) == {"ok"}
    assert set(trials.columns) <= TRIAL_COLUMNS  # RunDirectory refuses any other column
    records = pq.read_table(run / "records.parquet").to_pandas()
    assert len(records) == trials["count"].sum()
    per_trial = records.groupby("trial_id").size()
    assert per_trial.to_dict() == dict(zip(trials.trial_id, trials["count"], strict=True))
    assert (trials.errors == 0).all()
    assert set(records.batch_size) == {1, 2}
    wifi = trials[trials.link == "wifi"]
    # The emulated 20 ms RTT shows in each wifi trial's latency (above the least p50 its
    # jitter allows, link_checks; a direct trial's is a few ms), and the analytic link time
    # says so too.
    for row in wifi.itertuples():
        assert row.latency_p50 >= p50_floor_s(resolve_link("wifi"), row.count - row.errors), row
    assert (wifi.link_time_analytic_s >= 0.02).all()
    assert (trials.cost_per_million > 0).all()
    cold = pd.read_csv(run / "cold_start.csv")
    assert {"server_ready", "model_load", "first_inference", "warm_median"} <= set(cold.phase)
    assert (cold.seconds > 0).all()


# The open loop's warm-up sends exactly the requests scheduled before warmup_s: at 40 req/s
# over 0.2 s, offsets 0, 0.025, ... 0.175 s: 8 requests.
WARMUP_REQUESTS = 8


def wait_until_measuring(tmp_path: Path, run: subprocess.Popen | None = None) -> psutil.Process:
    """The tritonserver of the run below `tmp_path` (in `run` if a subprocess), once its
    first trial has answered measured requests (server_checks; at 40 req/s a 1.5 s trial
    has 50 more to go)."""
    wait_for_a_trial(tmp_path / "results", run)
    (server,) = tritonservers(tmp_path)
    wait_for_measured_answers(metrics_url(server), WARMUP_REQUESTS)
    return server


def test_server_killed_mid_trial_fails_that_trial_and_the_next_runs(tmp_path: Path):
    path = scenario(tmp_path, batch_sizes=(1, 2, 4), duration=1.5)
    runner = ScenarioRunner(path, output=tmp_path / "results")
    killer = Background(lambda: wait_until_measuring(tmp_path).kill())
    outcome = runner.run()
    killer.join()
    trials = pd.read_csv(outcome.directory.path / "trials.csv").sort_values("index")
    assert list(trials.status) == ["failed", "ok", "ok"], list(trials.reason)
    assert "stopped answering" in trials.iloc[0].reason
    records = pq.read_table(outcome.directory.path / "records.parquet").to_pandas()
    first = records[records.trial_id == trials.iloc[0].trial_id]
    assert len(first) > 0 and first.ok.any() and (~first.ok).any()
    assert outcome.status == "partial" and "1 of 3 trials failed" in outcome.reason


def test_sigint_keeps_records_and_resume_runs_only_what_is_missing(tmp_path: Path):
    path = scenario(tmp_path, batch_sizes=(1, 2, 4), duration=1.5)
    results = tmp_path / "results"
    process, output = interrupted_run(
        path, results, lambda run: wait_until_measuring(tmp_path, run)
    )
    assert process.returncode == 130, output
    run = run_dir_of(results)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "interrupted" and "SIGINT" in meta["reason"]
    # The outcome is the last line; the command that resumes the run comes just before it.
    *_, resume_line, last = output.strip().splitlines()
    assert last == f"run interrupted: stopped by SIGINT — results in {run} (exit 130)", output
    assert resume_line == f"resume it: servebench scenario run {path} --resume {run}", output
    trials = pd.read_csv(run / "trials.csv")
    assert len(trials) == 1
    assert trials.iloc[0].status == "interrupted" and trials.iloc[0].verdict == "INVALID"
    records = pq.read_table(run / "records.parquet")
    assert records.num_rows == trials["count"].sum() > 0
    assert not tritonservers(tmp_path)

    first_file = run / "records" / f"{trials.iloc[0].trial_id}.parquet"
    before = first_file.stat().st_mtime_ns
    resumed = resume(path, results, run, timeout_s=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "3 of 3 trials to run" in resumed.stdout  # the cut-short trial is run again
    trials = pd.read_csv(run / "trials.csv")
    assert len(trials) == 3 and set(trials.status) == {"ok"}
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["resumed_at"]
    records = pq.read_table(run / "records.parquet")
    assert records.num_rows == trials["count"].sum()
    assert first_file.stat().st_mtime_ns > before

    again = resume(path, results, run, timeout_s=120)
    assert again.returncode == 0 and "0 of 3 trials to run" in again.stdout


def resume(path: Path, results: Path, run: Path, timeout_s: float):
    """`servebench scenario run --resume RUN`, to its end."""
    command = [sys.executable, "-m", "servebench.cli", "scenario", "run", str(path)]
    command += ["--output", str(results), "--resume", str(run), "--no-report"]
    return subprocess.run(
        command,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_slo_search_records_every_step_and_the_rate_found(tmp_path: Path):
    search = {"min_rate": 20, "max_rate": 80, "precision": 0.5, "max_steps": 3}
    workload = {"search": "max_rate", "search_settings": search, "batch_sizes": [1]}
    workload |= {"duration_s": 1.0, "warmup_s": 0.2, "timeout_s": 2}
    # A p50 SLO: a step is judged on its percentile's interval, and a 1 s step at 20 req/s
    # has enough requests to bound a p50 (6), not a p99 (368).
    slo_and_cost = {**SLO_AND_COST, "slo": {"percentile": 50, "latency_ms": 500}}
    text = tiny_scenario("tiny", workload=workload, links=["direct"], **slo_and_cost)
    path = tmp_path / "search.yaml"
    path.write_text(text)
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    trials = pd.read_csv(outcome.directory.path / "trials.csv")
    (row,) = trials.to_dict("records")
    steps = json.loads(row["search_steps"])
    assert [s["rate"] for s in steps] == [20, 40, 80]  # bracketing doubles up to the ceiling
    # a tiny dense model answers in milliseconds: every step meets a 500 ms p50, its
    # interval's high end within the bound
    assert all(s["met"] and s["verdict"] == "met" and s["high_s"] <= 0.5 for s in steps), steps
    assert row["max_rate"] == 80
    # The row's SLO columns are its chosen step's, judged the same way, and price it.
    assert row["slo_met"] == "met" and row["slo_latency_high"] <= 0.5
    assert row["cost_per_million_at_slo"] > 0
    records = pq.read_table(outcome.directory.path / "records.parquet").to_pandas()
    assert sorted(records.trial_id.unique()) == [f"{row['trial_id']}.s{i}" for i in range(3)]
