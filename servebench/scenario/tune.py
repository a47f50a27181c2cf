"""Configuration search (`tune:`): the best server setting without measuring every one.

A server's settings matrix is a grid: each setting it varies is an axis whose values are
in the order the scenario lists them. `brute` measures every point (today's matrix).
`quick` is a steepest-ascent hill climb, the shape of Triton Model Analyzer's quick search:
it starts at the first value of every list (list the default first), measures each
neighbour of the current point (one setting moved to the next or previous value of its
list), moves to the neighbour that improves the objective most, and stops at a local
optimum (no neighbour improves) or when `budget` measurements are spent. Points that mean
the same setting (Triton's queue delay with batching off) are one point, and no point is
measured twice.

With a budget, a local optimum reached before the budget is spent is not the end: the
user has granted those trials, and on a measured landscape a climb often stops on a bump
of noise or a plateau (batching helps only once both dynamic batching is on and
max_batch_size > 1, so no single move from "off, 1" improves). The climb restarts from
the unmeasured setting farthest (in steps along the axes) from every setting measured so
far — the part of the grid the search knows least, chosen without a random draw so a
search is reproducible — and the answer is the best setting of all the climbs. Without
a budget it stops at the first local optimum, as Model Analyzer's does.

The search is sans-I/O about what a measurement is: `measure(key)` is the caller's (the
scenario runner runs a setting's trial; tests and `benchmarks/tune.py` read a table), and
every step it takes — which setting, the measurement, its objective value, the decision
and why — is kept in order for `tune.json` and the report's path.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servebench.pricing import cost_at_qps
from servebench.results import TrialRow
from servebench.scenario.plan import Plan, ServerSetting
from servebench.scenario.schema import ServerSection, TuneSection
from servebench.servers.settings import SettingsMatrix

# What each objective prefers: True where a higher value is better.
MAXIMIZE = {"max_rate": True, "cost_at_qps": False, "p99": False}
# Decisions a step records.
START, MOVED, STAYED, STOPPED, MEASURED = "start", "moved", "stayed", "stopped", "measured"
RESTARTED = "restarted"

Point = tuple[int, ...]  # an index into each axis' list of values


@dataclass(frozen=True)
class Measured:
    """One setting's measurement: its objective value (None: nothing usable — the setting
    failed, never met the SLO, or has no trial), the trials that gave it, and a note."""

    value: float | None
    trials: tuple[str, ...] = ()
    note: str = ""

    @property
    def spent(self) -> bool:
        """Whether it cost a measurement (a setting with no trial costs nothing)."""
        return bool(self.trials)


@dataclass
class Step:
    """One step of a search, as `tune.json` keeps it."""

    step: int
    point: list[int]
    setting: str
    value: float | None
    trials: list[str]
    decision: str  # start | moved | stayed | stopped | measured (brute)
    reason: str


@dataclass
class TuneResult:
    method: str
    maximize: bool
    steps: list[Step] = field(default_factory=list)
    measured: dict[str, Measured] = field(default_factory=dict)  # by setting key
    stop_reason: str = ""

    @property
    def trials_spent(self) -> int:
        return sum(1 for m in self.measured.values() if m.spent)

    @property
    def best(self) -> tuple[str, Measured] | None:
        """The best setting measured (the search's answer), or None if none was usable."""
        usable = [(k, m) for k, m in self.measured.items() if m.value is not None]
        if not usable:
            return None
        sign = 1 if self.maximize else -1
        return max(usable, key=lambda item: sign * item[1].value)  # type: ignore[operator]

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "method": self.method,
            "maximize": self.maximize,
            "trials_spent": self.trials_spent,
            "stop_reason": self.stop_reason,
            "best": {"setting": best[0], "value": best[1].value} if best else None,
            "steps": [asdict(s) for s in self.steps],
        }


def better(value: float | None, than: float | None, maximize: bool) -> bool:
    """Whether `value` strictly improves on `than` (None is worse than any number)."""
    if value is None:
        return False
    if than is None:
        return True
    return value > than if maximize else value < than


def neighbours(point: Point, sizes: Sequence[int]) -> list[Point]:
    """Each point one step away along one axis, axis by axis, the previous value first."""
    found = []
    for axis, index in enumerate(point):
        for moved in (index - 1, index + 1):
            if 0 <= moved < sizes[axis]:
                found.append((*point[:axis], moved, *point[axis + 1 :]))
    return found


# Measures settings by key, several at once: a replicated run measures a batch in
# interleaved rounds (`scenario.rounds`), so the settings a step compares share their rounds.
Measure = Callable[[list[Hashable]], Awaitable[Mapping[Hashable, Measured]]]


async def brute_search(
    sizes: Sequence[int], key: Callable[[Point], str], measure: Measure, *, maximize: bool
) -> TuneResult:
    """Every distinct point of the grid, measured as one batch, recorded in the matrix's
    order."""
    result = TuneResult("brute", maximize)
    points: dict[str, Point] = {}
    for point in itertools.product(*(range(n) for n in sizes)):
        points.setdefault(key(point), point)
    got = await measure(list(points))
    for name, point in points.items():
        measured = result.measured[name] = got[name]
        result.steps.append(
            Step(len(result.steps), list(point), name, measured.value, list(measured.trials),
                 MEASURED, measured.note or "every setting is measured")
        )  # fmt: skip
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
) -> TuneResult:
    """Steepest-ascent hill climbing from `start` (default: the first value of each axis)
    over the grid `sizes`; `key(point)` names the setting a point means (points with one
    key are one setting) and `measure(key)` measures it, at most once per key."""
    result = TuneResult("quick", maximize)
    current = start if start is not None else tuple(0 for _ in sizes)

    def record(point: Point, name: str, decision: str, reason: str, *, new: bool = True) -> Step:
        """A step; `new` is false for one that measured nothing (its trials are elsewhere)."""
        got = result.measured.get(name, Measured(None))
        trials = list(got.trials) if new else []
        step = Step(len(result.steps), list(point), name, got.value, trials, decision, reason)
        result.steps.append(step)
        return step

    def spent() -> bool:
        return budget is not None and result.trials_spent >= budget

    here = key(current)
    result.measured[here] = (await measure([here]))[here]
    positions = {here: current}  # where each measured setting was first met
    record(current, here, START, "the first value of every setting's list")
    while True:
        candidates: list[tuple[Point, str]] = []
        batch: list[tuple[Point, str]] = []  # candidates not measured yet
        out_of_budget = False
        for point in neighbours(current, sizes):
            name = key(point)
            if name == here or any(name == seen for _, seen in candidates):
                continue  # the same setting as another point (e.g. batching off)
            if name not in result.measured:
                if budget is not None and result.trials_spent + len(batch) >= budget:
                    out_of_budget = True
                    break
                batch.append((point, name))
            candidates.append((point, name))
        got = await measure([name for _, name in batch]) if batch else {}
        steps: dict[str, Step] = {}
        for point, name in batch:
            result.measured[name] = got[name]
            positions[name] = point
            steps[name] = record(point, name, STAYED, "")
        pending = [(point, name, steps.get(name)) for point, name in candidates]
        now = result.measured[here].value
        winner: tuple[Point, str, Step | None] | None = None
        for candidate in pending:
            top = result.measured[winner[1]].value if winner else now
            if better(result.measured[candidate[1]].value, top, maximize):
                winner = candidate
        for _, name, step in pending:
            if step is not None and (winner is None or name != winner[1]):
                step.reason = _compared(result.measured[name], now, here, winner, maximize)
        if winner is not None:
            point, name, step = winner
            why = f"improves most on {here} ({_shown(now)})"
            if step is None:
                record(point, name, MOVED, why + ", measured before", new=False)
            else:
                step.decision, step.reason = MOVED, why
            current, here = point, name
        if winner is None and not out_of_budget and budget is not None and not spent():
            fresh = _farthest(sizes, key, positions)
            if fresh is not None:
                why = (
                    f"local optimum at {here} ({_shown(now)}) with {budget - result.trials_spent}"
                    " of the budget's trials left: restart from the unmeasured setting farthest"
                    " from those measured"
                )
                current, here = fresh, key(fresh)
                result.measured[here] = (await measure([here]))[here]
                positions[here] = current
                record(current, here, RESTARTED, why)
                continue
        if winner is None or out_of_budget or spent():
            if winner is None and not out_of_budget:
                reason = f"local optimum: no neighbour of {here} improves on {_shown(now)}"
                if budget is not None and not spent():  # no setting left to restart from
                    reason = f"every setting measured; {reason}"
            else:
                reason = f"budget of {budget} trials spent"
            result.stop_reason = reason
            record(current, here, STOPPED, reason, new=False)
            return result


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
        return f"{_shown(got.value)}: {winner[1]} improves more"
    return f"{_shown(got.value)} does not improve on {here} ({_shown(now)})"


def _shown(value: float | None) -> str:
    return "nothing usable" if value is None else f"{value:,.6g}"


def objective_of(
    row: TrialRow | Mapping[str, Any] | None,
    objective: str,
    *,
    qps: float | None = None,
    usd_per_hour: float | None = None,
) -> Measured:
    """A setting's objective value from its trial's row, or from its settings.csv row in a
    replicated run (None: the trial is missing, failed, or has no usable figure, with why).
    `max_rate` is the SLO search's highest rate meeting the SLO (a setting row: the median
    over replicates); `cost_at_qps` prices ceil(qps / max_rate) replicas
    (`pricing.cost_at_qps`); `p99` is the p99's high bound at the trial's rate, the safe
    end of its interval — the request-level one of a trial, the one over replicates of a
    setting (its point where a run has no intervals)."""
    if row is None:
        return Measured(None, (), "no trial: the setting serves none of the batch sizes")
    replicated = not isinstance(row, TrialRow)  # a settings.csv row
    ids = row.get("replicate_ids") if replicated else row.get("trial_id")
    trials = tuple(str(ids).split(";")) if ids else ()
    status = row.get("status")
    if status not in ("ok", "partial") or (status == "partial" and not replicated):
        return Measured(None, trials, f"trial {status}")
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


async def tune_server(
    plan: Plan,
    server: ServerSection,
    tune: TuneSection,
    run_settings: Callable[[list[int]], Awaitable[None]],
    *,
    rows: Callable[[], Mapping[str, TrialRow]],
    setting_rows: Callable[[], Mapping[str, Mapping[str, Any]]],
    replicated: bool,
    usd_per_hour: float | None,
    stopped: Callable[[], str | None],
) -> dict[str, Any]:
    """Search one server's settings matrix as `tune` says; `run_settings(indices)` runs the
    trials of those `plan.settings` still to run (in interleaved rounds where `replicated`),
    `rows()` reads the run's trial rows by trial id and `setting_rows()` its settings.csv
    rows (what a replicated run's values come from). Returns what tune.json keeps for the
    server: its axes, the search and its steps."""
    space = Space.of(plan, server)
    by_id = space.by_id

    def value(name: Hashable) -> Measured:
        _, setting = by_id[str(name)]
        trial = next((t for t in plan.trials if t.setting is setting), None)
        if trial is None:
            return objective_of(None, tune.objective)
        row = (setting_rows() if replicated else rows()).get(trial.id)
        if row is None:
            return Measured(None, (), "not measured")
        return objective_of(row, tune.objective, qps=tune.qps, usd_per_hour=usd_per_hour)

    async def measure(names: list[Hashable]) -> dict[Hashable, Measured]:
        if stopped():
            return {n: Measured(None, (), f"not measured: the run was {stopped()}") for n in names}
        await run_settings([by_id[str(name)][0] for name in names])
        return {name: value(name) for name in names}

    maximize = MAXIMIZE[tune.objective]
    if tune.method == "brute":
        result = await brute_search(space.sizes, space.key, measure, maximize=maximize)
    else:
        result = await quick_search(
            space.sizes, space.key, measure, maximize=maximize, budget=tune.budget_trials,
            start=space.point(tune.start),
        )  # fmt: skip
    return {"axes": space.axes, "settings": len(by_id), **result.to_json()}
