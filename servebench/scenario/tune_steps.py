"""What a configuration search measures and keeps: the vocabulary its methods share.

A search (`scenario.tune`: brute force and the quick climb; `scenario.race`: the race)
asks for settings through `Measure` — measure these settings together for so many more
rounds — and gets back each one's `Measured`: its objective value over everything
measured of it so far, the replicate trials behind it, and its value in each round it
was measured in (what paired comparisons and the race's ranks use: within a round, the
drift shared by the round cancels). Every step it takes goes into a `TuneResult`, which
is what `tune.json` keeps and the report draws.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# What each objective prefers: True where a higher value is better.
MAXIMIZE = {"max_rate": True, "cost_at_qps": False, "p99": False}
# Decisions a step records: quick's climb, brute force's `measured`, and the race's
# `dropped` (significantly worse than the leader), `tied` (a survivor) and `best` (the
# survivor with the best median: the answer).
START, MOVED, STAYED, STOPPED, MEASURED = "start", "moved", "stayed", "stopped", "measured"
RESTARTED = "restarted"
DROPPED, TIED, BEST = "dropped", "tied", "best"

Point = tuple[int, ...]  # an index into each axis' list of values


@dataclass(frozen=True)
class Measured:
    """One setting's measurement: its objective value (None: nothing usable — the setting
    failed, never met the SLO, or has no trial), the trials that gave it, a note, and its
    value in each round it was measured in, by round number (None: that round's replicate
    failed — the setting's worst; NaN: it ran but its measurement is not to be trusted,
    INVALID — no value, so that round is left out of the comparisons it would be in)."""

    value: float | None
    trials: tuple[str, ...] = ()
    note: str = ""
    rounds: Mapping[int, float | None] = field(default_factory=dict)

    @property
    def spent(self) -> bool:
        """Whether it cost a measurement (a setting with no trial costs nothing)."""
        return bool(self.trials)


# Measures `rounds` more rounds of the settings named, together — in a replicated run, in
# interleaved rounds (`scenario.rounds`), each setting's replicates numbered on from those
# it has — and gives each one's measurement over everything measured of it so far.
Measure = Callable[[list[Hashable], int], Awaitable[Mapping[Hashable, Measured]]]


@dataclass
class Step:
    """One step of a search, as `tune.json` keeps it."""

    step: int
    point: list[int]
    setting: str
    value: float | None
    trials: list[str]
    decision: str  # start | moved | stayed | restarted | stopped | measured | dropped | ...
    reason: str

    def moved(self, measured: Measured, reason: str) -> None:
        """Make this step the one a climb moved to, valued on `measured` (its setting's
        latest measurement: a confirmation may have measured it again)."""
        self.value, self.trials = measured.value, list(measured.trials)
        self.decision, self.reason = MOVED, reason


@dataclass
class TuneResult:
    """A search as it went: its steps, every setting's latest measurement, why it stopped,
    the replicate trials it asked for, the settings its answer is chosen among
    (`finalists`: the race's survivors, leader first, where a replicated climb's climbs
    ended; None: any setting measured) and, for a race, each look's test."""

    method: str
    maximize: bool
    steps: list[Step] = field(default_factory=list)
    measured: dict[str, Measured] = field(default_factory=dict)  # by setting key
    stop_reason: str = ""
    replicate_trials: int = 0
    finalists: list[str] | None = None
    answer: str | None = None  # chosen by the search itself (the race's leader)
    looks: list[dict[str, Any]] = field(default_factory=list)

    def record(
        self, point: Sequence[int], name: str, decision: str, reason: str, *, new: bool = True
    ) -> Step:
        """Add a step for the setting `name` at `point`, valued on its latest measurement;
        `new` is false for a step that measured nothing (its trials are an earlier step's)."""
        got = self.measured.get(name, Measured(None))
        trials = list(got.trials) if new else []
        step = Step(len(self.steps), list(point), name, got.value, trials, decision, reason)
        self.steps.append(step)
        return step

    @property
    def trials_spent(self) -> int:
        """Settings measured (what quick's budget counts)."""
        return sum(1 for m in self.measured.values() if m.spent)

    @property
    def best(self) -> tuple[str, Measured] | None:
        """The search's answer: the setting it chose, else the best measured among the
        finalists; None if none was usable."""
        if self.answer is not None:
            return self.answer, self.measured[self.answer]
        usable = [
            (k, m)
            for k, m in self.measured.items()
            if m.value is not None and (self.finalists is None or k in self.finalists)
        ]
        if not usable:
            return None
        sign = 1 if self.maximize else -1
        return max(usable, key=lambda item: sign * item[1].value)  # type: ignore[operator]

    def counting(self, measure: Measure) -> Measure:
        """`measure`, with every replicate trial it is asked for counted here."""

        async def counted(names: list[Hashable], rounds: int) -> Mapping[Hashable, Measured]:
            self.replicate_trials += len(names) * rounds
            return await measure(names, rounds)

        return counted

    def to_json(self) -> dict[str, Any]:
        best = self.best
        found: dict[str, Any] = {
            "method": self.method,
            "maximize": self.maximize,
            "trials_spent": self.trials_spent,
            "replicate_trials": self.replicate_trials,
            "stop_reason": self.stop_reason,
            "best": {"setting": best[0], "value": best[1].value} if best else None,
            "steps": [asdict(s) for s in self.steps],
        }
        if self.finalists is not None:
            found["finalists"] = list(self.finalists)
        if self.looks:
            found["looks"] = self.looks
        return found


def better(value: float | None, than: float | None, maximize: bool) -> bool:
    """Whether `value` strictly improves on `than` (None is worse than any number)."""
    if value is None:
        return False
    if than is None:
        return True
    return value > than if maximize else value < than


def shown(value: float | None) -> str:
    return "nothing usable" if value is None else f"{value:,.6g}"
