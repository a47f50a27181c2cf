"""The configuration search's logic on synthetic objective tables (no server): it finds the
optimum of a unimodal table, stops at a local optimum (or, with budget left, restarts from
the setting farthest from those measured), respects the budget, never measures a setting
twice, and records every step."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from servebench.scenario.tune import (
    MOVED,
    RESTARTED,
    START,
    STAYED,
    STOPPED,
    Measured,
    Point,
    TuneResult,
    brute_search,
    distinct_points,
    neighbours,
    quick_search,
)

SIZES = (3, 2, 3, 2)  # the shape of benchmarks/tune.py's Triton space


def _name(point: Point) -> str:
    return "s" + "".join(map(str, point))


def _run(
    table: Callable[[Point], float | None],
    *,
    maximize: bool = True,
    budget: int | None = None,
    key: Callable[[Point], str] = _name,
    sizes: tuple[int, ...] = SIZES,
) -> tuple[TuneResult, list[str]]:
    points: dict[str, Point] = {}
    for point in itertools.product(*(range(n) for n in sizes)):
        points.setdefault(key(point), point)
    calls: list[str] = []

    async def measure(names: list[str], rounds: int) -> dict[str, Measured]:
        calls.extend(names)
        return {name: Measured(table(points[name]), (f"t-{name}",)) for name in names}

    result = asyncio.run(quick_search(sizes, key, measure, maximize=maximize, budget=budget))
    return result, calls


def _unimodal(point: Point) -> float:
    """A peak at (2, 1, 1, 0): the value falls with the distance from it."""
    peak = (2, 1, 1, 0)
    return 100.0 - sum(abs(a - b) * w for a, b, w in zip(point, peak, (10, 7, 3, 5), strict=True))


def test_quick_finds_the_optimum_of_a_unimodal_table() -> None:
    result, calls = _run(_unimodal)
    assert result.best == ("s2110", Measured(100.0, ("t-s2110",)))
    assert result.stop_reason.startswith("local optimum")
    assert len(calls) < 24  # fewer than the whole grid


def test_quick_minimizes_when_lower_is_better() -> None:
    result, _ = _run(lambda p: -_unimodal(p), maximize=False)
    assert result.best is not None and result.best[0] == "s2110"


def test_quick_stops_at_a_local_optimum() -> None:
    result, _ = _run(_two_peaks)
    assert result.best is not None and result.best[0] == "s0001"
    assert result.steps[-1].decision == STOPPED
    assert "local optimum" in result.steps[-1].reason


def _two_peaks(point: Point) -> float:
    """A small peak next to the first values, the global one in the far corner."""
    return {(0, 0, 0, 1): 50.0, (2, 1, 2, 1): 99.0}.get(point, 10.0)


def test_with_budget_left_quick_restarts_at_the_farthest_setting() -> None:
    result, calls = _run(_two_peaks, budget=14)
    restarts = [s for s in result.steps if s.decision == RESTARTED]
    # The first climb stops at (0, 0, 0, 1); the grid's far corner from everything it
    # measured is (2, 1, 2, 0), and its climb finds the global peak next to it.
    assert restarts and restarts[0].point == [2, 1, 2, 0]
    assert "local optimum at s0001" in restarts[0].reason
    assert result.best is not None and result.best[0] == "s2121"
    assert len(calls) == len(set(calls)) == result.trials_spent <= 14
    # Every measured setting is one step of the record, in the order it was measured.
    assert [s.setting for s in result.steps if s.trials] == calls


def test_a_restart_is_never_at_a_setting_already_measured() -> None:
    # A budget larger than the grid: the climbs restart until every setting is measured.
    result, calls = _run(_two_peaks, budget=100)
    assert sorted(calls) == sorted({_name(p) for p in itertools.product(*map(range, SIZES))})
    assert result.stop_reason.startswith("every setting measured")
    assert result.best is not None and result.best[0] == "s2121"


def test_a_local_optimum_that_spends_the_budget_exactly_says_so() -> None:
    # 1 start + 4 neighbours, then 3 new neighbours of (0, 0, 0, 1): 8 trials, none left.
    result, calls = _run(_two_peaks, budget=8)
    assert len(calls) == 8
    assert result.stop_reason.startswith("local optimum: no neighbour of s0001")


def test_without_a_budget_quick_never_restarts() -> None:
    result, _ = _run(_two_peaks)
    assert all(s.decision != RESTARTED for s in result.steps)


def test_quick_respects_the_budget() -> None:
    for budget in (1, 2, 4, 6):
        result, calls = _run(_unimodal, budget=budget)
        assert len(calls) == result.trials_spent <= budget
        assert result.stop_reason == f"budget of {budget} trials spent"


def test_quick_never_measures_a_setting_twice() -> None:
    # Axis 2 means nothing when axis 1 is at 0 (Triton's queue delay with batching off):
    # those points are one setting, measured once.
    def key(point: Point) -> str:
        return _name(point if point[1] else (point[0], 0, 0, point[3]))

    result, calls = _run(lambda p: float(sum(p)), key=key)
    assert len(calls) == len(set(calls))
    assert result.best is not None and result.best[0] == "s2121"


def test_quick_records_every_step() -> None:
    result, calls = _run(_unimodal)
    measured = [s for s in result.steps if s.trials]
    assert [s.setting for s in measured] == calls
    assert [s.step for s in result.steps] == list(range(len(result.steps)))
    assert result.steps[0].decision == START and result.steps[0].point == [0, 0, 0, 0]
    assert {s.decision for s in result.steps[1:-1]} <= {MOVED, STAYED}
    assert all(s.reason for s in result.steps)
    # Each move goes to a neighbour of the point before it, and improves on it.
    path = [s for s in result.steps if s.decision in (START, MOVED)]
    for before, after in itertools.pairwise(path):
        assert tuple(after.point) in neighbours(tuple(before.point), SIZES)
        assert after.value is not None and before.value is not None
        assert after.value > before.value
    assert result.to_json()["steps"][0]["decision"] == START


def test_unusable_settings_never_win() -> None:
    # The start has no usable value (e.g. it never met the SLO): any usable neighbour wins.
    result, _ = _run(lambda p: None if p[0] == 0 else float(p[0]))
    assert result.best is not None and result.best[1].value == 2.0


def test_brute_measures_every_distinct_setting_once() -> None:
    calls: list[str] = []

    async def measure(names: list[str], rounds: int) -> dict[str, Measured]:
        found = {}
        for name in names:
            calls.append(name)
            found[name] = Measured(float(len(calls)), (name,))
        return found

    def key(point: Point) -> str:
        return _name(point if point[1] else (point[0], 0, 0, point[3]))

    result = asyncio.run(brute_search(distinct_points(SIZES, key), measure, maximize=True))
    assert len(calls) == len(set(calls)) == 24  # 36 points, 12 the same with axis 1 off
    assert result.trials_spent == 24


def test_objectives_from_a_trial_row() -> None:
    """max_rate is the search's; cost_at_qps prices ceil(qps / max_rate) replicas; p99 is
    its interval's high bound, and no value where the interval has none."""
    from servebench.pricing import cost_at_qps
    from servebench.results import TrialRow
    from servebench.scenario.tune import objective_of

    row = TrialRow(trial_id="t1", status="ok", batch_size=2, max_rate=300.0)
    assert objective_of(row, "max_rate") == Measured(300.0, ("t1",))
    cost = objective_of(row, "cost_at_qps", qps=1000, usd_per_hour=0.5).value
    assert cost == cost_at_qps(1000, 300.0, 0.5, 2) == pytest.approx(4 * 0.5 / 3600 / 2000 * 1e6)
    sure = TrialRow(trial_id="t2", status="ok", latency_p99=0.010, latency_p99_high=0.012,
                    confidence_level=0.95)  # fmt: skip
    assert objective_of(sure, "p99").value == 0.012
    few = TrialRow(trial_id="t3", status="ok", latency_p99=0.010, confidence_level=0.95)
    assert objective_of(few, "p99").value is None
    failed = TrialRow(trial_id="t4", status="failed")
    assert objective_of(failed, "max_rate") == Measured(None, ("t4",), "trial failed")
    assert objective_of(None, "max_rate").value is None
    assert objective_of(TrialRow(trial_id="t5", status="ok"), "max_rate").value is None


# -- a replicated climb: paired moves, confirmed -------------------------------------------------


class _Scripted:
    """A `Measure` whose replicate in round n of setting s is `value(s, n)` (rounds counted
    over every ask), recording each ask."""

    def __init__(self, value: Callable[[str, int], float]) -> None:
        self.value = value
        self.rounds: dict[str, dict[int, float | None]] = {}
        self.asked: list[tuple[list[str], int]] = []
        self.number = 0

    async def __call__(self, names: list[str], count: int) -> dict[str, Measured]:
        self.asked.append((list(names), count))
        for _ in range(count):
            self.number += 1
            for name in names:
                self.rounds.setdefault(name, {})[self.number] = self.value(name, self.number)
        found = {}
        for name in names:
            values = sorted(v for v in self.rounds[name].values() if v is not None)
            trials = tuple(f"{name}.r{k}" for k in range(1, len(self.rounds[name]) + 1))
            found[name] = Measured(
                values[(len(values) - 1) // 2], trials, "", dict(self.rounds[name])
            )
        return found


def _climb(measure: _Scripted, sizes: tuple[int, ...], rounds: int = 5) -> TuneResult:
    return asyncio.run(quick_search(sizes, _name, measure, maximize=False, rounds=rounds))


@pytest.mark.parametrize(("confirming", "moves"), [(0.95, True), (1.1, False)])
def test_a_replicated_climb_moves_only_once_one_more_round_confirms(
    confirming: float, moves: bool
) -> None:
    """Two settings, five rounds: the neighbour measures 10 % cheaper in all five rounds
    it shares with the start, so it looks better; one more round of both decides. Cheaper
    again: six of six rounds, the move is made. Dearer in that round: the six ratios'
    interval holds 1, the climb stays."""

    def value(name: str, number: int) -> float:
        if name == "s0":
            return 1.0
        return confirming if number == 11 else 0.9

    measure = _Scripted(value)
    result = _climb(measure, (2,))
    # The start alone, then start and neighbour together, then one round of both.
    assert measure.asked == [(["s0"], 5), (["s0", "s1"], 5), (["s0", "s1"], 1)]
    step = next(s for s in result.steps if s.setting == "s1")
    if moves:
        assert step.decision == MOVED and "confirmed by one more round" in step.reason
        assert "lower" in step.reason and result.best is not None and result.best[0] == "s1"
    else:
        assert step.decision == STAYED and "did not confirm" in step.reason
        assert "indistinguishable" in step.reason
        assert result.best is not None and result.best[0] == "s0"
        assert result.stop_reason.endswith("beyond the noise")
    assert result.replicate_trials == 5 + 10 + 2


def test_a_replicated_climb_answers_where_it_ended() -> None:
    """A neighbour whose median is lowest but whose rounds do not beat the start's paired
    (its good draws came in rounds the start was dear too) is not the answer."""

    def value(name: str, number: int) -> float:
        drift = 0.8 if number % 2 else 1.25  # odd rounds cheap for everybody
        return {"s0": 1.0, "s1": 1.02}[name] * drift

    result = _climb(_Scripted(value), (2,))
    assert result.finalists == ["s0"] and result.best is not None and result.best[0] == "s0"
    assert result.to_json()["finalists"] == ["s0"]


def test_a_replicated_climb_finds_a_peak_well_beyond_the_noise() -> None:
    from landscapes import Rounds

    truth = {_name(p): 200.0 - _unimodal(p) for p in itertools.product(*map(range, SIZES))}
    measure = Rounds(truth, cv=0.01, drift=0.1, seed=1)
    result = asyncio.run(quick_search(SIZES, _name, measure, maximize=False, rounds=5))
    assert result.best is not None and result.best[0] == "s2110"
    moves = [s for s in result.steps if s.decision == MOVED]
    assert moves and all("confirmed by one more round" in s.reason for s in moves)
    # Each move was confirmed by one round of the current point and the neighbour.
    assert sum(1 for names, count in measure.asked if count == 1) >= len(moves)
    assert result.replicate_trials == measure.spent


def test_a_replicated_climb_rarely_moves_on_a_flat_landscape() -> None:
    """Every setting the same, noise of CV 5 % and a 10 % drift between rounds: a move is
    a difference called where there is none. Five rounds per batch and a confirmation
    round: it moves in at most 5 % of seeds (6 of 300 when written), where the climb of
    one round moves on whatever draw was lowest."""
    from landscapes import Rounds, grid

    moved = 0
    for seed in range(300):
        measure = Rounds(dict.fromkeys(grid(SIZES), 1.0), cv=0.05, drift=0.1, seed=seed)
        result = asyncio.run(quick_search(SIZES, _name, measure, maximize=False, rounds=5))
        moved += any(s.decision == MOVED for s in result.steps)
    assert moved <= 0.05 * 300, moved
