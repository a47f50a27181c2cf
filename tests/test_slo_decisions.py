"""SLO decisions with confidence (issue 23 item 2) where people and files meet them:
older trials.csv files with True/False `slo_met` still load (and resume) as met/missed,
a row refuses any other word, and `servebench load` against the real local Triton shows
the p99's interval, writes it in `--json`, and stops early once the SLO is decided.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from servebench.analysis.loader import read_trials
from servebench.cli import app
from servebench.results import TRIALS_FILE, RunDirectory, TrialRow, TrialRowError


def _old_run(tmp_path: Path) -> Path:
    """A run written before intervals: slo_met True/False/empty, no interval columns."""
    path = tmp_path / "old"
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"run_id": "old", "status": "complete"}))
    pd.DataFrame(
        {
            "trial_id": ["a", "b", "c"],
            "status": "ok",
            "latency_p99": [0.01, 0.09, 0.02],
            "slo_bound_s": [0.05, 0.05, None],
            "slo_met": [True, False, None],
        }
    ).to_csv(path / TRIALS_FILE, index=False)
    return path


def test_an_older_run_reads_and_resumes_with_met_and_missed(tmp_path: Path) -> None:
    path = _old_run(tmp_path)
    trials = read_trials(path / TRIALS_FILE)
    assert trials["slo_met"].tolist() == ["met", "missed", None]
    assert trials["latency_p99_high"].isna().all()  # columns it never had read as empty
    rows = RunDirectory.open(path).rows
    assert [r.slo_met for r in rows] == ["met", "missed", None]


def test_a_row_holds_only_the_three_words() -> None:
    assert TrialRow(trial_id="t", slo_met="undecided").slo_met == "undecided"
    # True/False is only in format-1 files, which the upgrade reads: a producer writes the word.
    with pytest.raises(TrialRowError, match="slo_met holds bool True"):
        TrialRow(trial_id="t", slo_met=True)
    with pytest.raises(TrialRowError, match="slo_met holds 'maybe', not one of met"):
        TrialRow(trial_id="t", slo_met="maybe")


def test_a_damaged_slo_cell_is_one_clear_error(tmp_path: Path) -> None:
    from servebench.results import ResultDirError

    path = _old_run(tmp_path)
    text = (path / TRIALS_FILE).read_text().replace("True", "perhaps")
    (path / TRIALS_FILE).write_text(text)
    with pytest.raises(ResultDirError, match="column slo_met: 'perhaps' is not one of"):
        read_trials(path / TRIALS_FILE)


@pytest.fixture(scope="module")
def triton(triton_dense_model):
    return triton_dense_model.server.endpoints.http_url, triton_dense_model.name


def test_load_shows_the_interval_and_stops_once_the_slo_is_decided(
    triton: tuple[str, str], tmp_path: Path
) -> None:
    """Far under a 5 s p99 bound, a 120 s load ends after its minimums (0.5 s, 400
    answers), VALID, with the stop said as a warning; the JSON carries every interval."""
    url, model = triton
    out = tmp_path / "summary.json"
    args = ["load", "--url", url, "--protocol", "triton-http", "--model", model]
    args += ["--concurrency", "2", "--duration", "120", "--early-stop-ms", "5000"]
    args += ["--min-duration", "0.5", "--min-requests", "400", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "(…–…): confidence interval" in result.output
    p99_line = next(line for line in result.output.splitlines() if "latency p99 (ms)" in line)
    assert re.search(r"\d\.\d{3} \(\d+\.\d{3}–\d+\.\d{3}\)", p99_line), p99_line
    assert "warning: stopped early: SLO met: p99 within 5000 ms" in " ".join(result.output.split())
    summary = json.loads(out.read_text())
    assert summary["verdict"] == "VALID" and summary["warning_codes"] == ["slo_decided"]
    assert summary["ok"] >= 400 and summary["duration"] < 120
    confidence = summary["confidence"]
    assert confidence["level"] == 0.95
    low, high = confidence["latency_p99"]
    assert low <= summary["latency_p99"] <= high
    assert set(confidence) == {
        "level", "latency_p50", "latency_p90", "latency_p95", "latency_p99", "latency_p99_9"
    }  # fmt: skip


def test_the_trial_table_shows_p99_with_its_interval() -> None:
    from servebench.analysis.summary import summary_table

    trials = pd.DataFrame(
        {
            "trial_id": ["a", "b"],
            "status": "ok",
            "verdict": "VALID",
            "throughput_rps": 100.0,
            "throughput_ips": 100.0,
            "latency_p50": 0.002,
            "latency_p99": [0.0429, 0.0030],
            "latency_p99_low": [0.0418, None],
            "latency_p99_high": [0.0446, None],  # b: an older run's row, no interval
            "errors": 0,
            "max_rate": None,
            "slo_met": ["undecided", None],
            "server_cpu_mean": None,
            "gpu_util_mean": None,
            "cost_per_million": None,
        }
    )
    headers, rows, _ = summary_table(trials)
    p99, slo = headers.index("p99 ms"), headers.index("SLO")
    assert [r[p99] for r in rows] == ["42.9 (41.8–44.6)", "3.0"]
    assert [r[slo] for r in rows] == ["undecided", "–"]
