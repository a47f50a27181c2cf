"""Replicates in randomized rounds: the order a replicated run measures its settings in.

With `workload.repeats: R` every trial of the plan (a setting: server setting × model ×
link × batch × load) is measured R times. Measuring all of A, then all of B turns any
drift of the machine (a neighbour starting a job, the page cache filling, thermal
throttling) into a difference between A and B; measuring them in rounds — each round
every setting once, in a fresh random order — spreads the drift over all of them, which
is why Google Benchmark's random interleaving and Abedi & Brecht's randomized rounds
exist. A round's order is drawn from the scenario's seed and the round's number, so a run
is reproducible, and it is recorded in run.json (`rounds`), so `--resume` measures the
replicates still missing in the order the run drew.

Settings that share a server (`group`: the settings of one server section whose kind
serves them side by side, `deploy.ServerGroup`) stay together within a round, in a random
order of their own, and the groups' order is drawn too: switching between settings of one
group costs nothing, while a new group means a server start. No round begins with the
setting the previous one ended with, so no setting is measured twice back to back (unless
the run has a single setting).

A single round (R = 1) keeps the plan's order, as runs did before replicates.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from servebench.scenario.plan import Trial

#: run.json's key for the rounds as drawn: a list of rounds, each a list of replicate ids.
ROUNDS_KEY = "rounds"


@dataclass(frozen=True)
class Replicate:
    """One measurement of a trial: its replicate number, the round and place it runs at,
    and — for a replicate measured again because something disturbed it — which attempt
    this is (0: the first)."""

    trial: Trial
    replicate: int  # 1..R
    round: int  # 1-based
    position: int  # 1-based, within the round
    attempt: int = 0

    @property
    def id(self) -> str:
        return replicate_id(self.trial.id, self.replicate, self.attempt)


def replicate_id(trial_id: str, replicate: int, attempt: int = 0) -> str:
    """The trial_id of one replicate's row and records: the plan's trial id for the first
    (so a run of R = 1 reads as runs always did), `<id>.r<k>` for the k-th, and `.m<n>`
    after it for its n-th re-measurement."""
    base = trial_id if replicate == 1 else f"{trial_id}.r{replicate}"
    return base if attempt == 0 else f"{base}.m{attempt}"


def draw_rounds(
    trials: Sequence[Trial],
    repeats: int,
    seed: int,
    group: Callable[[Trial], Hashable],
    *,
    first: int = 1,
    before: Mapping[str, int] | None = None,
    after: Trial | None = None,
    shuffled: bool | None = None,
) -> list[list[Replicate]]:
    """`repeats` rounds over `trials` (the plan's order), each a random order kept within
    groups, numbered from `first`; round n's order is drawn from the seed and n alone.

    A configuration search asks for its rounds a few at a time (`RoundRunner.more`):
    `before` says how many replicates each trial (by id) has already, so its next are
    numbered on; `after` is the trial the previous round ended with (no round begins with
    it); `shuffled` draws the order even for one round (a replicated run's further round),
    where by default a single round keeps the plan's order, as runs of one round always
    did."""
    done = before or {}
    if not (repeats > 1 if shuffled is None else shuffled):
        return [[Replicate(t, done.get(t.id, 0) + 1, first, i + 1) for i, t in enumerate(trials)]]
    rounds: list[list[Replicate]] = []
    previous = after
    for k in range(1, repeats + 1):
        number = first + k - 1
        order = _round_order(trials, random.Random(f"servebench-rounds:{seed}:{number}"), group)
        if previous is not None and order[0] is previous:
            order = _not_first(order, group)
        rounds.append(
            [Replicate(t, done.get(t.id, 0) + k, number, i + 1) for i, t in enumerate(order)]
        )
        previous = order[-1]
    return rounds


def _round_order(
    trials: Sequence[Trial], rng: random.Random, group: Callable[[Trial], Hashable]
) -> list[Trial]:
    groups: dict[Hashable, list[Trial]] = {}
    for trial in trials:
        groups.setdefault(group(trial), []).append(trial)
    keys = list(groups)
    rng.shuffle(keys)
    order: list[Trial] = []
    for key in keys:
        members = list(groups[key])
        rng.shuffle(members)
        order += members
    return order


def _not_first(order: list[Trial], group: Callable[[Trial], Hashable]) -> list[Trial]:
    """`order` with another trial first, groups kept together: the first group's second
    member swapped to the front, or, for a group of one, that group moved to the end."""
    if len(order) < 2:
        return order  # one setting: its replicates can only follow each other
    if group(order[1]) == group(order[0]):
        return [order[1], order[0], *order[2:]]
    return [*order[1:], order[0]]


def rounds_to_json(rounds: list[list[Replicate]]) -> list[list[str]]:
    return [[replicate.id for replicate in one] for one in rounds]


def rounds_from_json(recorded: object, trials: Sequence[Trial]) -> list[list[Replicate]] | None:
    """The rounds a run recorded, resolved against this plan's trials; None where the
    record is missing or names a trial the plan lacks (then the caller draws anew)."""
    if not isinstance(recorded, list):
        return None
    by_id = {trial.id: trial for trial in trials}
    rounds: list[list[Replicate]] = []
    for number, ids in enumerate(recorded, start=1):
        if not isinstance(ids, list):
            return None
        one = []
        for position, text in enumerate(ids, start=1):
            parsed = _parse(text, by_id)
            if parsed is None:
                return None
            trial, replicate, attempt = parsed
            one.append(Replicate(trial, replicate, number, position, attempt))
        rounds.append(one)
    return rounds


def _parse(text: object, trials: Mapping[str, Trial]) -> tuple[Trial, int, int] | None:
    """A replicate id's trial, replicate number and attempt (`replicate_id` reversed)."""
    if not isinstance(text, str):
        return None
    base, _, rest = text.partition(".")
    trial = trials.get(base)
    if trial is None:
        return None
    replicate, attempt = 1, 0
    for part in rest.split(".") if rest else ():
        if part[:1] == "r" and part[1:].isdigit():
            replicate = int(part[1:])
        elif part[:1] == "m" and part[1:].isdigit():
            attempt = int(part[1:])
        else:
            return None
    return trial, replicate, attempt
