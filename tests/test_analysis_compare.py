"""`report compare`: a 2x regression is flagged, a 2 % wiggle is not."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_analysis_report import REMOTE
from test_analysis_rundir import _trial_id, make_run_dir
from typer.testing import CliRunner

from servebench.analysis.compare import (
    NOISE_FLOOR,
    compare_trials,
    quantile_log_halfwidth,
    rate_log_halfwidth,
)
from servebench.analysis.loader import load_run
from servebench.cli import app

SLOW = _trial_id("triton[dynamic_batching=on,instance_count=2]", 1, "direct", 8.0)
WIGGLE = _trial_id("triton[dynamic_batching=off,instance_count=1]", 16, "wifi", 4.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    a = make_run_dir(root, run_id="a", seed=1)
    b = make_run_dir(root, run_id="b", seed=1, slow_factor={SLOW: 2.0, WIGGLE: 1.02})
    return a, b


def test_flags_regression_not_wiggle(runs) -> None:
    a, b = (load_run(p) for p in runs)
    result = compare_trials(a.trials, b.trials, a.records, b.records).set_index("trial_id")
    slow = result.loc[SLOW]
    assert slow["p50_flag"] == "regression" and slow["p99_flag"] == "regression"
    assert 1.8 < slow["p50_ratio"] < 2.2
    wiggle = result.loc[WIGGLE]
    assert 1.0 < wiggle["p50_ratio"] < 1.05
    assert wiggle[["throughput_flag", "p50_flag", "p99_flag"]].tolist() == ["", "", ""]
    flagged = result[(result[["throughput_flag", "p50_flag", "p99_flag"]] != "").any(axis=1)]
    assert flagged.index.tolist() == [SLOW]
    # The failed trial is listed, not compared.
    failed = result[result["status_a"] == "failed"].iloc[0]
    assert math.isnan(failed["p99_ratio"]) and failed["note"] == "trial A, B not ok"
    assert (result["presence"] == "both").all()


def test_improvement_and_presence(runs) -> None:
    a, b = (load_run(p) for p in runs)
    # Swapping the runs turns the regression into an improvement.
    swapped = compare_trials(b.trials, a.trials, b.records, a.records).set_index("trial_id")
    assert swapped.loc[SLOW, "p99_flag"] == "improvement"
    # A trial only one run has is listed with no ratio.
    fewer = b.trials[b.trials["trial_id"] != WIGGLE]
    result = compare_trials(a.trials, fewer, a.records, b.records).set_index("trial_id")
    assert result.loc[WIGGLE, "presence"] == "only A"
    assert math.isnan(result.loc[WIGGLE, "p50_ratio"])


def test_throughput_halved_without_records(runs) -> None:
    """Summary files only: the floor alone decides, and a halved throughput exceeds it."""
    a, _ = (load_run(p, records=False) for p in runs)
    b = a.trials.copy()
    b.loc[b["trial_id"] == SLOW, "throughput_ips"] *= 0.5
    b.loc[b["trial_id"] == WIGGLE, "throughput_ips"] *= 0.98
    result = compare_trials(a.trials, b).set_index("trial_id")
    assert result.loc[SLOW, "throughput_flag"] == "regression"
    assert result.loc[WIGGLE, "throughput_flag"] == ""
    assert result.loc[WIGGLE, "throughput_band"] == pytest.approx(NOISE_FLOOR)


def test_noise_widths() -> None:
    rng = np.random.default_rng(3)
    latencies = rng.lognormal(np.log(0.01), 0.3, 4000)
    p50, p99 = quantile_log_halfwidth(latencies, 0.5), quantile_log_halfwidth(latencies, 0.99)
    assert 0 < p50 < p99 < 0.3  # the tail is less certain than the median
    assert quantile_log_halfwidth(latencies[:200], 0.99) == math.inf  # 2 requests above p99
    assert quantile_log_halfwidth(latencies[:400], 0.5) > p50  # fewer requests, wider
    steady = np.linspace(0, 100, 5000)
    assert rate_log_halfwidth(steady) < 0.01
    bursty = np.concatenate([np.linspace(0, 10, 4000), np.linspace(10, 100, 1000)])
    assert rate_log_halfwidth(bursty) > 0.5
    assert rate_log_halfwidth(steady[:5]) == math.inf


def test_cli_compare(runs) -> None:
    a, b = runs
    result = CliRunner().invoke(app, ["report", "compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "17 trials in both runs, 1 beyond noise" in " ".join(out.split())
    line = next(line for line in out.splitlines() if line.startswith(f"│ {SLOW}"))
    assert "p50 regression, p99 regression" in line and re.search(r"\b1\.9\dx", line)
    flagged = CliRunner().invoke(app, ["report", "compare", "--flagged", str(a), str(b)])
    assert flagged.exit_code == 0
    assert SLOW in flagged.output and WIGGLE not in flagged.output
    missing = CliRunner().invoke(app, ["report", "compare", str(a), str(a.parent / "zzz")])
    assert missing.exit_code == 2 and "no such run directory" in missing.output


def test_remote_pattern_catches_fetches() -> None:
    """The self-containment check in the report tests must be able to fail."""
    for bad in (
        '<img src="https://x.org/a.png">',
        "<link href='http://cdn/x.css'>",
        "background:url(https://f/x.woff)",
        '<script src="//cdn/x.js">',
        "@import 'a.css'",
    ):
        assert REMOTE.search(bad), bad
    assert not REMOTE.search('<svg xmlns="http://www.w3.org/2000/svg"><use xlink:href="#m1"/>')


def test_trial_ids_stay_text(tmp_path: Path) -> None:
    """Hex-looking ids must not turn into numbers when read back."""
    run = make_run_dir(tmp_path, duration=10)
    frame = pd.read_csv(run / "trials.csv", dtype=str)
    frame.loc[0, "trial_id"] = "1234e5"
    frame.to_csv(run / "trials.csv", index=False)
    data = load_run(run, records=False)
    assert data.trials.loc[0, "trial_id"] == "1234e5"


def test_cli_compare_warns_when_the_scenarios_differ(runs, tmp_path: Path) -> None:
    """Issue 33: two runs of different scenarios are compared where their trials share
    ids, with one line that says the scenarios differ; runs of one scenario get none."""
    import json
    import shutil

    a, b = runs
    same = CliRunner().invoke(app, ["report", "compare", str(a), str(b)])
    assert "different scenarios" not in same.output
    other = Path(shutil.copytree(b, tmp_path / "other"))
    (other / "scenario.yaml").write_text("name: another\n")
    result = CliRunner().invoke(app, ["report", "compare", str(a), str(other)])
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if "different scenarios" in line]
    assert warning == (
        "warning: a and b ran different scenarios (their scenario.yaml files differ): only "
        "trials with the same coordinates are compared"
    )
    hashed = [Path(shutil.copytree(r, tmp_path / f"h{i}")) for i, r in enumerate((a, b))]
    for path, digest in zip(hashed, ("6521f96419fb0000", "9a0ee62d425f0000"), strict=True):
        meta = json.loads((path / "run.json").read_text())
        (path / "run.json").write_text(json.dumps({**meta, "scenario_hash": digest}))
    result = CliRunner().invoke(app, ["report", "compare", *map(str, hashed)])
    assert "(scenario hash 6521f96419fb vs 9a0ee62d425f)" in result.output


def test_two_replicated_runs_compare_setting_by_setting_on_their_replicates(
    tmp_path: Path,
) -> None:
    """`report compare` of two replicated runs: each setting's replicates in A against
    B's (unpaired: the runs were measured apart). A setting slowed 40 % in every replicate
    is a regression; one measured alike is within noise; runs of two replicates each are
    too short to decide."""
    from replicated_runs import replicated_run

    from servebench.analysis.compare import compare_settings
    from servebench.analysis.loader import load_run

    base = [10.0, 12.0, 9.0, 14.0, 11.0, 13.0]
    a = replicated_run(tmp_path, "a", {"S": base, "T": base})
    b = replicated_run(tmp_path, "b", {"S": [v * 1.4 for v in base], "T": base[::-1]})
    rows = compare_settings(load_run(a), load_run(b)).set_index("trial_id")
    assert rows.loc["tS", "p99_flag"] == "regression" and rows.loc["tS", "p99_said"] == "+40%"
    assert rows.loc["tT", "p99_flag"] == "" and rows.loc["tT", "p99_said"] == "within noise"
    short_a = replicated_run(tmp_path, "sa", {"S": base[:2]})
    short_b = replicated_run(tmp_path, "sb", {"S": [v * 2 for v in base[:2]]})
    short = compare_settings(load_run(short_a), load_run(short_b)).set_index("trial_id")
    assert short.loc["tS", "p99_said"] == "too few to tell"
    result = CliRunner().invoke(app, ["report", "compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "settings in both runs, 1 beyond noise" in result.output
