"""`servebench export --format loadgen`: each open-loop trial as LoadGen's summary.

The layout is mlperf_log_summary.txt's (LogSummary in LoadGen's results.cc, mlcommons/
inference loadgen 6.0.17): `key : value` lines, latencies in whole nanoseconds, the
percentiles 50, 90, 95, 97, 99 and 99.9. The early-stopping numbers are LoadGen's own:
at p99 with no request over the bound it needs 459 queries (0.99^459 <= 0.01, one-sided
99 %), which a 458-request trial misses and a 459-request trial meets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_checks import assert_one_line_error
from test_analysis_rundir import make_run_dir
from typer.testing import CliRunner

from servebench.cli import app
from servebench.common.quantiles import percentile
from servebench.results import RECORD_SCHEMA, RunDirectory, TrialRow, conform_records

QS = {"50.00": 50, "90.00": 90, "95.00": 95, "97.00": 97, "99.00": 99, "99.90": 99.9}


def export(*args: str):
    return CliRunner().invoke(app, ["export", *args])


def fields(path: Path) -> dict[str, str]:
    """The `key : value` lines of a summary file (the first of each key)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*([^:*][^:]*?)\s*:\s*(.+?)\s*$", line)
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


def write_run(root: Path, trials: dict[str, tuple[dict, np.ndarray]]) -> Path:
    """A run directory of open-loop trials: trial id → (row fields, latencies in s)."""
    path = root / "run"
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": "run", "status": "complete"}))
    rows, tables = [], []
    for index, (trial_id, (extra, latencies)) in enumerate(trials.items()):
        n = latencies.size
        intended = np.arange(n) / 100.0
        rows.append(
            {
                "trial_id": trial_id,
                "index": index,
                "status": "ok",
                "verdict": "VALID",
                "server": "triton",
                "api": "triton",
                "setting": "triton",
                "model": "dense",
                "batch_size": 1,
                "link": "direct",
                "load_kind": "rate",
                "load_level": 100.0,
                "mode": "open",
                "target_rate": 100.0,
                "count": n,
                "ok": n,
                **extra,
            }
        )
        columns = {
            "trial_id": [trial_id] * n,
            "seq": np.arange(n, dtype=np.int64),
            "intended_time": intended,
            "send_time": intended,
            "completion_time": intended + latencies,
            "latency": latencies,
            "ok": np.ones(n, dtype=bool),
            "error_kind": pa.nulls(n, pa.string()),
            "batch_size": np.ones(n, dtype=np.int32),
            "request_bytes": np.full(n, 100, dtype=np.int64),
            "response_bytes": np.full(n, 100, dtype=np.int64),
            "client_send_s": np.full(n, 1e-5),
            "client_recv_s": np.full(n, 1e-5),
        }
        schema = pa.schema([RECORD_SCHEMA.field(name) for name in columns])
        tables.append(pa.table(columns, schema=schema))
    RunDirectory(path, rows=[TrialRow.from_record(r) for r in rows]).write_trials()
    # A trial of one model from one process: the optional columns (model, generator) are
    # null, as conform_records fills them for any run that has no use for them.
    records = conform_records(pa.concat_tables(tables), path)
    pq.write_table(records, path / "records.parquet")
    return path


def by_trial(out: Path) -> dict[str, dict[str, str]]:
    return {f["servebench trial"]: f for f in map(fields, sorted(out.glob("*_summary.txt")))}


def test_each_open_loop_trial_has_loadgens_fields_from_its_records(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=20)
    out = tmp_path / "lg"
    result = export(str(run), "--format", "loadgen", "-o", str(out))
    assert result.exit_code == 0, result.output
    trials = pd.read_csv(run / "trials.csv").set_index("trial_id")
    records = pq.read_table(run / "records.parquet").to_pandas()
    summaries = by_trial(out)
    # 16 ok open-loop trials; the failed one is skipped with a line saying why.
    assert len(summaries) == 16
    assert "1 trial skipped: not ok" in result.output
    for trial_id, summary in summaries.items():
        row = trials.loc[trial_id]
        mine = records[(records.trial_id == trial_id) & records.ok]["latency"].to_numpy()
        assert summary["Scenario"] == "Server"
        assert float(summary["target_qps"]) == row.target_rate
        assert float(summary["Completed samples per second"]) == pytest.approx(
            row.throughput_ips, abs=0.005
        )
        assert int(summary["samples_per_query"]) == row.batch_size
        for key, q in QS.items():
            assert int(summary[f"{key} percentile latency (ns)"]) == round(
                percentile(mine, q) * 1e9
            )
        assert int(summary["Max latency (ns)"]) == round(mine.max() * 1e9)
        assert int(summary["Min latency (ns)"]) == round(mine.min() * 1e9)
        assert summary["Result is"] == row.verdict
    text = next(out.glob("*_summary.txt")).read_text()
    assert "not an MLPerf result" in text and "MLPerf Results Summary" not in text


def test_early_stopping_needs_loadgens_459_queries_at_p99(tmp_path: Path) -> None:
    slo = {"slo_percentile": 99.0, "slo_bound_s": 0.010}
    fast = np.full(600, 0.004)
    slow = np.concatenate([np.full(900, 0.004), np.full(100, 0.050)])  # 10 % over: missed
    near = np.concatenate([np.full(495, 0.004), np.full(5, 0.020)])  # 1 % over: undecided
    run = write_run(
        tmp_path,
        {
            "t458": (slo, fast[:458]),
            "t459": (slo, fast[:459]),
            "tslow": ({**slo, "verdict": "INVALID", "verdict_reasons": "a; b"}, slow),
            "tnear": (slo, near),
            "tnoslo": ({}, fast),
        },
    )
    out = tmp_path / "lg"
    result = export(str(run), "--format", "loadgen", "-o", str(out))
    assert result.exit_code == 0, result.output
    summaries = by_trial(out)
    texts = {f.name.rsplit("__", 1)[1]: f.read_text() for f in out.glob("*_summary.txt")}
    assert summaries["t459"]["Early stopping satisfied"] == "Yes"
    assert "Run successful." in texts["t459_summary.txt"]
    assert summaries["t458"]["Early stopping satisfied"] == "NO"
    assert "about 459 queries in all would decide it" in texts["t458_summary.txt"]
    assert summaries["tslow"]["Early stopping satisfied"] == "NO"
    assert summaries["tslow"]["Performance constraints satisfied"] == "NO"
    assert "the p99 latency is over the bound" in texts["tslow_summary.txt"]
    assert summaries["tslow"]["Result is"] == "INVALID"
    assert " * a\n * b\n" in texts["tslow_summary.txt"]  # servebench's reasons, one a line
    assert "Run unsuccessful." in texts["tnear_summary.txt"]
    assert "undecided" in texts["tnear_summary.txt"]
    assert summaries["tnear"]["Performance constraints satisfied"] == "Yes"  # p99 = 4 ms
    assert "no SLO" in texts["tnoslo_summary.txt"]
    assert "Early stopping satisfied" not in summaries["tnoslo"]
    assert int(summaries["t459"]["target_latency (ns)"]) == 10_000_000


def test_closed_loop_trials_are_skipped_with_a_line(tmp_path: Path) -> None:
    closed = {"load_kind": "concurrency", "mode": "closed", "concurrency": 4, "target_rate": None}
    run = write_run(tmp_path, {"topen": ({}, np.full(50, 0.004)), "tclosed": (closed, np.ones(5))})
    out = tmp_path / "lg"
    result = export(str(run), "--format", "loadgen", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert list(by_trial(out)) == ["topen"]
    assert "1 trial skipped: closed loop" in result.output


def test_a_run_without_an_open_loop_trial_is_one_line(tmp_path: Path) -> None:
    closed = {"load_kind": "concurrency", "mode": "closed", "concurrency": 4, "target_rate": None}
    run = write_run(tmp_path, {"tclosed": (closed, np.full(5, 0.004))})
    out = tmp_path / "lg"
    result = export(str(run), "--format", "loadgen", "-o", str(out))
    assert_one_line_error(result, "no open-loop trial to export as LoadGen's summary")
    assert not out.exists()  # nothing half-written
    (tmp_path / "file").write_text("x")
    assert_one_line_error(
        export(str(run), "--format", "loadgen", "-o", str(tmp_path / "file")),
        "loadgen files go in a folder",
    )
