"""Quick configuration search against brute force, on the local Triton (issue 23 item 3).

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/tune.py [--objective max_rate|p99]
     [--space narrow|wide] [--out DIR] [--brute-run RUN_DIR ...] [--budget N]
     [--starts N --seed S] [--calibrate SHARE] [--duration-s S] [--holdout] [--noise N]
     [--confirm N] [--live]

The spaces (`--space`): `narrow`, 24 distinct Triton settings (max_batch_size {1, 8, 32} ×
dynamic batching {off, on} × queue delay {0, 500, 2000} µs × instance_count {1, 2};
"batching off" takes no delay, so 36 combinations collapse to 24), and `wide`, 60
(max_batch_size {1, 4, 8, 16, 32}, instance_count {1, 2, 3}); three generated models of
different sizes. Two objectives:

- `max_rate`: each setting measured by the SLO search (`workload.search: max_rate`, short
  2 s steps, p90 under 50 ms); the objective is the search's max rate (higher is better).
  Its values are coarse (the search's steps), so many settings tie at the optimum.
- `p99`: each setting measured at one fixed Poisson rate per model (`tune.qps`, chosen near
  what the unbatched single instance can take, so the settings differ), the objective the
  p99's upper 95 % bound (lower is better): a continuous landscape, few ties.
  `--calibrate SHARE` measures that rate on the machine at hand instead of taking MODELS'
  fixed one: the unbatched single instance's max rate (the SLO search, finer steps) times
  SHARE. Past saturation a p99 measures whether a queue happened to build, not the
  setting (one server measured twice differed up to 146x at a fixed rate that saturated
  one model on one machine and not on another), so the rate has to follow the machine.
  `--duration-s` sets each setting's measured seconds (default 4).

1. Brute force: a scenario run of the whole matrix (one run for all three models with
   `max_rate`; one run per model with `p99`, each at its own rate), or `--brute-run`
   reuses them; the optimum per model.
2. Quick, on the brute-force table: `scenario.tune.quick_search` replayed over the same
   runs' measurements, valued by the scenario runner's own `objective_of` (no new noise:
   the same number for a setting whichever search asks), from the matrix's first values,
   from Triton-like defaults (batching on, max_batch_size 8) and from `--starts` random
   settings (seeded), without a budget and with `--budget` trials (default a quarter of
   the space): the share of brute's optimum it reaches and the share of the trials it
   measured. Each table also shows one setting measured several times (with batching off,
   max_batch_size changes nothing for batch-1 requests): the measurement noise.
3. `--holdout` (p99): each model's brute force run twice at the same rate; quick and brute
   force choose on one run and their picks are valued on the other, both ways. A table's
   optimum is the luckiest of its draws, which no search that measures fewer settings
   matches even where it picks as good a server; valued on a run that did not choose,
   the two picks compare as servers. The runs' agreement on each setting is printed too.
4. `--noise N` (p99): one server per model measured N times under each measurement rule,
   a fixed window and perf_analyzer's stability rule (windows until three agree): the
   spread of one setting's value, the noise every comparison above lives in.
5. `--confirm N` (p99): brute's optimum and quick's pick measured N more times each,
   alternating, their medians compared — the brute optimum is the luckiest of many noisy
   draws, so its table value flatters it.
6. `--live`: quick run for real once per model (`tune: {method: quick}` in a scenario of
   that model alone), its wall time and what it reached against the brute optimum (two
   measurements, minutes apart, on a shared machine: noise included).

Prints the load average before and after (the machine is shared), and beside each quick
result the baseline it must beat: the expected share of the optimum that the best of as
many settings drawn at random reaches ("random k").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pandas as pd

from servebench.analysis.loader import read_trials
from servebench.results import RUN_FILE, TRIALS_FILE, TUNE_FILE, read_run_json
from servebench.scenario.export_cache import EXPORT_CACHE_ENV
from servebench.scenario.plan import expand
from servebench.scenario.runner import ScenarioRunner
from servebench.scenario.tune import (
    MAXIMIZE,
    Measured,
    Point,
    Space,
    objective_of,
    quick_search,
)
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
    api: triton
    launch: local
    settings:
{settings}
workload:
  mode: open
  arrival: poisson
{workload}
  batch_sizes: [1]
links: [direct]
slo: {{percentile: 90, latency_ms: 50}}
cost: {{instance: c6i.xlarge}}
{tune}"""
# The settings spaces: `narrow` is 24 distinct settings, `wide` 60 (max_batch_size and
# instance_count finer), where a quarter of the space allows a steepest-ascent climb more
# than one step (a step from an interior point costs up to 7 neighbours).
SPACES = {
    "narrow": """      max_batch_size: [1, 8, 32]
      dynamic_batching: [false, true]
      max_queue_delay_us: [0, 500, 2000]
      instance_count: [1, 2]""",
    "wide": """      max_batch_size: [1, 4, 8, 16, 32]
      dynamic_batching: [false, true]
      max_queue_delay_us: [0, 500, 2000]
      instance_count: [1, 2, 3]""",
}
WORKLOADS = {
    "max_rate": """  search: max_rate
  search_settings: {{min_rate: 25, max_rate: 1600, precision: 0.15, max_steps: 7}}
  duration_s: 2
  warmup_s: 0.5""",
    "p99": """  rates: [{qps:g}]
  duration_s: {duration_s:g}
  warmup_s: 1""",
}
# The calibration (`--calibrate`): the SLO search over the unbatched single instance,
# steps finer than `max_rate`'s (whose doubling from 25 req/s leaves no bisection step).
CALIBRATION_SETTINGS = """      max_batch_size: [1]
      dynamic_batching: [false]
      instance_count: [1]"""
CALIBRATION_WORKLOAD = """  search: max_rate
  search_settings: {min_rate: 100, max_rate: 6400, precision: 0.05, max_steps: 12}
  duration_s: 3
  warmup_s: 1"""
# `--noise`: one server (batching off, max_batch_size 1, two instances) measured again
# and again under each rule: a fixed window, and perf_analyzer's stability rule (2 s
# windows until three agree within the tolerance; the p99 of those three).
NOISE_SETTINGS = """      max_batch_size: [1]
      dynamic_batching: [false]
      instance_count: [2]"""
NOISE_RULES = {
    "fixed window": "  duration_s: {duration_s:g}",
    "stability, 10 %": "  stability: {{window_s: 2, tolerance: 0.1, max_windows: 8}}",
    "stability, 20 %": "  stability: {{window_s: 2, tolerance: 0.2, max_windows: 8}}",
}
P99_DURATION_S = 4.0  # each setting's measured seconds, unless --duration-s
STARTS = {
    "first values": {},
    "Triton-like default": {"dynamic_batching": True, "max_batch_size": 8},
}


def scenario_text(
    name: str,
    models: list[str],
    objective: str,
    qps: float | None,
    space: str,
    tune: str = "",
    duration_s: float = P99_DURATION_S,
) -> str:
    """A scenario of `models` over `space`; `duration_s` is p99's measured seconds."""
    workload = WORKLOADS[objective].format(qps=qps, duration_s=duration_s)
    return _scenario(name, models, SPACES[space], workload, tune)


def _scenario(name: str, models: list[str], settings: str, workload: str, tune: str = "") -> str:
    listed = "\n".join(f"    - {m}" for m in models)
    return SCENARIO.format(
        name=name, models=listed, settings=settings, workload=workload, tune=tune
    )


def calibrated_rate(index: int, share: float, out: Path) -> float:
    """`share` of the max rate the unbatched single instance of MODELS[index] keeps
    under the SLO, measured now (the SLO search, one Triton start)."""
    path = out / f"calibrate-{index}.yaml"
    spec = MODELS[index][0]
    path.write_text(
        _scenario(f"tune-calibrate-{index}", [spec], CALIBRATION_SETTINGS, CALIBRATION_WORKLOAD)
    )
    run, seconds = run_scenario(path, out / "results")
    row = read_trials(run / TRIALS_FILE).iloc[0]
    top = objective_of(row, "max_rate", usd_per_hour=None)
    if top.value is None:
        raise SystemExit(f"calibration of {spec} failed ({top.note}): {run}")
    rate = round(share * top.value)
    print(
        f"calibration: {spec}: unbatched single instance {top.value:,.0f} req/s under the "
        f"SLO; measured at {rate:,} req/s ({share:.0%}); {seconds:,.0f} s ({run})",
        flush=True,
    )
    return float(rate)


def run_scenario(path: Path, out: Path) -> tuple[Path, float]:
    started = time.perf_counter()
    outcome = ScenarioRunner(path, output=out).run()
    return outcome.directory.path, time.perf_counter() - started


class Table:
    """One model's brute-force measurements, each setting valued as the scenario runner
    values it (`objective_of`)."""

    def __init__(self, run: Path, model: str, objective: str) -> None:
        self.run, self.model, self.objective = run, model, objective
        self.maximize = MAXIMIZE[objective]
        self.scenario = load_scenario(run / "scenario.yaml")
        # p99: the one rate the run measured at (fixed or calibrated), from the run itself.
        workload = self.scenario.workload
        self.qps = workload.rates[0] if objective == "p99" else None
        self.duration_s = workload.duration_s
        trials = read_trials(run / TRIALS_FILE)
        self.rows = trials[trials.model == model].set_index("setting")
        self.values = {
            str(setting): objective_of(row, objective, qps=self.qps, usd_per_hour=None)
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
        return self.ratio(value, self.optimum()[1])

    def ties(self, within: float = 0.0) -> int:
        """Settings within `within` (a share) of the optimum."""
        return sum(1 for m in self.values.values() if self.share(m.value) >= 1 - within - 1e-12)

    def repeats(self) -> list[tuple[str, float, float]]:
        """The same setting measured several times: with batching off, max_batch_size
        changes nothing for batch-1 requests, so the settings that differ only in it are
        one server measured once each. Per instance_count: (label, lowest, highest)."""
        groups: dict[str, list[float]] = {}
        for setting, (_, server_setting) in self.space().by_id.items():
            values, measured = server_setting.values, self.values.get(setting)
            if values.get("dynamic_batching") is False and measured and measured.value:
                label = f"batching off, {values.get('instance_count')} instance(s)"
                groups.setdefault(label, []).append(measured.value)
        return [(label, min(v), max(v)) for label, v in groups.items() if len(v) > 1]

    def space(self) -> Space:
        return Space.of(expand(self.scenario, self.run), self.scenario.servers[0])

    def replay(self, start: Point, budget: int | None) -> tuple[float | None, int]:
        """Quick search over this table from `start`: (best value, trials it measured)."""
        value, spent, _ = self.replay_pick(start, budget)
        return value, spent

    def replay_pick(self, start: Point, budget: int | None) -> tuple[float | None, int, str | None]:
        """Quick search over this table from `start`: (best value, trials, its setting)."""
        space = self.space()

        async def measure(names: list[object], rounds: int) -> dict[object, Measured]:
            missing = Measured(None, (), "not in the brute-force run")
            return {name: self.values.get(str(name), missing) for name in names}

        result = asyncio.run(
            quick_search(
                space.sizes, space.key, measure, maximize=self.maximize, budget=budget,
                start=start,
            )
        )  # fmt: skip
        best = result.best
        if best is None:
            return None, result.trials_spent, None
        return best[1].value, result.trials_spent, best[0]

    def random_starts(self, count: int, seed: int) -> list[Point]:
        """`count` start points drawn at random (seeded), each a distinct setting."""
        if count <= 0:
            return []
        space, rng = self.space(), random.Random(seed)
        points = list(itertools.product(*(range(n) for n in space.sizes)))
        rng.shuffle(points)
        starts: dict[str, Point] = {}
        for point in points:
            starts.setdefault(space.key(point), point)
            if len(starts) == count:
                break
        return list(starts.values())

    def random_share(self, k: int, worth: Callable[[str], float] | None = None) -> float:
        """The expected share of the optimum that the best of `k` settings drawn at random
        (distinct, uniformly) reaches: the baseline a search must beat. With the settings
        ranked by this table, worst first, the i-th is the best of the draw with
        probability C(i, k-1) / C(N, k). `worth` values the pick otherwise (a held-out
        measurement of it); by default its share here."""
        ranked = sorted(self.values, key=lambda s: self.share(self.values[s].value))
        worth = worth or (lambda setting: self.share(self.values[setting].value))
        n = len(ranked)
        return sum(worth(s) * math.comb(i, k - 1) for i, s in enumerate(ranked)) / math.comb(n, k)

    def value(self, setting: str | None) -> float | None:
        """`setting`'s value in this table (None: not measured, or nothing usable)."""
        measured = self.values.get(setting) if setting is not None else None
        return measured.value if measured is not None else None

    def ratio(self, value: float | None, reference: float | None) -> float:
        """`value` as a share of `reference` (above 1.0: better than it)."""
        if value is None:
            return 0.0
        if reference is None:
            return math.inf
        return value / reference if self.maximize else reference / value


def starts_of(table: Table, count: int, seed: int) -> dict[str, Point]:
    """The fixed start points and `count` random ones (seeded), by label."""
    starts = {label: table.space().point(values) for label, values in STARTS.items()}
    for n, point in enumerate(table.random_starts(count, seed)):
        starts[f"random {n + 1} {''.join(map(str, point))}"] = point
    return starts


def held_out(select: Table, judge: Table, budget: int, count: int, seed: int) -> None:
    """Choose on one brute-force run, value the choice on another of the same model and rate.

    A table's optimum is the luckiest of its many noisy draws (the winner's curse), so a
    search that measures fewer settings is judged against a value no measurement of the
    same server repeats. Measured again, independently of the choice, brute force's pick
    and quick's pick are compared as servers: quick's share is its pick's value on `judge`
    against brute force's pick's value there (above 100 %: quick's pick measured better)."""
    brute_pick = select.optimum()[0]
    reference = judge.value(brute_pick)
    print(
        f"{select.model:22} brute pick on run A {brute_pick}: {select.value(brute_pick):,.6g} "
        f"there, {_shown(reference)} on run B, whose own optimum is {judge.optimum()[1]:,.6g} "
        f"({judge.optimum()[0]}): brute force's pick reaches {judge.share(reference):.1%} "
        f"of run B's optimum"
    )
    shares = []
    for label, start in starts_of(select, count, seed).items():
        _, spent, pick = select.replay_pick(start, budget)
        share = judge.ratio(judge.value(pick), reference)
        if label.startswith("random"):
            shares.append(share)
        print(
            f"{'':22} quick from {label:20} budget {budget}: pick {pick}, "
            f"{_shown(select.value(pick))} on A, {_shown(judge.value(pick))} on B: "
            f"{share:.1%} of brute's pick on B ({spent} trials)"
        )
    baseline = select.random_share(budget, lambda s: judge.ratio(judge.value(s), reference))
    if shares:
        print(
            f"{'':22} {len(shares)} random starts, budget {budget}, held out: mean "
            f"{statistics.mean(shares):.1%}, median {statistics.median(shares):.1%}, min "
            f"{min(shares):.1%}, at >= 95 % {sum(v >= 0.95 for v in shares)}/{len(shares)}; "
            f"the best of {budget} random settings on A, held out: {baseline:.1%}"
        )
    both = [
        (a.value, judge.value(setting))
        for setting, a in select.values.items()
        if a.value is not None and judge.value(setting) is not None
    ]
    logs = [abs(math.log(b / a)) for a, b in both]  # type: ignore[operator]
    print(
        f"{'':22} one setting on A and on B, over {len(both)} settings: median ratio "
        f"{math.exp(statistics.median(logs)):.2f}x, 90th percentile "
        f"{math.exp(statistics.quantiles(logs, n=10)[-1]):.2f}x; rank correlation "
        f"{pd.DataFrame(both).corr(method='spearman').iloc[0, 1]:.2f}"
    )


def _pairs(tables: list[Table]) -> list[tuple[Table, Table]]:
    """Consecutive brute-force runs of one model at one rate and duration, paired."""
    groups: dict[tuple[str, float | None, float | None], list[Table]] = {}
    for table in tables:
        groups.setdefault((table.model, table.qps, table.duration_s), []).append(table)
    return [(runs[i], runs[i + 1]) for runs in groups.values() for i in range(0, len(runs) - 1, 2)]


def _shown(value: float | None) -> str:
    return "none" if value is None else f"{value:,.6g}"


def _wall(run: Path) -> float:
    info = read_run_json(run / RUN_FILE)
    if not info["ended_at"]:
        return float("nan")  # still running
    return (
        datetime.fromisoformat(info["ended_at"]) - datetime.fromisoformat(info["started_at"])
    ).total_seconds()


def _model_ids(run: Path) -> list[str]:
    return [m.id for m in expand(load_scenario(run / "scenario.yaml"), run).models]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", choices=sorted(WORKLOADS), default="max_rate")
    parser.add_argument("--space", choices=sorted(SPACES), default="narrow")
    parser.add_argument("--out", type=Path, default=Path("/tmp/servebench-tune"))
    parser.add_argument("--brute-run", type=Path, nargs="+", help="brute-force runs to reuse")
    parser.add_argument("--live", action="store_true", help="also run quick live per model")
    parser.add_argument(
        "--budget", type=int, help="quick's budget in trials (default: a quarter of the space)"
    )
    parser.add_argument(
        "--starts", type=int, default=5, help="random start points per model (seeded)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random starts")
    parser.add_argument(
        "--calibrate",
        type=float,
        metavar="SHARE",
        help="p99: measure each model at SHARE of its unbatched single instance's max rate, "
        "measured first, instead of MODELS' fixed rate",
    )
    parser.add_argument(
        "--duration-s",
        type=float,
        help=f"p99: seconds each setting is measured (after 1 s of warm-up; default "
        f"{P99_DURATION_S:g})",
    )
    parser.add_argument(
        "--holdout",
        action="store_true",
        help="p99: run each model's brute force twice at the same rate, choose on one run "
        "and value the choice on the other, both ways",
    )
    parser.add_argument(
        "--noise",
        type=int,
        default=0,
        metavar="N",
        help="p99: measure one server of each model N times under each measurement rule "
        "(fixed window, stability windows), alternating",
    )
    parser.add_argument(
        "--confirm",
        type=int,
        default=0,
        metavar="N",
        help="p99: measure brute's optimum and quick's pick (Triton-like start, budget) N "
        "more times each, alternating",
    )
    args = parser.parse_args()
    if args.calibrate is not None and not 0 < args.calibrate <= 1:
        parser.error(f"--calibrate: a share in (0, 1], got {args.calibrate:g}")
    for name in ("noise", "confirm"):
        if getattr(args, name) < 0:
            parser.error(f"--{name}: a count >= 0, got {getattr(args, name)}")
    if args.duration_s is not None and args.duration_s <= 0:
        parser.error(f"--duration-s: must be > 0, got {args.duration_s:g}")
    if args.objective != "p99" and (
        args.calibrate is not None or args.duration_s is not None or args.holdout or args.noise
    ):
        parser.error(
            "--calibrate, --duration-s, --holdout and --noise apply to --objective p99 only"
        )
    if args.holdout and args.brute_run:
        parser.error("--holdout runs brute force; with --brute-run, give both runs of a model")
    args.out.mkdir(parents=True, exist_ok=True)
    objective = args.objective
    unit = "req/s" if objective == "max_rate" else "s"
    print(f"load average before: {os.getloadavg()}")
    runs = args.brute_run
    if runs is None:
        groups = (
            [(list(range(len(MODELS))), None)]
            if objective == "max_rate"
            else [
                ([i], calibrated_rate(i, args.calibrate, args.out) if args.calibrate else qps)
                for i, (_, qps) in enumerate(MODELS)
            ]
        )
        runs = []
        for indexes, qps in groups * (2 if args.holdout else 1):
            path = args.out / f"brute-{objective}-{args.space}-{'-'.join(map(str, indexes))}.yaml"
            models = [MODELS[i][0] for i in indexes]
            path.write_text(
                scenario_text(
                    "tune-bench",
                    models,
                    objective,
                    qps,
                    args.space,
                    duration_s=args.duration_s or P99_DURATION_S,
                )
            )
            run, seconds = run_scenario(path, args.out / "results")
            print(f"brute force: {run} in {seconds:,.0f} s", flush=True)
            runs.append(run)
    # The runs hold the models in MODELS' order (one run of all, or one run each).
    tables: list[tuple[int, Table]] = []
    for run in runs:
        ids = _model_ids(run)
        for model in ids:
            # MODELS' index: with --holdout the runs cycle through MODELS twice.
            tables.append((len(tables) % len(MODELS), Table(run, model, objective)))
        print(f"brute force run {run}: {len(ids)} model(s), {_wall(run):,.0f} s wall")
    print(
        f"\nquick replayed on the brute-force table ({objective}, {unit}; share of brute's optimum)"
    )
    print(
        f"{'model':22} {'start':20} {'budget':>6} {'quick':>10} {'brute':>10} {'share':>6} "
        f"{'trials':>13} {'random k':>8}"
    )
    budgets: dict[str, int] = {}
    for _, table in tables:
        setting, top = table.optimum()
        space = len(table.values)
        budget_q = budgets[table.model] = args.budget or space // 4
        starts = starts_of(table, args.starts, args.seed)
        reached: dict[int | None, list[tuple[float, int]]] = {None: [], budget_q: []}
        for label, start in starts.items():
            for budget in (None, budget_q):
                value, spent = table.replay(start, budget)
                if label.startswith("random"):
                    reached[budget].append((table.share(value), spent))
                print(
                    f"{table.model:22} {label:20} {budget or '-':>6} {value or 0:10,.6g} "
                    f"{top:10,.6g} {table.share(value):6.1%} "
                    f"{f'{spent}/{space} ({spent / space:.0%})':>13} "
                    f"{table.random_share(spent):8.1%}"
                )
        for budget, got in reached.items():
            if got:
                shares = [share for share, _ in got]
                print(
                    f"{'':22} {len(got)} random starts, budget {budget or '-'}: share mean "
                    f"{sum(shares) / len(shares):.1%}, min {min(shares):.1%}, at >= 95 % "
                    f"{sum(share >= 0.95 for share in shares)}/{len(got)}; trials mean "
                    f"{sum(spent for _, spent in got) / len(got) / space:.0%} of {space}"
                )
        for label, low, high in table.repeats():
            print(
                f"{'':22} one setting measured again ({label}, max_batch_size only "
                f"differs): {low:,.6g} to {high:,.6g} ({high / low:.1f}x)"
            )
        print(
            f"{'':22} brute optimum: {setting}; settings at it: {table.ties()}, within 5 %: "
            f"{table.ties(0.05)}, within 10 %: {table.ties(0.10)} of {space}"
        )
    pairs = _pairs([table for _, table in tables])
    if pairs:
        print("\nheld out: chosen on run A, valued on run B (the same model and rate)")
    for a, b in pairs:
        for select, judge in ((a, b), (b, a)):
            held_out(select, judge, budgets[select.model], args.starts, args.seed)
    if args.noise and objective == "p99":
        print(f"\none server measured {args.noise} times under each rule, alternating")
        for i, table in dict(tables).items():  # one table per model
            measurement_noise(table, MODELS[i][0], args.out, args.noise)
    if args.confirm and objective == "p99":
        print(f"\nthe picks measured {args.confirm} more times each, alternating")
        for i, table in tables:
            spec, qps = MODELS[i][0], table.qps
            start = table.space().point(STARTS["Triton-like default"])
            _, _, pick = table.replay_pick(start, budgets[table.model])
            picks = {"brute optimum": table.optimum()[0]}
            if pick is not None:
                picks["quick (Triton-like, budget)"] = pick
            confirm(table, picks, spec, qps, args.out, args.confirm)
    if args.live:
        print(f"\nquick live (objective {objective})")
        for i, table in tables:
            spec, qps = MODELS[i][0], table.qps
            space = len(table.values)
            qps_field = f", qps: {qps:g}" if objective == "p99" else ""
            tune = (
                f"tune: {{method: quick, objective: {objective}{qps_field}, "
                f"budget_trials: {budgets[table.model]}}}\n"
            )
            path = args.out / f"quick-{objective}-{args.space}-{i}.yaml"
            rate = qps if objective == "p99" else None
            path.write_text(
                scenario_text(
                    f"tune-quick-{i}",
                    [spec],
                    objective,
                    rate,
                    args.space,
                    tune,
                    duration_s=table.duration_s,
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
                f"value {_shown(table.value(best['setting']))}); {found['stop_reason']}",
                flush=True,
            )
    print(f"\nload average after: {os.getloadavg()}")


def measurement_noise(table: Table, spec: str, out: Path, repeats: int) -> None:
    """One server measured `repeats` times under each of NOISE_RULES, alternating: how far
    apart two measurements of one setting fall, and whether perf_analyzer's stability
    rule (measure until windows agree) brings them closer than a fixed window does."""
    measured: dict[str, list[float]] = {rule: [] for rule in NOISE_RULES}
    for repeat in range(repeats):
        for rule, text in NOISE_RULES.items():
            workload = f"  rates: [{table.qps:g}]\n{text.format(duration_s=table.duration_s)}"
            path = out / f"noise-{table.model}.yaml"
            path.write_text(
                _scenario(
                    f"tune-noise-{repeat}", [spec], NOISE_SETTINGS, f"{workload}\n  warmup_s: 1"
                )
            )
            run, _ = run_scenario(path, out / "results")
            row = read_trials(run / TRIALS_FILE).iloc[0]
            value = objective_of(row, "p99", qps=table.qps, usd_per_hour=None).value
            if value is not None:
                measured[rule].append(value)
    for rule, values in measured.items():
        if len(values) < 2:
            print(f"{table.model:22} {rule:16} fewer than two usable measurements: {values}")
            continue
        print(
            f"{table.model:22} {rule:16} at {table.qps:g} req/s: "
            f"{', '.join(f'{v:,.4g}' for v in values)}; spread {max(values) / min(values):.2f}x, "
            f"median {statistics.median(values):,.4g}, "
            f"coefficient of variation {statistics.stdev(values) / statistics.mean(values):.0%}"
        )


def confirm(
    table: Table, picks: dict[str, str], spec: str, qps: float, out: Path, repeats: int
) -> None:
    """Measure each pick `repeats` more times, alternating, and compare their medians.

    On a noisy landscape the brute-force optimum is the lowest of many noisy draws, an
    optimistic value (the winner's curse): a search that measured fewer settings cannot
    match it even when it picked as good a server. Measuring the picks again, each a
    scenario of that one setting, compares the servers rather than their luckiest draw."""
    space = table.space()
    # The export cache is the test suite's seam; here it spares each repeat re-exporting
    # the same model (seconds of the ONNX exporter's warm-up) between measurements.
    os.environ.setdefault(EXPORT_CACHE_ENV, str(out / "export-cache"))
    measured: dict[str, list[float]] = {label: [] for label in picks}
    for repeat in range(repeats):
        for label, setting in picks.items():
            values = space.by_id[setting][1].values  # every field; the axes are swept
            settings = "\n".join(
                f"      {k}: [{json.dumps(values[k])}]" for k in space.axes if k in values
            )
            path = out / f"confirm-{table.model}-{label.replace(' ', '-')}.yaml"
            text = scenario_text(
                f"tune-confirm-{repeat}", [spec], "p99", qps, "narrow", duration_s=table.duration_s
            )
            path.write_text(text.replace(SPACES["narrow"], settings))
            run, _ = run_scenario(path, out / "results")
            row = read_trials(run / TRIALS_FILE).iloc[0]
            value = objective_of(row, "p99", qps=qps, usd_per_hour=None).value
            if value is not None:
                measured[label].append(value)
    medians = {label: statistics.median(v) for label, v in measured.items() if v}
    for label, values in measured.items():
        shown = ", ".join(f"{v:,.4g}" for v in values)
        print(
            f"{table.model:22} {label:28} {picks[label]}: measured again {shown}; median "
            f"{medians.get(label, float('nan')):,.4g} (table: {_shown(table.value(picks[label]))})"
        )
    if len(medians) == len(picks) == 2:
        (brute, b), (quick, q) = medians.items()
        print(f"{'':22} {quick} / {brute}, re-measured medians: share {b / q:.1%}")


if __name__ == "__main__":
    main()
