"""Synthetic landscapes for the configuration searches' tests (no server): a seeded grid of
settings with a known optimum, measured in rounds with per-replicate lognormal noise of a
given coefficient of variation and a drift shared by every setting of a round — what a
replicated run's rounds look like to a search, sans I/O."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from servebench.scenario.tune_steps import Measured, Point

SIZES = (3, 2, 3, 2)  # the shape of benchmarks/tune.py's Triton space: 24 settings


def name(point: Point) -> str:
    return "s" + "".join(map(str, point))


def grid(sizes: Sequence[int] = SIZES) -> dict[str, Point]:
    return {name(p): p for p in itertools.product(*(range(n) for n in sizes))}


def peaked(seed: int, steps: Sequence[float], sizes: Sequence[int] = SIZES) -> dict[str, float]:
    """A cost (lower is better) of 1.0 at a seeded random point of the grid, rising by
    `steps[axis]` (a share) for every step away from it along that axis."""
    rng = np.random.default_rng(seed)
    peak = [int(rng.integers(0, n)) for n in sizes]
    return {
        name(p): 1.0 + sum(abs(a - b) * w for a, b, w in zip(p, peak, steps, strict=True))
        for p in grid(sizes).values()
    }


def tied_set(truth: Mapping[str, float], within: float, *, maximize: bool = False) -> set[str]:
    """The settings whose true value is within `within` (a share) of the optimum's."""
    if maximize:
        top = max(truth.values())
        return {n for n, v in truth.items() if v >= top * (1 - within)}
    best = min(truth.values())
    return {n for n, v in truth.items() if v <= best * (1 + within)}


class Rounds:
    """A `Measure` over `truth`: each asked round draws one drift factor shared by every
    setting measured in it (lognormal, `drift` its sigma) and an independent noise per
    replicate (lognormal with coefficient of variation about `cv`, mean 1); a setting's
    value is its median so far, its rounds every replicate's own value."""

    def __init__(self, truth: Mapping[str, float], *, cv: float, drift: float, seed: int):
        self.truth = truth
        self.cv, self.drift = cv, drift
        self.rng = np.random.default_rng(seed)
        self.rounds: dict[str, dict[int, float | None]] = {n: {} for n in truth}
        self.asked: list[tuple[list[str], int]] = []
        self.number = 0

    async def __call__(self, names: list[Hashable], count: int) -> dict[Hashable, Measured]:
        keys = [str(n) for n in names]
        self.asked.append((keys, count))
        for _ in range(count):
            self.number += 1
            shared = self.rng.lognormal(0.0, self.drift)
            for key in keys:
                noise = self.rng.lognormal(-(self.cv**2) / 2, self.cv)
                self.rounds[key][self.number] = self.truth[key] * shared * noise
        return {n: self.measured(str(n)) for n in names}

    def measured(self, key: str) -> Measured:
        values = list(self.rounds[key].values())
        median = float(np.sort(values)[(len(values) - 1) // 2]) if values else None
        trials = tuple(f"{key}.r{k}" for k in range(1, len(values) + 1))
        return Measured(median, trials, "", dict(self.rounds[key]))

    @property
    def spent(self) -> int:
        """Replicate trials measured."""
        return sum(len(names) * count for names, count in self.asked)
