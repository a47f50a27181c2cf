"""The racing search (`tune: {method: race}`): measure every candidate in rounds, drop those
the rounds show worse, spend the rest of the rounds on the ones left.

irace's race (López-Ibáñez et al. 2016) over a server's settings: the candidates — every
setting of the matrix, or the start and its neighbours — are measured together in a first
block of rounds (`first_rounds`, 5 as irace's first test); then, after that block and after
every further round (one round of every survivor), a look tests the survivors with the
Friedman test over their per-round objective values (blocks = rounds, so the drift a round
shares cancels in its ranks) and, where it rejects, drops every survivor that Conover's
comparison finds worse than the leader (`common.friedman`). The race ends when one setting
remains, when the survivors are still indistinguishable after `max_rounds` rounds (the
scenario's `workload.repeats`: what brute force would spend on every setting), or when the
next round no longer fits the budget (replicate trials, each round costing one per
survivor). The answer is the leader, the survivor with the best rank sum over the rounds
the survivors share (`_ranked`: not the best median, which carries the rounds' drift);
every survivor is the tied set (`finalists`), each valued by its median over its rounds.

Each look tests at the level `common.friedman.look_level` calibrates for the race's
candidates and looks, so that an A/A race — every candidate the same — drops anything at
most `alpha` of the time, however many looks it takes.

A round's value of a setting is its replicate's own objective (the replicate's trial row:
the p99 at the rate, the SLO search's max rate, the cost at qps from it), never the
setting's median: values compared within a round must come from that round. A replicate
with no usable value (failed, never met the SLO) ranks last in its round.

Sans-I/O like the other searches: `measure(names, rounds)` is the caller's; every look —
its statistics, its drops, the survivors after it — goes into the result for tune.json.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from servebench.common.friedman import Look, look, look_level
from servebench.common.quantiles import percentile
from servebench.scenario.tune_steps import (
    BEST,
    DROPPED,
    TIED,
    Measure,
    Measured,
    Point,
    Step,
    TuneResult,
    shown,
)


async def race_search(
    candidates: Mapping[str, Point],
    measure: Measure,
    *,
    maximize: bool,
    first_rounds: int,
    max_rounds: int,
    alpha: float,
    budget: int | None = None,
) -> TuneResult:
    """Race `candidates` (each setting's name and its point, in the matrix's order) as the
    module says; `alpha` is the chance an A/A race drops anything, `budget` the most
    replicate trials it may ask for."""
    result = TuneResult("race", maximize)
    ask = result.counting(measure)
    survivors = list(candidates)
    level = look_level(len(survivors), first_rounds, max_rounds, alpha) if survivors[1:] else 0.0
    first = min(first_rounds, max_rounds)
    fits = first if budget is None else min(first, budget // len(survivors))
    done = 0
    if fits == 0:
        result.stop_reason = (
            f"budget of {budget} replicate trials is less than one round of the "
            f"{len(survivors)} settings"
        )
    else:
        done = fits
        _keep(result, await ask(list(survivors), fits))
        if fits < first:
            result.stop_reason = (
                f"budget of {budget} replicate trials spent before the first test (it needs "
                f"{first} rounds of {len(survivors)} settings)"
            )
    while not result.stop_reason:
        missing = _incomplete(result, survivors, done)
        if missing:
            result.stop_reason = missing
            break
        if len(survivors) > 1 and done >= first:
            survivors = _look(result, candidates, survivors, level, done)
        if len(survivors) == 1:
            result.stop_reason = f"one setting left after {done} rounds"
        elif done >= max_rounds:
            result.stop_reason = (
                f"{len(survivors)} settings indistinguishable after {done} rounds "
                "(workload.repeats, the most a race measures)"
            )
        elif budget is not None and result.replicate_trials + len(survivors) > budget:
            result.stop_reason = (
                f"budget of {budget} replicate trials spent: another round of the "
                f"{len(survivors)} survivors does not fit"
            )
        else:
            done += 1
            _keep(result, await ask(list(survivors), 1))
    _finish(result, candidates, survivors, done)
    return result


def _keep(result: TuneResult, got: Mapping[Hashable, Measured]) -> None:
    for name, measured in got.items():
        result.measured[str(name)] = measured


def _incomplete(result: TuneResult, survivors: list[str], done: int) -> str:
    """Why the rounds asked for are not all measured for every survivor ('' if they are):
    a run that stops mid-race leaves its last round short, and a look on it would compare
    settings over different rounds."""
    for name in survivors:
        measured = result.measured[name]
        if len(measured.rounds) < done:
            note = f": {measured.note}" if measured.note else ""
            return f"round {done} not measured for {name}{note}"
    return ""


def _look(
    result: TuneResult,
    candidates: Mapping[str, Point],
    survivors: list[str],
    level: float,
    done: int,
) -> list[str]:
    """The look after round `done` over every round the survivors share whole (`_blocks`);
    records it and each setting it drops, and returns the survivors after it."""
    badness = _blocks(result, survivors)
    if len(badness) < 2:  # INVALID replicates left too few complete rounds to test
        return survivors
    found: Look = look(badness, level)
    leader = survivors[int(np.argmin(found.rank_sums))]
    kept = [n for n, keep in zip(survivors, found.keep, strict=True) if keep]
    sums = dict(zip(survivors, found.rank_sums, strict=True))
    for name in survivors:
        if name in kept:
            continue
        measured = result.measured[name]
        reason = (
            f"round {done} ({found.rounds} compared): rank sum {sums[name]:g} against the "
            f"leader {leader}'s "
            f"{sums[leader]:g}, beyond Conover's critical difference {found.critical:.3g} "
            f"(Friedman χ² {found.statistic:.3g}, p {found.p:.2g} ≤ {found.level:.2g})"
        )
        result.steps.append(
            Step(len(result.steps), list(candidates[name]), name, _median(measured, result),
                 list(measured.trials), DROPPED, reason)
        )  # fmt: skip
    result.looks.append(_look_json(found, survivors, leader, kept, done))
    return kept


def _look_json(
    found: Look, survivors: list[str], leader: str, kept: list[str], done: int
) -> dict[str, Any]:
    return {
        "round": done,
        "rounds_compared": found.rounds,
        "settings": len(survivors),
        "statistic": found.statistic,
        "p": found.p,
        "level": found.level,
        "rejected": found.rejected,
        "critical": found.critical,
        "leader": leader,
        "rank_sums": dict(zip(survivors, found.rank_sums, strict=True)),
        "dropped": [n for n in survivors if n not in kept],
        "survivors": kept,
    }


def _finish(
    result: TuneResult, candidates: Mapping[str, Point], survivors: list[str], done: int
) -> None:
    """The survivors are the tied set, each setting's value its median over its rounds;
    the answer is the leader, the survivor with the best rank sum over the rounds they
    share (ties: the better median)."""
    for name, measured in list(result.measured.items()):
        result.measured[name] = Measured(
            _median(measured, result), measured.trials, measured.note, measured.rounds
        )
    ranked = _ranked(result, [n for n in survivors if n in result.measured])
    result.finalists = ranked
    result.answer = ranked[0] if ranked else None
    for place, name in enumerate(ranked):
        measured = result.measured[name]
        if place == 0:
            decision = BEST
            reason = (
                f"the leader of the {len(ranked)} survivors: the best rank sum over their "
                f"{done} rounds; median {shown(measured.value)}"
                if len(ranked) > 1
                else f"the one setting left; median {shown(measured.value)}"
            )
        else:
            decision = TIED
            reason = f"not significantly worse than the leader after {done} rounds"
        result.record(candidates[name], name, decision, reason)


def _ranked(result: TuneResult, survivors: list[str]) -> list[str]:
    """The survivors, leader first: by their mean rank within the rounds they share, then
    by median.

    Not by median alone: a setting's median over rounds carries the drift of the rounds
    its middle values came from, while ranks within a round cancel it: on the synthetic
    landscape of tests/test_race.py (10 % drift between rounds, 5 % noise) the best rank
    sum lies in the true tied set in 198 of 200 races, the best median in 187. A round
    where some have no value (INVALID) ranks those that have one, each rank scaled to the
    round's size — (rank − ½) / n — so it still counts; over whole rounds this orders the
    settings as their rank sums do."""
    from scipy.stats import rankdata

    if len(survivors) <= 1:
        return list(survivors)
    shared = _shared_rounds(result, survivors)
    scaled: list[list[float]] = [[] for _ in survivors]
    for number in shared:
        row = np.array([_badness(result.measured[n].rounds[number], result.maximize)
                        for n in survivors])  # fmt: skip
        present = ~np.isnan(row)
        if present.sum() < 2:
            continue
        ranks = (rankdata(row[present]) - 0.5) / int(present.sum())
        for i, rank in zip(np.flatnonzero(present), ranks, strict=True):
            scaled[i].append(float(rank))
    means = [float(np.mean(one)) if one else math.inf for one in scaled]
    medians = [_badness(result.measured[n].value, result.maximize) for n in survivors]
    order = sorted(range(len(survivors)), key=lambda i: (means[i], medians[i]))
    return [survivors[i] for i in order]


def _shared_rounds(result: TuneResult, survivors: list[str]) -> list[int]:
    """The rounds every one of `survivors` was measured in, in order."""
    return sorted(set.intersection(*(set(result.measured[n].rounds) for n in survivors)))


def _blocks(result: TuneResult, survivors: list[str]) -> np.ndarray:
    """The survivors' values as lower-is-better (rounds × survivors) over the rounds every
    one of them has a value in that is not NaN (INVALID: no measurement to compare, and
    Friedman's blocks must be whole); a failed replicate stays in as the worst."""
    shared = _shared_rounds(result, survivors)
    rows = [
        [_badness(result.measured[n].rounds[r], result.maximize) for n in survivors] for r in shared
    ]
    whole = [row for row in rows if not any(math.isnan(v) for v in row)]
    return np.array(whole, dtype=float).reshape(len(whole), len(survivors))


def _badness(value: float | None, maximize: bool) -> float:
    """A round's value as lower-is-better: a failed replicate (None) the worst, an
    INVALID one (NaN) none."""
    if value is None:
        return math.inf
    return -value if maximize else value


def _median(measured: Measured, result: TuneResult) -> float | None:
    """The nearest-rank median of a setting's round values, a failed round counted as the
    worst and an INVALID one left out (None if the median is a failed round, or no round
    has a value)."""
    values = [_badness(v, result.maximize) for v in measured.rounds.values()]
    values = [v for v in values if not math.isnan(v)]  # INVALID rounds: no value
    if not values:
        return None
    middle = percentile(values, 50)
    if math.isinf(middle):
        return None
    return -middle if result.maximize else middle
