"""Configuration search (`tune:`): the best server setting without measuring every one.

A server's settings matrix is a grid: each setting it varies is an axis whose values are
in the order the scenario lists them. `brute` measures every point (today's matrix).
`quick` is a steepest-ascent hill climb, the shape of Triton Model Analyzer's quick search:
it starts at the first value of every list (list the default first), measures each
neighbour of the current point (one setting moved to the next or previous value of its
list), moves to the neighbour that improves the objective most, and stops at a local
optimum (no neighbour improves) or when `budget` settings are measured. Points that mean
the same setting (Triton's queue delay with batching off) are one point, and no point is
measured twice as a neighbour. `race` (`scenario.race`) measures every candidate in rounds
and drops those a test finds worse.

With a budget, a local optimum reached before the budget is spent is not the end: the
user has granted those trials, and on a measured landscape a climb often stops on a bump
of noise or a plateau (batching helps only once both dynamic batching is on and
max_batch_size > 1, so no single move from "off, 1" improves). The climb restarts from
the unmeasured setting farthest (in steps along the axes) from every setting measured so
far — the part of the grid the search knows least, chosen without a random draw so a
search is reproducible — and the answer is the best setting of all the climbs. Without
a budget it stops at the first local optimum, as Model Analyzer's does.

Measured once (one round), a neighbour that measured better is moved to, as Model
Analyzer does (its threshold is 0): one draw has no measure of the noise. Measured in
rounds (`workload.repeats`), the climb moves only on an improvement beyond the noise: the
current point is measured again beside its new neighbours, each neighbour is compared with
it round by round (`common.paired`: the median of their per-round ratios, drift shared by
a round cancelled), the one that looked best is measured once more beside it, and the
climb moves only if the comparison over all their shared rounds finds it better at the
level (`_confirmed`). Its answer is where its climb ended — each move there was a
confirmed improvement — or, after restarts, the best median of the climbs' ends: never a
neighbour's lucky draw.

The search is sans-I/O about what a measurement is: `measure(names, rounds)` is the
caller's (the scenario runner runs the settings' trials; tests and `benchmarks/tune.py`
read a table), and every step it takes — which setting, the measurement, its objective
value, the decision and why — is kept in order for `tune.json` and the report's path.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servebench.common.paired import HIGHER, LOWER, Comparison, compare_paired
from servebench.pricing import cost_at_qps
from servebench.results import TrialRow
from servebench.scenario.plan import Plan, ServerSetting
from servebench.scenario.race import race_search
from servebench.scenario.schema import ServerSection, TuneSection
from servebench.scenario.tune_steps import (
    MAXIMIZE,
    MEASURED,
    MOVED,
    RESTARTED,
    START,
    STAYED,
    STOPPED,
    Measure,
    Measured,
    Point,
    Step,
    TuneResult,
    better,
    shown,
)
from servebench.servers.settings import SettingsMatrix
from servebench.setting_row import counted


def neighbours(point: Point, sizes: Sequence[int]) -> list[Point]:
    """Each point one step away along one axis, axis by axis, the previous value first."""
    found = []
    for axis, index in enumerate(point):
        for moved in (index - 1, index + 1):
            if 0 <= moved < sizes[axis]:
                found.append((*point[:axis], moved, *point[axis + 1 :]))
    return found


def distinct_points(sizes: Sequence[int], key: Callable[[Point], str]) -> dict[str, Point]:
    """Each setting of the grid by key, at the first point (in grid order) that means it."""
    points: dict[str, Point] = {}
    for point in itertools.product(*(range(n) for n in sizes)):
        points.setdefault(key(point), point)
    return points


async def brute_search(
    candidates: Mapping[str, Point], measure: Measure, *, maximize: bool, rounds: int = 1
) -> TuneResult:
    """Every one of `candidates` (each setting's name and its point, in the matrix's order:
    `distinct_points`, as `race_search` takes them), measured as one batch (`rounds` rounds
    of it), recorded in that order."""
    result = TuneResult("brute", maximize)
    got = await result.counting(measure)(list(candidates), rounds)
    for name, point in candidates.items():
        result.measured[name] = got[name]
        result.record(point, name, MEASURED, got[name].note or "every setting is measured")
    result.stop_reason = "every setting measured"
    return result


async def quick_search(
    sizes: Sequence[int],
    key: Callable[[Point], str],
    measure: Measure,
    *,
    maximize: bool,
    budget: int | None = None,
    start: Point | None = None,
    rounds: int = 1,
    alpha: float = 0.05,
) -> TuneResult:
    """Steepest-ascent hill climbing from `start` (default: the first value of each axis)
    over the grid `sizes`; `key(point)` names the setting a point means (points with one
    key are one setting) and `measure` measures it, `rounds` rounds at a time; no setting
    is measured as a neighbour twice. With `rounds` > 1 a move needs a paired improvement
    at `alpha`, confirmed by one more round (`_confirmed`), and the answer is the best of
    the points where the climbs ended."""
    result = TuneResult("quick", maximize)
    ask, record = result.counting(measure), result.record
    paired = rounds > 1
    current = start if start is not None else tuple(0 for _ in sizes)

    def spent() -> bool:
        return budget is not None and result.trials_spent >= budget

    here = key(current)
    result.measured[here] = (await ask([here], rounds))[here]
    positions = {here: current}  # where each measured setting was first met
    ends: list[str] = []  # where each climb ended: a replicated search's finalists
    record(current, here, START, "the first value of every setting's list")
    while True:
        candidates, batch, out_of_budget = _neighbour_settings(current, sizes, key, result, budget)
        names = [name for _, name in batch]
        # Replicated, the current point is measured again beside its new neighbours, so
        # each is compared with it over rounds they share.
        got = await ask([here, *names] if paired else names, rounds) if batch else {}
        result.measured.update({str(name): measured for name, measured in got.items()})
        steps: dict[str, Step] = {}
        for point, name in batch:
            positions[name] = point
            steps[name] = record(point, name, STAYED, "")
        pending = [(point, name, steps.get(name)) for point, name in candidates]
        now = result.measured[here].value
        if paired and now is not None:
            winner, why = await _confirmed(result, ask, here, pending, alpha)
        else:
            winner, why = _improves_most(result, here, pending)
        if winner is not None:
            point, name, step = winner
            if step is None:
                record(point, name, MOVED, why + ", measured before", new=False)
            else:
                step.moved(result.measured[name], why)
            current, here = point, name
        if winner is None and not out_of_budget and budget is not None and not spent():
            fresh = _farthest(sizes, key, positions)
            if fresh is not None:
                why = (
                    f"local optimum at {here} ({shown(now)}) with {budget - result.trials_spent}"
                    " of the budget's trials left: restart from the unmeasured setting farthest"
                    " from those measured"
                )
                ends.append(here)
                current, here = fresh, key(fresh)
                result.measured[here] = (await ask([here], rounds))[here]
                positions[here] = current
                record(current, here, RESTARTED, why)
                continue
        if winner is None or out_of_budget or spent():
            result.stop_reason = reason = _stop_reason(
                here, now, paired, budget, optimum=winner is None and not out_of_budget,
                restarts_left=budget is not None and not spent(),
            )  # fmt: skip
            if paired:
                result.finalists = [*ends, here]
            record(current, here, STOPPED, reason, new=False)
            return result


def _neighbour_settings(
    current: Point,
    sizes: Sequence[int],
    key: Callable[[Point], str],
    result: TuneResult,
    budget: int | None,
) -> tuple[list[tuple[Point, str]], list[tuple[Point, str]], bool]:
    """The distinct settings next to `current` (points meaning the setting of `current`
    or of an earlier neighbour, e.g. batching off, are skipped), those of them not measured
    yet, and whether the budget ran out before every one of those fitted."""
    here = key(current)
    candidates: list[tuple[Point, str]] = []
    batch: list[tuple[Point, str]] = []
    for point in neighbours(current, sizes):
        name = key(point)
        if name == here or any(name == seen for _, seen in candidates):
            continue
        if name not in result.measured:
            if budget is not None and result.trials_spent + len(batch) >= budget:
                return candidates, batch, True
            batch.append((point, name))
        candidates.append((point, name))
    return candidates, batch, False


def _stop_reason(
    here: str,
    now: float | None,
    paired: bool,
    budget: int | None,
    *,
    optimum: bool,
    restarts_left: bool,
) -> str:
    """Why a climb stopped: a local optimum (`optimum`; with budget left but no unmeasured
    setting to restart from, `restarts_left`, every setting has been measured), or the
    budget."""  # fmt: skip
    if not optimum:
        return f"budget of {budget} trials spent"
    reason = f"local optimum: no neighbour of {here} improves on {shown(now)}"
    reason += " beyond the noise" if paired else ""
    return f"every setting measured; {reason}" if restarts_left else reason


Candidate = tuple[Point, str, Step | None]  # a neighbour, its setting, its step if new


def _improves_most(
    result: TuneResult, here: str, pending: list[Candidate]
) -> tuple[Candidate | None, str]:
    """The neighbour that improves most on the current point's value (any improvement:
    one round has no measure of the noise), and why; each other new neighbour's step
    says why not."""
    now = result.measured[here].value
    winner: Candidate | None = None
    for candidate in pending:
        top = result.measured[winner[1]].value if winner else now
        if better(result.measured[candidate[1]].value, top, result.maximize):
            winner = candidate
    for _, name, step in pending:
        if step is not None and (winner is None or name != winner[1]):
            step.reason = _compared(result.measured[name], now, here, winner, result.maximize)
    return winner, f"improves most on {here} ({shown(now)})"


async def _confirmed(
    result: TuneResult, ask: Measure, here: str, pending: list[Candidate], alpha: float
) -> tuple[Candidate | None, str]:
    """The neighbour a replicated climb moves to, and why: each neighbour is compared with
    the current point round by round over the rounds they share (`common.paired`); the
    one whose median ratio leans furthest its way, if any leans its way at all, is
    measured once more beside the current point (one more round of both), and the climb
    moves only if the comparison over all their shared rounds then finds it better at
    `alpha` — a draw that merely looked better does not move it. Only that one is
    confirmed: confirming each in turn would give every neighbour its own chance to pass
    by luck. Each other new neighbour's step says how it compared."""
    compared = {name: _paired(result, here, name, alpha) for _, name, _ in pending}
    looked = [c for c in pending if _favours(compared[c[1]], result.maximize)]
    sign = -1 if result.maximize else 1
    choice = min(looked, key=lambda c: sign * compared[c[1]].ratio) if looked else None
    for _, name, step in pending:
        if step is not None and (choice is None or name != choice[1]):
            step.reason = _described(result, here, name, compared[name])
    if choice is None:
        return None, ""
    got = await ask([here, choice[1]], 1)
    result.measured.update({str(name): measured for name, measured in got.items()})
    verdict = _paired(result, here, choice[1], alpha)
    said = f"against {here}: {verdict.describe('objective')}"
    if verdict.verdict != (HIGHER if result.maximize else LOWER):
        if choice[2] is not None:
            choice[2].reason = f"looked better; one more round of both did not confirm it, {said}"
        return None, ""
    return choice, f"confirmed by one more round of both, {said}"


def _described(result: TuneResult, here: str, name: str, comparison: Comparison) -> str:
    """Why a measured neighbour of a replicated climb was not moved to."""
    got = result.measured[name]
    if got.value is None:
        return f"no usable value ({got.note or 'nothing measured'})"
    return f"{shown(got.value)}; against {here}: {comparison.describe('objective')}"


def _paired(result: TuneResult, here: str, name: str, alpha: float) -> Comparison:
    """`name` against the current point over the rounds both were measured in."""
    mine, theirs = result.measured[here].rounds, result.measured[name].rounds
    shared = sorted(set(mine) & set(theirs))

    def figures(rounds: Mapping[int, float | None]) -> list[float]:
        values = (rounds[r] for r in shared)
        return [math.nan if value is None else value for value in values]

    # A round where either has no value (NaN) is left out by the comparison.
    return compare_paired(figures(mine), figures(theirs), 1 - alpha)


def _favours(comparison: Comparison, maximize: bool) -> bool:
    """Whether the median ratio leans the candidate's way (NaN: nothing to compare)."""
    ratio = comparison.ratio
    return not math.isnan(ratio) and (ratio > 1 if maximize else ratio < 1)


def _farthest(
    sizes: Sequence[int], key: Callable[[Point], str], positions: Mapping[str, Point]
) -> Point | None:
    """The point of an unmeasured setting farthest (the most steps along the axes) from
    every measured one, the first in grid order among equals; None if every setting is
    measured."""
    best: tuple[int, Point] | None = None
    for point in itertools.product(*(range(n) for n in sizes)):
        if key(point) in positions:
            continue
        distance = min(
            sum(abs(a - b) for a, b in zip(point, seen, strict=True)) for seen in positions.values()
        )
        if best is None or distance > best[0]:
            best = (distance, point)
    return None if best is None else best[1]


def _compared(
    got: Measured,
    now: float | None,
    here: str,
    winner: tuple[Point, str, Step | None] | None,
    maximize: bool,
) -> str:
    """Why a measured neighbour was not moved to."""
    if got.value is None:
        return f"no usable value ({got.note or 'nothing measured'})"
    if winner is not None and better(got.value, now, maximize):
        return f"{shown(got.value)}: {winner[1]} improves more"
    return f"{shown(got.value)} does not improve on {here} ({shown(now)})"


def objective_of(
    row: TrialRow | Mapping[str, Any] | None,
    objective: str,
    *,
    qps: float | None = None,
    usd_per_hour: float | None = None,
    safe: bool = True,
) -> Measured:
    """A setting's objective value from its trial's row, or from its settings.csv row in a
    replicated run (None: the trial is missing, failed, or has no usable figure, with why).
    `max_rate` is the SLO search's highest rate meeting the SLO (a setting row: the median
    over replicates); `cost_at_qps` prices ceil(qps / max_rate) replicas
    (`pricing.cost_at_qps`); `p99` is the p99's high bound at the trial's rate, the safe
    end of its interval — the request-level one of a trial, the one over replicates of a
    setting (its point where a run has no intervals) — or, not `safe`, the p99 itself: a
    replicate's value in a round, which a paired comparison or a race's ranks weigh
    against the others of its round (their test is what the bound stood in for)."""
    if row is None:
        return Measured(None, (), "no trial: the setting serves none of the batch sizes")
    replicated = not isinstance(row, TrialRow)  # a settings.csv row
    ids = row.get("replicate_ids") if replicated else row.get("trial_id")
    trials = tuple(str(ids).split(";")) if ids else ()
    status = row.get("status")
    if status not in ("ok", "partial") or (status == "partial" and not replicated):
        return Measured(None, trials, f"trial {status}")
    if objective == "p99" and not safe:
        value = _number(row.get("latency_p99"))
        return Measured(value, trials, "" if value is not None else "no p99")
    if objective == "p99":
        high = _number(row.get("latency_p99_high"))
        bounded = replicated or _number(row.get("confidence_level")) is not None
        if high is None and bounded:
            few = "replicates" if replicated else "requests"
            return Measured(None, trials, f"too few {few} to bound the p99")
        value = high if high is not None else _number(row.get("latency_p99"))
        return Measured(value, trials, "" if value is not None else "no p99")
    rate = _number(row.get("max_rate"))
    if rate is None or rate <= 0:
        return Measured(None, trials, "no rate met the SLO")
    if objective == "max_rate":
        return Measured(rate, trials)
    assert qps is not None and usd_per_hour is not None  # the schema requires both
    return Measured(cost_at_qps(qps, rate, usd_per_hour, row.get("batch_size")), trials)


def _number(value: Any) -> float | None:
    """A finite number, or None (empty cells read back from trials.csv are NaN)."""
    if value is None or isinstance(value, str):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Space:
    """One server's settings matrix as a grid: its axes (the settings it varies, values
    in the scenario's order) and the plan's setting each point means."""

    matrix: SettingsMatrix
    axes: dict[str, list[Any]]
    by_id: dict[str, tuple[int, ServerSetting]]  # plan.settings' index and setting, by id
    by_values: dict[str, str]  # a setting's values (canonical JSON) -> its id

    @classmethod
    def of(cls, plan: Plan, server: ServerSection) -> Space:
        matrix = server.settings_model
        by_id = {s.id: (i, s) for i, s in enumerate(plan.settings) if s.server is server}
        by_values = {_canonical(s.values): sid for sid, (_, s) in by_id.items()}
        return cls(matrix, matrix.axes(), by_id, by_values)

    @property
    def sizes(self) -> list[int]:
        return [len(values) for values in self.axes.values()]

    def key(self, point: Point) -> str:
        """The id of the setting `point` means (points that mean one setting share it)."""
        values = self.matrix.at(
            {name: self.axes[name][j] for name, j in zip(self.axes, point, strict=True)}
        )
        return self.by_values[_canonical(values)]

    def point(self, start: Mapping[str, Any]) -> Point:
        """The point of `start`'s values (the first of each list where it names none)."""
        return tuple(values.index(start.get(n, values[0])) for n, values in self.axes.items())


def _canonical(values: Mapping[str, Any]) -> str:
    """A setting's values as one comparable key (the matrix and the plan build equal
    dicts in different orders)."""
    return json.dumps(values, sort_keys=True)


def round_values(
    trial_id: str,
    rows: Mapping[str, TrialRow],
    objective: str,
    *,
    qps: float | None,
    usd_per_hour: float | None,
) -> dict[int, float | None]:
    """Each replicate's own objective value (`objective_of`, not `safe`) by the round it
    was drawn in — a re-measurement keeps its first measurement's round, where its
    setting's comparisons placed it; None for a replicate that failed (the server's
    doing), NaN for one that ran but was INVALID (the measurement's: e.g. the generator
    fell behind, which on a busy machine happens to the fastest settings first, since its
    lag is judged against their latency — counted as the worst, they lost every race to
    the slowest). Replicates cut short by an interruption are not there: --resume
    measures them."""
    found: dict[int, float | None] = {}
    for row in rows.values():
        if (row.replicate_of or row.trial_id) != trial_id or row.remeasured:
            continue
        if row.status not in ("ok", "failed"):
            continue
        first = row
        while first.remeasure_of is not None and first.remeasure_of in rows:
            first = rows[first.remeasure_of]
        if counted(row):
            value = objective_of(
                row, objective, qps=qps, usd_per_hour=usd_per_hour, safe=False
            ).value
        else:
            value = math.nan if row.status == "ok" else None
        found[int(first.round or 1)] = value
    return found


def neighbourhood(
    point: Point, sizes: Sequence[int], key: Callable[[Point], str]
) -> dict[str, Point]:
    """The setting at `point` and each neighbour's, by key (quick's first step)."""
    found = {key(point): point}
    for other in neighbours(point, sizes):
        found.setdefault(key(other), other)
    return found


async def tune_server(
    plan: Plan,
    server: ServerSection,
    tune: TuneSection,
    run_settings: Callable[[list[int], int], Awaitable[None]],
    *,
    rows: Callable[[], Mapping[str, TrialRow]],
    setting_rows: Callable[[], Mapping[str, Mapping[str, Any]]],
    repeats: int,
    usd_per_hour: float | None,
    stopped: Callable[[], str | None],
) -> dict[str, Any]:
    """Search one server's settings matrix as `tune` says; `run_settings(indices, rounds)`
    measures so many more rounds of those `plan.settings` (in interleaved rounds where
    `repeats` > 1, each setting's replicates numbered on), `rows()` reads the run's trial
    rows by trial id and `setting_rows()` its settings.csv rows (what a replicated run's
    values come from). Returns what tune.json keeps for the server: its axes, the search
    and its steps."""
    space = Space.of(plan, server)
    by_id = space.by_id
    replicated = repeats > 1
    priced = {"qps": tune.qps, "usd_per_hour": usd_per_hour}

    def value(name: Hashable) -> Measured:
        _, setting = by_id[str(name)]
        trial = next((t for t in plan.trials if t.setting is setting), None)
        if trial is None:
            return objective_of(None, tune.objective)
        row = (setting_rows() if replicated else rows()).get(trial.id)
        if row is None:
            return Measured(None, (), "not measured")
        found = objective_of(row, tune.objective, **priced)
        per_round = round_values(trial.id, rows(), tune.objective, **priced)
        return Measured(found.value, found.trials, found.note, per_round)

    async def measure(names: list[Hashable], rounds: int) -> dict[Hashable, Measured]:
        if stopped():
            return {n: Measured(None, (), f"not measured: the run was {stopped()}") for n in names}
        await run_settings([by_id[str(name)][0] for name in names], rounds)
        return {name: value(name) for name in names}

    maximize = MAXIMIZE[tune.objective]
    start = space.point(tune.start)
    if tune.method == "brute":
        every = distinct_points(space.sizes, space.key)
        result = await brute_search(every, measure, maximize=maximize, rounds=repeats)
    elif tune.method == "race":
        candidates = (
            distinct_points(space.sizes, space.key)
            if tune.over == "all"
            else neighbourhood(start, space.sizes, space.key)
        )
        result = await race_search(
            candidates, measure, maximize=maximize, first_rounds=tune.first_rounds,
            max_rounds=repeats, alpha=tune.level, budget=tune.budget_trials,
        )  # fmt: skip
    else:
        result = await quick_search(
            space.sizes, space.key, measure, maximize=maximize, budget=tune.budget_trials,
            start=start, rounds=repeats, alpha=tune.level,
        )  # fmt: skip
    return {"axes": space.axes, "settings": len(by_id), **result.to_json()}
