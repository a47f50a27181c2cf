"""Quick configuration search against brute force, on the local Triton (issue 23 item 3).

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/tune.py [--objective max_rate|p99]
     [--out DIR] [--brute-run RUN_DIR ...] [--live] [--budget 6]

The space: 24 distinct Triton settings (max_batch_size {1, 8, 32} × dynamic batching
{off, on} × queue delay {0, 500, 2000} µs × instance_count {1, 2}; "batching off" takes no
delay, so 36 combinations collapse to 24), three generated models of different sizes. Two
objectives:

- `max_rate`: each setting measured by the SLO search (`workload.search: max_rate`, short
  2 s steps, p90 under 50 ms); the objective is the search's max rate (higher is better).
  Its values are coarse (the search's steps), so many settings tie at the optimum.
- `p99`: each setting measured at one fixed Poisson rate per model (`tune.qps`, chosen near
  what the unbatched single instance can take, so the settings differ), the objective the
  p99's upper 95 % bound (lower is better): a continuous landscape, few ties.

1. Brute force: a scenario run of the whole matrix (one run for all three models with
   `max_rate`; one run per model with `p99`, each at its own rate), or `--brute-run`
   reuses them; the optimum per model.
2. Quick, on the brute-force table: `scenario.tune.quick_search` replayed over the same
   runs' measurements, valued by the scenario runner's own `objective_of` (no new noise:
   the same number for a setting whichever search asks), from the matrix's first values
   and from Triton-like defaults (batching on, max_batch_size 8), without a budget and
   with `--budget` trials: the share of brute's optimum it reaches and the share of the 24
   trials it measured.
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

from servebench.analysis.loader import read_trials
from servebench.results import RUN_FILE, TRIALS_FILE, TUNE_FILE
from servebench.scenario.plan import expand
from servebench.scenario.runner import ScenarioRunner
from servebench.scenario.tune import MAXIMIZE, Measured, Space, objective_of, quick_search
from servebench.scenario.validate import load_scenario

# Each model and the fixed rate (req/s) the p99 objective measures it at.
MODELS = [
    ("{layer_type: conv, depth: 2, width: 32, input_shape: [32, 32, 3]}", 1200.0),
    ("{layer_type: conv, depth: 3, width: 64, input_shape: [32, 32, 3]}", 600.0),
    ("{layer_type: dense, depth: 3, width: 1024, input_shape: [1024]}", 1200.0),
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
{workload}
  batch_sizes: [1]
links: [direct]
slo: {{percentile: 90, latency_ms: 50}}
cost: {{instance: c6i.xlarge}}
{tune}"""
WORKLOADS = {
    "max_rate": """  search: max_rate
  search_settings: {{min_rate: 25, max_rate: 1600, precision: 0.15, max_steps: 7}}
  duration_s: 2
  warmup_s: 0.5""",
    "p99": """  rates: [{qps:g}]
  duration_s: 4
  warmup_s: 1""",
}
STARTS = {
    "first values": {},
    "Triton-like default": {"dynamic_batching": True, "max_batch_size": 8},
}


def scenario_text(
    name: str, models: list[str], objective: str, qps: float | None, tune: str = ""
) -> str:
    listed = "\n".join(f"    - {m}" for m in models)
    workload = WORKLOADS[objective].format(qps=qps)
    return SCENARIO.format(name=name, models=listed, workload=workload, tune=tune)


def run_scenario(path: Path, out: Path) -> tuple[Path, float]:
    started = time.perf_counter()
    outcome = ScenarioRunner(path, output=out).run()
    return outcome.directory.path, time.perf_counter() - started


class Table:
    """One model's brute-force measurements, each setting valued as the scenario runner
    values it (`objective_of`)."""

    def __init__(self, run: Path, model: str, objective: str, qps: float | None) -> None:
        self.run, self.model, self.objective = run, model, objective
        self.maximize = MAXIMIZE[objective]
        trials = read_trials(run / TRIALS_FILE)
        self.rows = trials[trials.model == model].set_index("setting")
        self.values = {
            str(setting): objective_of(row, objective, qps=qps, usd_per_hour=None)
            for setting, row in self.rows.iterrows()
        }

    def optimum(self) -> tuple[str, float]:
        usable = {s: m.value for s, m in self.values.items() if m.value is not None}
        pick = max if self.maximize else min
        setting = pick(usable, key=usable.__getitem__)
        return setting, usable[setting]

    def share(self, value: float | None) -> float:
        """How close `value` is to the optimum: 1.0 is the optimum (value/optimum where
        higher is better, optimum/value where lower is)."""
        if value is None:
            return 0.0
        top = self.optimum()[1]
        return value / top if self.maximize else top / value

    def ties(self, within: float = 0.0) -> int:
        """Settings within `within` (a share) of the optimum."""
        return sum(1 for m in self.values.values() if self.share(m.value) >= 1 - within - 1e-12)

    def replay(self, start: dict[str, Any], budget: int | None) -> tuple[float | None, int]:
        """Quick search over this table: (best value, trials it measured)."""
        scenario = load_scenario(self.run / "scenario.yaml")
        plan = expand(scenario, self.run)
        space = Space.of(plan, scenario.servers[0])

        async def measure(name: object) -> Measured:
            return self.values.get(str(name), Measured(None, (), "not in the brute-force run"))

        result = asyncio.run(
            quick_search(
                space.sizes, space.key, measure, maximize=self.maximize, budget=budget,
                start=space.point(start),
            )
        )  # fmt: skip
        best = result.best
        return (best[1].value if best else None), result.trials_spent

    def random_share(self, k: int) -> float:
        """The expected share of the optimum that the best of `k` settings drawn at random
        (distinct, uniformly) reaches: the baseline a search must beat. With the shares
        sorted, the i-th smallest is the best of the draw with probability
        C(i, k-1) / C(N, k)."""
        shares = sorted(self.share(m.value) for m in self.values.values())
        n = len(shares)
        return sum(s * math.comb(i, k - 1) for i, s in enumerate(shares)) / math.comb(n, k)


def _wall(run: Path) -> float:
    info = json.loads((run / RUN_FILE).read_text())
    if not info.get("ended_at"):
        return float("nan")  # still running
    return (
        datetime.fromisoformat(info["ended_at"]) - datetime.fromisoformat(info["started_at"])
    ).total_seconds()


def _model_ids(run: Path) -> list[str]:
    return [m.id for m in expand(load_scenario(run / "scenario.yaml"), run).models]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", choices=sorted(WORKLOADS), default="max_rate")
    parser.add_argument("--out", type=Path, default=Path("/tmp/servebench-tune"))
    parser.add_argument("--brute-run", type=Path, nargs="+", help="brute-force runs to reuse")
    parser.add_argument("--live", action="store_true", help="also run quick live per model")
    parser.add_argument("--budget", type=int, default=6, help="quick's budget in trials")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    objective = args.objective
    unit = "req/s" if objective == "max_rate" else "s"
    print(f"load average before: {os.getloadavg()}")
    runs = args.brute_run
    if runs is None:
        groups = (
            [(list(range(len(MODELS))), None)]
            if objective == "max_rate"
            else [([i], qps) for i, (_, qps) in enumerate(MODELS)]
        )
        runs = []
        for indexes, qps in groups:
            path = args.out / f"brute-{objective}-{'-'.join(map(str, indexes))}.yaml"
            path.write_text(
                scenario_text("tune-bench", [MODELS[i][0] for i in indexes], objective, qps)
            )
            run, seconds = run_scenario(path, args.out / "results")
            print(f"brute force: {run} in {seconds:,.0f} s", flush=True)
            runs.append(run)
    # The runs hold the models in MODELS' order (one run of all, or one run each).
    tables: list[tuple[int, Table]] = []
    for run in runs:
        ids = _model_ids(run)
        for model in ids:
            i = len(tables)
            qps = MODELS[i][1] if objective == "p99" else None
            tables.append((i, Table(run, model, objective, qps)))
        print(f"brute force run {run}: {len(ids)} model(s), {_wall(run):,.0f} s wall")
    print(
        f"\nquick replayed on the brute-force table ({objective}, {unit}; share of brute's optimum)"
    )
    print(
        f"{'model':22} {'start':20} {'budget':>6} {'quick':>10} {'brute':>10} {'share':>6} "
        f"{'trials':>13} {'random k':>8}"
    )
    for _, table in tables:
        setting, top = table.optimum()
        space = len(table.values)
        for label, start in STARTS.items():
            for budget in (None, args.budget):
                value, spent = table.replay(start, budget)
                print(
                    f"{table.model:22} {label:20} {budget or '-':>6} {value or 0:10,.6g} "
                    f"{top:10,.6g} {table.share(value):6.1%} "
                    f"{f'{spent}/{space} ({spent / space:.0%})':>13} "
                    f"{table.random_share(spent):8.1%}"
                )
        print(
            f"{'':22} brute optimum: {setting}; settings at it: {table.ties()}, within 5 %: "
            f"{table.ties(0.05)}, within 10 %: {table.ties(0.10)} of {space}"
        )
    if args.live:
        print(f"\nquick live, budget {args.budget} (objective {objective})")
        for i, table in tables:
            spec, qps = MODELS[i]
            qps_field = f", qps: {qps:g}" if objective == "p99" else ""
            tune = (
                f"tune: {{method: quick, objective: {objective}{qps_field}, "
                f"budget_trials: {args.budget}}}\n"
            )
            path = args.out / f"quick-{objective}-{i}.yaml"
            path.write_text(
                scenario_text(
                    f"tune-quick-{i}", [spec], objective, qps if objective == "p99" else None, tune
                )
            )
            run, seconds = run_scenario(path, args.out / "results")
            found = json.loads((run / TUNE_FILE).read_text())["servers"]["triton"]
            best = found["best"] or {"value": None, "setting": "none"}
            top = table.optimum()[1]
            print(
                f"{table.model:22} quick {best['value'] or 0:10,.6g} {unit} ({best['setting']}), "
                f"{found['trials_spent']}/{space} trials, {seconds:,.0f} s wall; brute "
                f"optimum {top:,.6g} ({table.share(best['value']):.0%}; that setting's brute "
                f"value {_brute_value(table, best['setting'])}); {found['stop_reason']}",
                flush=True,
            )
    print(f"\nload average after: {os.getloadavg()}")


def _brute_value(table: Table, setting: str) -> str:
    measured = table.values.get(setting)
    return "none" if measured is None or measured.value is None else f"{measured.value:,.6g}"


if __name__ == "__main__":
    main()
