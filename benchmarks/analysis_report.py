"""Analysis figures: host ceilings, report cost at scale, and how often `report compare`
flags noise.

Run: .venv/bin/python benchmarks/analysis_report.py [--pairs 20] [--scale 12]

1. The host ceilings the roofline uses (what the runner measures once per run).
2. `write_report` on the test suite's simulated run (17 trials) and on a run scaled up
   `--scale` times (copies of every trial under other model names), to show the report
   stays usable on large studies.
3. False flags: pairs of simulated runs that differ only in their random seed (so every
   difference is noise) compared with `compare_trials`; and the detection rate of
   injected 1.3x and 2x service-time regressions.

The simulated runs come from tests/test_analysis_rundir.py (a queueing simulation, not
constants), so the benchmark needs the repository checkout.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_analysis_rundir import BATCHES, LINKS, RATES, SETTINGS, _trial_id, make_run_dir  # noqa: E402

from servebench.analysis.compare import compare_trials  # noqa: E402
from servebench.analysis.host_peak import measure_host_peak_bw, measure_host_peak_flops  # noqa: E402
from servebench.analysis.loader import load_run  # noqa: E402
from servebench.analysis.report import write_report  # noqa: E402

FLAGS = ("throughput_flag", "p50_flag", "p99_flag")


def ceilings() -> None:
    start = time.perf_counter()
    flops = measure_host_peak_flops()
    mid = time.perf_counter()
    bw = measure_host_peak_bw()
    end = time.perf_counter()
    print(
        f"host GEMM peak   {flops.value / 1e9:7.1f} GFLOP/s  (n={flops.size}, best of "
        f"{flops.repeats}, {mid - start:.1f} s)"
    )
    print(
        f"copy bandwidth   {bw.value / 1e9:7.1f} GB/s     ({bw.size >> 20} MiB, best of "
        f"{bw.repeats}, {end - mid:.1f} s)"
    )


def scale_up(run: Path, factor: int) -> Path:
    """Copy every trial `factor` times under new model names (new trial ids)."""
    trials = pd.read_csv(run / "trials.csv", dtype={"trial_id": str})
    records = pq.read_table(run / "records.parquet").to_pandas()
    t_parts, r_parts = [trials], [records]
    for k in range(1, factor):
        mapping = {t: f"{t}-m{k}" for t in trials["trial_id"]}
        t_parts.append(trials.assign(trial_id=trials["trial_id"].map(mapping), model=f"model-{k}"))
        r_parts.append(records.assign(trial_id=records["trial_id"].map(mapping)))
    pd.concat(t_parts).to_csv(run / "trials.csv", index=False)
    pq.write_table(
        pa.Table.from_pandas(pd.concat(r_parts), preserve_index=False), run / "records.parquet"
    )
    return run


def report_cost(root: Path, scale: int) -> None:
    for name, factor in (("fixture", 1), (f"fixture x{scale}", scale)):
        run = make_run_dir(root, run_id=name.replace(" ", "-"))
        if factor > 1:
            scale_up(run, factor)
        data = load_run(run)
        start = time.perf_counter()
        report = write_report(run)
        took = time.perf_counter() - start
        print(
            f"{name:14s} {len(data.trials):4d} trials {len(data.records):8d} records: "
            f"report {took:5.1f} s, {report.path.stat().st_size / 1e3:6.0f} kB, "
            f"errors {len(report.errors)}"
        )


def false_flags(root: Path, pairs: int) -> None:
    base = load_run(make_run_dir(root, run_id="base", seed=1000))
    flagged = compared = 0
    for seed in range(pairs):
        other = load_run(make_run_dir(root, run_id=f"seed{seed}", seed=seed))
        result = compare_trials(base.trials, other.trials, base.records, other.records)
        ok = result[result["presence"] == "both"]
        compared += len(ok) * len(FLAGS)
        flagged += int((ok[list(FLAGS)] != "").to_numpy().sum())
    print(
        f"noise only, {pairs} run pairs: {flagged} of {compared} metric comparisons flagged "
        f"({flagged / compared:.2%})"
    )
    trials = [
        _trial_id(setting, batch, link, rate)
        for setting in SETTINGS
        for batch in BATCHES
        for link in LINKS
        for rate in RATES
    ]
    for factor in (1.3, 2.0):
        slow = load_run(
            make_run_dir(
                root, run_id=f"slow{factor}", seed=1000, slow_factor=dict.fromkeys(trials, factor)
            )
        )
        result = compare_trials(base.trials, slow.trials, base.records, slow.records)
        ok = result[result["presence"] == "both"].set_index("trial_id").loc[trials]
        hit = int((ok["p50_flag"] == "regression").sum())
        hit99 = int((ok["p99_flag"] == "regression").sum())
        print(
            f"service time x{factor}: p50 flagged in {hit}/{len(trials)} trials, "
            f"p99 in {hit99}/{len(trials)} (median p50 ratio {ok['p50_ratio'].median():.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--scale", type=int, default=12)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servebench-analysis-"))
    try:
        ceilings()
        report_cost(root, args.scale)
        false_flags(root, args.pairs)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
