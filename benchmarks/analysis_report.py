"""Analysis figures: host ceilings, report cost at scale, and how often `report compare`
flags noise.

Run: .venv/bin/python benchmarks/analysis_report.py [--pairs 20] [--scale 12] [--spread 6]

1. The host ceilings the roofline uses (`host_peaks`: measured once per machine and
   cached), and their spread over `--spread` fresh processes: the old per-run measurement
   (one best-of-3 GEMM in the runner's process) against `host_peaks(remeasure=True)`,
   interleaved so both see the same neighbours.
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
import subprocess
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
from servebench.analysis.loader import load_run  # noqa: E402
from servebench.analysis.report import write_report  # noqa: E402
from servebench.telemetry.host_peak import host_peaks  # noqa: E402

FLAGS = ("throughput_flag", "p50_flag", "p99_flag")


OLD_WAY = (
    "from servebench.telemetry.host_peak import measure_host_peak_flops as m; print(m().value)"
)
NEW_WAY = (
    "import sys; from servebench.telemetry.host_peak import host_peaks as h; "
    "print(h(remeasure=True, cache_dir=sys.argv[1]).flops.value)"
)


def ceilings(root: Path, spread: int) -> None:
    start = time.perf_counter()
    peaks = host_peaks(remeasure=True, cache_dir=root)
    took = time.perf_counter() - start
    rounds = ", ".join(f"{v / 1e9:.0f}" for v in peaks.flops_rounds)
    print(
        f"host GEMM peak   {peaks.flops.value / 1e9:7.1f} GFLOP/s  (n={peaks.flops.size}, "
        f"{peaks.threads} threads, best of {len(peaks.flops_rounds)} rounds: {rounds}; "
        f"{took:.1f} s with the copy)"
    )
    print(
        f"copy bandwidth   {peaks.bw.value / 1e9:7.1f} GB/s     ({peaks.bw.size >> 20} MiB, "
        f"best of {len(peaks.bw_rounds)} rounds)"
    )
    start = time.perf_counter()
    cached = host_peaks(cache_dir=root)
    print(
        f"cached read      {cached.flops.value / 1e9:7.1f} GFLOP/s  ({time.perf_counter() - start:.3f} s)"
    )
    if spread:
        old, new = [], []
        for _ in range(spread):
            old.append(_in_fresh_process(OLD_WAY))
            new.append(_in_fresh_process(NEW_WAY, str(root / "spread")))
        for name, values in (("per-run best of 3 (old)", old), ("host_peaks, 8 rounds (new)", new)):
            print(
                f"{name:27s} over {spread} processes: {min(values) / 1e9:.0f}-"
                f"{max(values) / 1e9:.0f} GFLOP/s ({', '.join(f'{v / 1e9:.0f}' for v in values)})"
            )


def _in_fresh_process(code: str, *args: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return float(done.stdout)


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
    parser.add_argument("--spread", type=int, default=6, help="fresh processes per way (0: skip)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servebench-analysis-"))
    try:
        ceilings(root / "cache", args.spread)
        report_cost(root, args.scale)
        false_flags(root, args.pairs)
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
