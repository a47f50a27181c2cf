"""A/A: the same scenario run twice, minutes apart — do its numbers repeat? (issue 34)

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/aa.py [--out DIR] [--share 0.5]
     [--repeats 5] [--duration-s 6] [--gap-s 600] [--runs RUN1 RUN2]

The scenario: two generated models (dense and conv, small) on the local Triton, dynamic
batching off/on × one/two instances: 8 settings, open loop (Poisson) at `--share` of the
capacity of the weakest setting (batching off, one instance), measured now with a short
closed-loop run; each setting `--repeats` times in interleaved rounds. It runs twice,
`--gap-s` apart (10 minutes by default), and the two runs are compared setting by setting
on the SLO's percentile (p99):

(a) the setting intervals (settings.csv: the median's order-statistic interval over the
    replicates) of the two runs overlap — calibrated intervals overlap nearly always;
(b) each counted replicate of one run falls in the other run's re-run range ([min, max] of
    its replicates), against its nominal rate (R − 1)/(R + 1) — both directions;
(c) met ↔ missed flips between the runs, the SLO's bound set at each quartile of the first
    run's setting medians (a bound far from every setting decides nothing: no flip could
    happen), decided on the setting intervals; undecided is allowed;
(d) the same three for R = 1 — today's method: each setting's first replicate alone, with
    its request-level 95 % interval (trials.csv's latency_p99_low/high); for two equally
    precise estimates a calibrated interval holds the other's point about 83 % of the time.

`--runs RUN1 RUN2` compares two runs made before (no measuring). Prints the figures with the
load average, the commands and the wall times, and writes `aa.json` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from servebench.analysis.loader import load_run
from servebench.scenario.runner import ScenarioRunner

MODELS = (
    "{layer_type: dense, depth: 2, width: 64, input_shape: [64]}",
    "{layer_type: conv, depth: 2, width: 16, input_shape: [16, 16, 3]}",
)
SETTINGS = "{max_batch_size: 8, dynamic_batching: [false, true], max_queue_delay_us: 200, instance_count: [1, 2]}"


def scenario(name: str, workload: str, settings: str = SETTINGS) -> str:
    specs = "\n".join(f"    - {spec}" for spec in MODELS)
    return (
        f"name: {name}\nseed: 7\nmodels:\n  specs:\n{specs}\n"
        f"servers:\n  - name: triton\n    api: triton\n    launch: local\n"
        f"    protocol: http\n    settings: {settings}\n"
        f"workload:\n{workload}links: [direct]\nslo: {{percentile: 99, latency_ms: 50}}\n"
        "cost: {instance: c6i.xlarge}\n"
    )


def run(path: Path, out: Path) -> tuple[Path, float]:
    started = time.perf_counter()
    outcome = ScenarioRunner(path, output=out).run()
    if outcome.status not in ("complete", "partial"):
        raise SystemExit(f"{path}: {outcome.status}: {outcome.reason}")
    return outcome.directory.path, time.perf_counter() - started


def capacity(out: Path) -> float:
    """The weakest setting's throughput at 8 closed-loop clients, the lower of the two
    models' (req/s): what `--share` is a share of."""
    path = out / "capacity.yaml"
    path.write_text(
        scenario(
            "aa-capacity",
            "  mode: closed\n  concurrency: [8]\n  duration_s: 5\n  warmup_s: 1\n",
            "{max_batch_size: 8, dynamic_batching: false, instance_count: 1}",
        )
    )
    directory, seconds = run(path, out / "results")
    trials = load_run(directory, records=False).trials
    top = float(trials["throughput_rps"].min())
    print(f"capacity: {top:,.0f} req/s (weakest of {len(trials)} models; {seconds:.0f} s)")
    return top


def compare(first: Path, second: Path) -> dict[str, Any]:
    one, two = (load_run(p, records=False) for p in (first, second))
    if one.settings is None or two.settings is None:
        raise SystemExit("both runs need settings.csv (a run with workload.repeats)")
    a = one.settings.set_index("trial_id")
    b = two.settings.set_index("trial_id")
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    replicated = _replicated(a, b, one.trials, two.trials)
    single = _single(one.trials, two.trials, common)
    bounds = [float(q) for q in a["latency_p99"].quantile([0.25, 0.5, 0.75])]
    replicated["flips"] = _flips(a, b, bounds, "latency_p99_low", "latency_p99_high")
    firsts = [_first_replicates(t, common) for t in (one.trials, two.trials)]
    single["flips"] = _flips(*firsts, bounds, "latency_p99_low", "latency_p99_high")
    moved = (b["latency_p99"] / a["latency_p99"]).dropna()
    return {
        "runs": [str(first), str(second)],
        "settings": len(common),
        "bounds_ms": [1e3 * x for x in bounds],
        "replicated": replicated,
        "single": single,
        "median_moved": {
            "median": float(moved.map(lambda r: max(r, 1 / r)).median()),
            "max": float(moved.map(lambda r: max(r, 1 / r)).max()),
        },
    }


def _replicated(a: pd.DataFrame, b: pd.DataFrame, ta: pd.DataFrame, tb: pd.DataFrame) -> dict:
    overlap = _overlap(a, b, "latency_p99_low", "latency_p99_high")
    inside, nominal = [], []
    for trial_id in a.index:
        for mine, other in ((tb, a.loc[trial_id]), (ta, b.loc[trial_id])):
            low, high = other["latency_p99_rerun_low"], other["latency_p99_rerun_high"]
            if pd.isna(low) or pd.isna(high):
                continue
            values = _counted(mine, trial_id)["latency_p99"]
            inside += [bool(low <= v <= high) for v in values]
            r = int(other["replicates"])
            nominal += [(r - 1) / (r + 1)] * len(values)
    return {
        "overlap": overlap,
        "in_rerun_range": _share(inside),
        "nominal": float(sum(nominal) / len(nominal)) if nominal else math.nan,
        "replicates": sorted({int(x) for x in a["replicates"]} | {int(x) for x in b["replicates"]}),
    }


def _single(ta: pd.DataFrame, tb: pd.DataFrame, common: pd.Index) -> dict:
    a, b = _first_replicates(ta, common), _first_replicates(tb, common)
    inside = []
    for trial_id in a.index:
        for point, other in (
            (b.loc[trial_id], a.loc[trial_id]),
            (a.loc[trial_id], b.loc[trial_id]),
        ):
            low, high = other["latency_p99_low"], other["latency_p99_high"]
            if not (pd.isna(low) or pd.isna(high) or pd.isna(point["latency_p99"])):
                inside.append(bool(low <= point["latency_p99"] <= high))
    return {
        "overlap": _overlap(a, b, "latency_p99_low", "latency_p99_high"),
        "in_interval": _share(inside),
        "nominal": 0.83,
    }


def _first_replicates(trials: pd.DataFrame, common: pd.Index) -> pd.DataFrame:
    first = trials[(trials["replicate"] == 1) & (trials["status"] == "ok")]
    return first.set_index("replicate_of").reindex(common)


def _counted(trials: pd.DataFrame, trial_id: str) -> pd.DataFrame:
    mine = trials[(trials["replicate_of"] == trial_id) & (trials["status"] == "ok")]
    return mine[(mine["verdict"] == "VALID") & (mine["remeasured"] != True)]  # noqa: E712


def _overlap(a: pd.DataFrame, b: pd.DataFrame, low: str, high: str) -> float:
    both = pd.concat([a[[low, high]], b[[low, high]].add_suffix("_2")], axis=1).dropna()
    hits = (both[low] <= both[f"{high}_2"]) & (both[f"{low}_2"] <= both[high])
    return _share(list(hits))


def _decision(low: float, high: float, bound: float) -> str:
    if not pd.isna(high) and high <= bound:
        return "met"
    if not pd.isna(low) and low > bound:
        return "missed"
    return "undecided"


def _flips(a: pd.DataFrame, b: pd.DataFrame, bounds: list[float], low: str, high: str) -> dict:
    flips = decided = undecided = 0
    for bound in bounds:
        for trial_id in a.index:
            x = _decision(a.loc[trial_id, low], a.loc[trial_id, high], bound)
            y = _decision(b.loc[trial_id, low], b.loc[trial_id, high], bound)
            if "undecided" in (x, y):
                undecided += 1
            else:
                decided += 1
                flips += x != y
    total = decided + undecided
    return {"flips": flips, "share": flips / total if total else math.nan,
            "decided": decided, "undecided": undecided}  # fmt: skip


def _share(hits: list[bool]) -> float:
    return sum(hits) / len(hits) if hits else math.nan


def show(result: dict[str, Any]) -> None:
    r, s = result["replicated"], result["single"]
    print(f"settings compared: {result['settings']}; bounds (ms): "
          + ", ".join(f"{x:.2f}" for x in result["bounds_ms"]))  # fmt: skip
    print(
        f"(a) intervals overlap: R={r['replicates']}: {r['overlap']:.0%}   R=1: {s['overlap']:.0%}"
    )
    print(
        f"(b) in the other run's range: R={r['replicates']}: {r['in_rerun_range']:.0%} "
        f"(nominal {r['nominal']:.0%})   R=1 in its 95 % interval: {s['in_interval']:.0%} "
        f"(calibrated ~83 %)"
    )
    for name, f in (("R", r["flips"]), ("R=1", s["flips"])):
        print(
            f"(c) met<->missed flips, {name}: {f['flips']} of {f['decided'] + f['undecided']} "
            f"({f['share']:.1%}); {f['undecided']} undecided"
        )
    m = result["median_moved"]
    print(f"p99 median moved between runs: median {m['median']:.2f}x, max {m['max']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/aa"))
    parser.add_argument("--share", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--duration-s", type=float, default=6.0)
    parser.add_argument("--gap-s", type=float, default=600.0)
    parser.add_argument("--runs", type=Path, nargs=2)
    args = parser.parse_args()
    if args.runs:
        result = compare(*args.runs)
    else:
        if not 0 < args.share <= 1 or args.repeats < 1 or args.duration_s <= 0 or args.gap_s < 0:
            raise SystemExit("--share in (0, 1], --repeats >= 1, --duration-s > 0, --gap-s >= 0")
        args.out.mkdir(parents=True, exist_ok=True)
        print(f"load average before: {os.getloadavg()}")
        rate = round(args.share * capacity(args.out))
        path = args.out / "aa.yaml"
        path.write_text(
            scenario(
                "aa",
                f"  rates: [{rate}]\n  duration_s: {args.duration_s}\n  warmup_s: 1\n"
                f"  repeats: {args.repeats}\n",
            )
        )
        print(f"scenario {path}: {rate} req/s, R={args.repeats}")
        first, seconds = run(path, args.out / "results")
        print(f"run 1: {first} ({seconds:.0f} s); waiting {args.gap_s:.0f} s", flush=True)
        time.sleep(args.gap_s)
        second, seconds_2 = run(path, args.out / "results")
        print(f"run 2: {second} ({seconds_2:.0f} s)")
        print(f"load average after: {os.getloadavg()}")
        result = compare(first, second)
        result.update(rate=rate, wall_s=[seconds, seconds_2], gap_s=args.gap_s)
        (args.out / "aa.json").write_text(json.dumps(result, indent=2))
    show(result)


if __name__ == "__main__":
    main()
