"""Which settings a race drops: the Friedman test over rounds, Conover's comparison with the
leader, and the level each look of a race may use.

A race (`scenario.race`) measures its settings in rounds, every survivor once per round,
and looks again after each round. A look ranks the survivors within each round (a
round's shared drift — another tenant, a warm cache — moves every setting of the round
and cancels in the ranks) and asks Friedman's question: are the settings' rank sums more
different than exchangeable settings would make them? Only if the answer is yes does it
compare each setting with the leader (the lowest rank sum), by Conover's multiple
comparison for Friedman ranks (Conover 1999, "Practical Nonparametric Statistics",
pp. 369-371), and drop those whose rank sum is farther from the leader's than the
critical difference. That is irace's race (López-Ibáñez et al. 2016, `irace`'s
`aux.friedman`), kept for every number of survivors: irace switches to Wilcoxon's test
with two left, but one test throughout is what lets one calibration (below) bound the
whole race's false drops.

**The level of each look.** A race looks after every round, so a level of 5 % per look
drops some setting of an A/A race (every setting the same) far more often than 5 % of the
time: about 18 % over 16 looks (rounds 5 to 20). Bonferroni (5 % / 16 per look) is safe
but four times too strict, since the looks share their rounds. `look_level` finds the
per-look level at which the whole sequence of looks rejects an A/A race at most `alpha`
of the time (with 99 % confidence despite the simulation's own sampling error), by
simulating the test's exact null: when every setting is the same, each
round's ranks are a uniformly random permutation, whatever the figures' distribution —
so the simulation is distribution-free, and seeded, so a resumed race decides as the
first did. Drops happen only after the Friedman test rejects, so the chance that an A/A
race drops anything is that of the sequence's rejection: at most `alpha`.

Written here rather than taken from scipy: scipy's `friedmanchisquare` refuses two
settings and ranks one look at a time; it has neither Conover's comparison nor repeated
looks. The statistic (with the correction for ties) is computed once, below, for the
looks and the simulation alike; scipy gives the ranks, the χ² and t laws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

# Simulated A/A races behind a look level: its chance of a false drop is then known to
# about ±0.2 % at 5 %.
SIMULATIONS = 10_000
# How sure the calibration is that the simulation's own error does not put the rate of
# false drops above `alpha` (Clopper-Pearson, one-sided).
CALIBRATION_CONFIDENCE = 0.99
# Simulated races per batch (bounds the memory of a large race: batch × rounds × settings).
_BATCH = 1_000


@dataclass(frozen=True)
class Look:
    """One look of a race over `rounds` rounds of `settings` survivors: the Friedman
    statistic and its p-value, the level it was tested at, each survivor's rank sum
    (1 = best in a round), Conover's critical difference from the leader's rank sum (None
    where the Friedman test did not reject) and which survivors it keeps."""

    rounds: int
    statistic: float
    p: float
    level: float
    rank_sums: tuple[float, ...]
    critical: float | None
    keep: tuple[bool, ...]

    @property
    def rejected(self) -> bool:
        """Whether the Friedman test found the survivors different at the look's level."""
        return self.critical is not None


def look(badness: np.ndarray, level: float) -> Look:
    """The look over `badness` (rounds × survivors, lower is better; +inf: no value, the
    worst): Friedman at `level`, then Conover's comparison with the leader at `level`."""
    from scipy.stats import rankdata, t

    ranks = rankdata(badness, axis=1)
    rounds, settings = ranks.shape
    statistic, p = friedman(ranks)
    sums = ranks.sum(axis=0)
    if level <= 0 or not p <= level:  # a level of 0: no look may drop
        return Look(rounds, statistic, p, level, tuple(sums), None, (True,) * settings)
    freedom = (rounds - 1) * (settings - 1)
    spread = 2 * (rounds * float((ranks**2).sum()) - float((sums**2).sum())) / freedom
    critical = float(t.ppf(1 - level / 2, freedom)) * math.sqrt(max(spread, 0.0))
    keep = tuple(bool(s - sums.min() <= critical) for s in sums)
    return Look(rounds, statistic, p, level, tuple(sums), critical, keep)


def friedman(ranks: np.ndarray) -> tuple[float, float]:
    """Friedman's statistic over within-round ranks (rounds × settings, average ranks for
    ties) with the correction for ties, and its χ² p-value (1 where every round is one
    tie: nothing to tell)."""
    from scipy.stats import chi2

    rounds, settings = ranks.shape
    sums = ranks.sum(axis=0)
    spread = float(((sums - rounds * (settings + 1) / 2) ** 2).sum())
    ties = sum(
        float((counts**3 - counts).sum())
        for counts in (np.unique(row, return_counts=True)[1] for row in ranks)
    )
    denominator = rounds * settings * (settings + 1) - ties / (settings - 1)
    if denominator <= 0:
        return 0.0, 1.0
    statistic = 12 * spread / denominator
    return statistic, float(chi2.sf(statistic, settings - 1))


@cache  # one race asks once; a benchmark's many races of one shape share it
def look_level(settings: int, first: int, last: int, alpha: float) -> float:
    """The level for each look of a race of `settings` settings that looks after rounds
    `first` to `last`, such that an A/A race drops a setting at some look at most `alpha`
    of the time (0.0: no look could, e.g. two settings over too few rounds)."""
    from scipy.stats import chi2

    rng = np.random.default_rng(0)  # fixed: a resumed race must decide as the first did
    smallest: list[np.ndarray] = []
    looks = np.arange(first, last + 1)
    for start in range(0, SIMULATIONS, _BATCH):
        batch = min(_BATCH, SIMULATIONS - start)
        order = np.tile(np.arange(1, settings + 1, dtype=np.int32), (batch, last, 1))
        sums = np.cumsum(rng.permuted(order, axis=2), axis=1, dtype=np.int64)[:, looks - 1]
        n = looks[None, :]
        statistic = 12 / (n * settings * (settings + 1)) * (sums**2).sum(axis=2) - 3 * n * (
            settings + 1
        )
        smallest.append(chi2.sf(statistic, settings - 1).min(axis=1))
    ordered = np.sort(np.concatenate(smallest))
    allowed = _allowed(alpha)
    # The largest level that no more than `allowed` simulated A/A races reach (the
    # statistic is discrete: many races can share one p-value).
    reached = np.searchsorted(ordered, ordered, side="right")
    fits = ordered[reached <= allowed]
    return float(fits.max()) if fits.size else 0.0


def _allowed(alpha: float) -> int:
    """How many of the simulated A/A races may reject: the most whose Clopper-Pearson
    upper bound (at `CALIBRATION_CONFIDENCE`) on the rate of false drops is still within
    `alpha` — about 4.5 % of them at 5 %, so the simulation's own sampling error does not
    leave a race above its level."""
    from scipy.stats import beta

    allowed = math.floor(alpha * SIMULATIONS)
    while (
        allowed > 0 and beta.ppf(CALIBRATION_CONFIDENCE, allowed + 1, SIMULATIONS - allowed) > alpha
    ):
        allowed -= 1
    return allowed
