"""Quick configuration search against brute force, on the local Triton (issue 23 item 3).

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/tune.py [--out DIR] [--brute-run RUN_DIR]
     [--live] [--budget 6]

The space: 24 distinct Triton settings (max_batch_size {1, 8, 32} × dynamic batching
{off, on} × queue delay {0, 500, 2000} µs × instance_count {1, 2}; "batching off" takes no
delay, so 36 combinations collapse to 24), three generated models of different sizes, each
setting measured by the SLO search (`workload.search: max_rate`, short 2 s steps, p90 under
50 ms); the objective is the search's max rate (higher is better).

1. Brute force: one scenario run of the whole matrix for the three models (or
   `--brute-run` reuses one), the optimum per model.
2. Quick, on the brute-force table: `scenario.tune.quick_search` replayed over the same
   run's measurements (no new noise: the same number for a setting whichever search asks),
   from the matrix's first values and from Triton-like defaults (batching on,
   max_batch_size 8), without a budget and with `--budget` trials: the share of brute's
   optimum it reaches and the share of the 24 trials it measured.
3. `--live`: quick run for real once per model (`tune: {method: quick}` in a scenario of
   that model alone), its wall time and what it reached against the brute optimum (two
   measurements, minutes apart, on a shared machine: noise included).

Prints the load average before and after (the machine is shared), and beside each quick
result the baseline it must beat: the expected share of the optimum that the best of as
many settings drawn at random reaches ("random k").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from servebench.analysis.loader import read_trials
from servebench.results import RUN_FILE, TRIALS_FILE, TUNE_FILE
from servebench.scenario.plan import expand
from servebench.scenario.runner import ScenarioRunner
from servebench.scenario.tune import Measured, Space, quick_search
from servebench.scenario.validate import load_scenario

MODELS = [
    "{layer_type: conv, depth: 2, width: 32, input_shape: [32, 32, 3]}",
    "{layer_type: conv, depth: 3, width: 64, input_shape: [32, 32, 3]}",
    "{layer_type: dense, depth: 3, width: 1024, input_shape: [1024]}",
]
SCENARIO = """name: {name}
models:
  specs:
{models}
servers:
  - name: triton
    kind: triton
    launch: local
    settings:
      max_batch_size: [1, 8, 32]
      dynamic_batching: [false, true]
      max_queue_delay_us: [0, 500, 2000]
      instance_count: [1, 2]
workload:
  mode: open
  arrival: poisson
  search: max_rate
  search_settings: {{min_rate: 25, max_rate: 1600, precision: 0.15, max_steps: 7}}
  batch_sizes: [1]
  duration_s: 2
  warmup_s: 0.5
links: [direct]
slo: {{percentile: 90, latency_ms: 50}}
cost: {{instance: c6i.xlarge}}
{tune}"""
STARTS = {
    "first values": {},
    "Triton-like default": {"dynamic_batching": True, "max_batch_size": 8},
}


def scenario_text(name: str, models: list[str], tune: str = "") -> str:
    listed = "\n".join(f"    - {m}" for m in models)
    return SCENARIO.format(name=name, models=listed, tune=tune)


def run_scenario(path: Path, out: Path) -> tuple[Path, float]:
    started = time.perf_counter()
    outcome = ScenarioRunner(path, output=out).run()
    return outcome.directory.path, time.perf_counter() - started


def replay(
    run: Path, model: str, start: dict[str, Any], budget: int | None
) -> tuple[float | None, int]:
    """Quick search over the brute-force run's measured rows of `model`: (best, trials)."""
    scenario = load_scenario(run / "scenario.yaml")
    plan = expand(scenario, run)
    space = Space.of(plan, scenario.servers[0])
    trials = read_trials(run / TRIALS_FILE)
    mine = trials[trials.model == model].set_index("setting")

    async def measure(name: object) -> Measured:
        if str(name) not in mine.index:
            return Measured(None, (), "not in the brute-force run")
        row = mine.loc[str(name)]
        value = row.max_rate if row.status == "ok" and pd.notna(row.max_rate) else None
        return Measured(value, (str(row.trial_id),))

    result = asyncio.run(
        quick_search(
            space.sizes, space.key, measure, maximize=True, budget=budget,
            start=space.point(start),
        )
    )  # fmt: skip
    best = result.best
    return (best[1].value if best else None), result.trials_spent


def random_share(run: Path, model: str, k: int) -> float:
    """The expected share of the optimum that the best of `k` settings drawn at random
    (distinct, uniformly) reaches: the baseline a search must beat. With the values sorted,
    the i-th smallest is the best of the draw with probability C(i-1, k-1) / C(N, k)."""
    trials = read_trials(run / TRIALS_FILE)
    mine = trials[trials.model == model]
    values = sorted((v if pd.notna(v) else 0.0) for v in mine.max_rate)
    n = len(values)
    expected = sum(v * math.comb(i, k - 1) for i, v in enumerate(values)) / math.comb(n, k)
    return expected / max(values)


def brute_optimum(run: Path) -> dict[str, tuple[str, float]]:
    trials = read_trials(run / TRIALS_FILE)
    ok = trials[(trials.status == "ok") & trials.max_rate.notna()]
    return {
        model: (str(group.loc[group.max_rate.idxmax(), "setting"]), float(group.max_rate.max()))
        for model, group in ok.groupby("model")
    }


def _wall(run: Path) -> float:
    info = json.loads((run / RUN_FILE).read_text())
    if not info.get("ended_at"):
        return float("nan")  # still running
    return (
        datetime.fromisoformat(info["ended_at"]) - datetime.fromisoformat(info["started_at"])
    ).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/servebench-tune"))
    parser.add_argument("--brute-run", type=Path, help="a brute-force run to reuse")
    parser.add_argument("--live", action="store_true", help="also run quick live per model")
    parser.add_argument("--budget", type=int, default=6, help="quick's budget in trials")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}")
    brute = args.brute_run
    if brute is None:
        path = args.out / "brute.yaml"
        path.write_text(scenario_text("tune-bench", MODELS))
        brute, seconds = run_scenario(path, args.out / "results")
        print(f"brute force: {brute} in {seconds:,.0f} s")
    wall = _wall(brute)
    optimum = brute_optimum(brute)
    space = len({s.id for s in expand(load_scenario(brute / "scenario.yaml"), brute).settings})
    print(f"brute force run {brute}: {space} settings × {len(optimum)} models, {wall:,.0f} s wall")
    print("\nquick replayed on the brute-force table (max rate, req/s; share of brute's optimum)")
    print(
        f"{'model':22} {'start':20} {'budget':>6} {'quick':>8} {'brute':>8} {'share':>6} "
        f"{'trials':>13} {'random k':>8}"
    )
    for model, (setting, top) in optimum.items():
        for label, start in STARTS.items():
            for budget in (None, args.budget):
                value, spent = replay(brute, model, start, budget)
                share = (value or 0.0) / top
                print(
                    f"{model:22} {label:20} {budget or '-':>6} {value or 0:8,.0f} {top:8,.0f} "
                    f"{share:6.0%} {f'{spent}/{space} ({spent / space:.0%})':>13} "
                    f"{random_share(brute, model, spent):8.0%}"
                )
        ties = int(
            (read_trials(brute / TRIALS_FILE).query("model == @model").max_rate == top).sum()
        )
        print(f"{'':22} brute optimum: {setting} ({ties} of {space} settings reach it)")
    if args.live:
        print(f"\nquick live, budget {args.budget} (objective max_rate)")
        ids = [m.id for m in expand(load_scenario(brute / "scenario.yaml"), brute).models]
        for model, (_, top) in optimum.items():
            i = ids.index(model)
            spec = MODELS[i]
            tune = f"tune: {{method: quick, objective: max_rate, budget_trials: {args.budget}}}\n"
            path = args.out / f"quick-{i}.yaml"
            path.write_text(scenario_text(f"tune-quick-{i}", [spec], tune))
            run, seconds = run_scenario(path, args.out / "results")
            found = json.loads((run / TUNE_FILE).read_text())["servers"]["triton"]
            best = found["best"] or {"value": 0.0, "setting": "none"}
            print(
                f"{model:22} quick {best['value']:8,.0f} req/s ({best['setting']}), "
                f"{found['trials_spent']}/{space} trials, {seconds:,.0f} s wall; brute "
                f"optimum {top:,.0f} ({best['value'] / top:.0%}); {found['stop_reason']}"
            )
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
