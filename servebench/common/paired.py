"""Is one setting really better than another? Paired comparisons over rounds.

Two settings measured in the same rounds meet the same drift: a round where another tenant
took a core slows both. So they are compared round by round — the ratio of their figures
within each round (B's p99 over A's), which cancels what the round shared — and the
question is whether the median of those ratios is away from 1.

The interval of that median comes from the ratios' order statistics, the same
distribution-free argument as a setting's median over its replicates
(`common.replicates.median_interval`, `quantiles.bound_ranks` at q = 50: the sign test
inverted): nothing is assumed about the ratios' distribution. At a stated level it needs
enough rounds — at 95 %, six at least (with five, even five ratios on one side happen by
chance 6.25 % of the time) — and with fewer it says so instead of deciding: criterion's
"within noise", never a difference the data cannot carry. So an A/A comparison (a
setting against itself) is called different no more often than 1 − level.

`rounds_to_separate` says how many more rounds would likely decide, if the share of
rounds in which B beat A stayed as measured (`quantiles.requests_to_decide` at q = 50).

Two runs of the same scenario are not paired (different rounds, different hours):
`compare_unpaired` compares each one's replicates with a Mann-Whitney U test on the
figures (distribution-free, exact for small samples) and, where the runs are too short
to tell, says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servebench.common.quantiles import CONFIDENCE, bound_ranks, requests_to_decide

# What a comparison says of B against A (for a latency: lower is better).
LOWER, HIGHER, INDISTINGUISHABLE, TOO_FEW = "lower", "higher", "indistinguishable", "too few"


@dataclass(frozen=True)
class Comparison:
    """B against A: the median ratio B/A over the pairs (or, unpaired, the ratio of the
    medians), its interval at `level` (NaN where too few values bound it), the verdict
    (`LOWER`, `HIGHER`: B's figure is below or above A's beyond the noise;
    `INDISTINGUISHABLE`: the interval holds 1; `TOO_FEW`: not enough rounds to decide at
    `level` whatever they showed) and how many values it rests on."""

    verdict: str
    ratio: float
    low: float
    high: float
    level: float
    count: int
    paired: bool = True
    rounds_to_separate: int | None = None  # more rounds that would likely decide (paired)

    @property
    def different(self) -> bool:
        return self.verdict in (LOWER, HIGHER)

    def describe(self, figure: str = "p99", *, more: bool = True) -> str:
        """`p99 12 % lower (7–18 %, R=10)`, or why it is not said (`more`: with how many
        more rounds would likely decide)."""
        n = f"R={self.count}" if self.paired else f"{self.count} replicates"
        if self.verdict == TOO_FEW:
            rounds = self.rounds_to_separate if more else None
            need = (
                f"; about {rounds} more round{'s' * (rounds != 1)} would decide" if rounds else ""
            )
            return f"too few to tell at {self.level:.0%} ({n}){need}"
        if self.verdict == INDISTINGUISHABLE:
            return f"indistinguishable ({n}; {figure} ratio {_interval(self)})"
        change = abs(self.ratio - 1)
        span = sorted(abs(x - 1) for x in (self.low, self.high))
        word = "lower" if self.verdict == LOWER else "higher"
        return (
            f"{figure} {100 * change:.0f} % {word} ({100 * span[0]:.0f}–{100 * span[1]:.0f} %, {n})"
        )


def compare_paired(a: Sequence[float], b: Sequence[float], level: float = CONFIDENCE) -> Comparison:
    """B against A from their figures in the same rounds (`a[i]`, `b[i]`: round i); a
    round where either is missing (NaN, None) or not positive is left out."""
    ratios = sorted(y / x for x, y in zip(a, b, strict=True) if _usable(x) and _usable(y))
    n = len(ratios)
    if n == 0:
        return Comparison(TOO_FEW, math.nan, math.nan, math.nan, level, 0)
    median = ratios[(n - 1) // 2]  # nearest rank, as every percentile in servebench
    low_rank, high_rank = (int(r) for r in bound_ranks(n, 50.0, level))
    over = sum(1 for r in ratios if r > 1.0)
    more = _more_rounds(n, over, level)
    if not low_rank or not high_rank:
        return Comparison(TOO_FEW, median, math.nan, math.nan, level, n, rounds_to_separate=more)
    low, high = ratios[low_rank - 1], ratios[high_rank - 1]
    if high < 1.0:
        verdict = LOWER
    elif low > 1.0:
        verdict = HIGHER
    else:
        verdict = INDISTINGUISHABLE
    return Comparison(verdict, median, low, high, level, n, rounds_to_separate=more)


def compare_unpaired(
    a: Sequence[float], b: Sequence[float], level: float = CONFIDENCE
) -> Comparison:
    """B against A from two sets of replicates measured apart (two runs): the ratio of
    their medians, and a two-sided Mann-Whitney U test at 1 − level (scipy's exact test
    for small samples). The interval is the range of B/A over every pair of replicates —
    what the two runs spanned, a description, not a bound; the verdict is the test's."""
    from scipy.stats import mannwhitneyu  # ~0.3 s to import: only when comparing

    xs = sorted(x for x in a if _usable(x))
    ys = sorted(y for y in b if _usable(y))
    if not xs or not ys:
        return Comparison(TOO_FEW, math.nan, math.nan, math.nan, level, 0, paired=False)
    ratio = ys[(len(ys) - 1) // 2] / xs[(len(xs) - 1) // 2]
    low, high = ys[0] / xs[-1], ys[-1] / xs[0]
    count = min(len(xs), len(ys))
    # The smallest p-value the exact test can give: both samples wholly apart.
    smallest = 2 / math.comb(len(xs) + len(ys), len(xs))
    if smallest > 1 - level:
        return Comparison(TOO_FEW, ratio, low, high, level, count, paired=False)
    p = mannwhitneyu(ys, xs, alternative="two-sided", method="exact").pvalue
    verdict = INDISTINGUISHABLE if p > 1 - level else (LOWER if ratio < 1 else HIGHER)
    return Comparison(verdict, ratio, low, high, level, count, paired=False)


def _more_rounds(n: int, over: int, level: float) -> int | None:
    """Rounds beyond n that would likely decide, if B beat A as often as it did."""
    needed = requests_to_decide(n, over, 50.0, level)
    return None if needed is None else max(needed - n, 0)


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def _interval(c: Comparison) -> str:
    if math.isnan(c.low) or math.isnan(c.high):
        return f"{c.ratio:.2f}"
    return f"{c.ratio:.2f}, {c.low:.2f}–{c.high:.2f}"
