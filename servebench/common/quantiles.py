"""The one definition of a percentile in servebench: nearest rank.

The p-th percentile of n values is the smallest value with at least p % of the values at
or below it: the value of rank ceil(p / 100 × n) in rising order (numpy's
`method="inverted_cdf"`, definition 1 of Hyndman & Fan). It is what MLPerf LoadGen and
HdrHistogram report, and it is always a latency some request had, never one between two
requests: a row's p99 and the SLO verdict taken from it cannot disagree, and the
empirical CDF drawn from it is the step function the requests make.

Every quantile the project computes comes from here — records' summaries, trials.csv's
`latency_p50 … latency_p99_9` and `slo_latency_s`, SLO search steps, stability windows,
Locust rows, the report's CDF curves and its bootstrap of p50/p99, and the quartiles and
intervals of `servebench overhead` — so that one number has one meaning wherever it is
shown (tests/test_one_percentile.py keeps other percentile calls out of servebench).

How sure a percentile is comes from here too (`percentile_bounds`): a distribution-free
interval from the order statistics, the binomial bound MLPerf LoadGen's early stopping
uses, and `requests_to_decide`, how many requests would settle whether the percentile is
under a bound. Nothing about the latencies' distribution is assumed, only that requests
are independent draws from one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

METHOD = "inverted_cdf"
# numpy is imported in each function, not here: the command line reads this module's
# constants (the default confidence, the decision words) at start-up, through the load
# summary's defaults, and must not pay for numpy to print its help.
# The confidence of every interval servebench reports unless told otherwise.
CONFIDENCE = 0.95
# What an interval says about a bound (trials.csv's `slo_met` words): wholly within it,
# wholly over it, or around it.
MET, MISSED, UNDECIDED = "met", "missed", "undecided"
# `requests_to_decide` looks no further than this many requests.
MAX_REQUESTS_TO_DECIDE = 10**12


def percentile(values: np.ndarray | Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (q in [0, 100]) of `values`; NaN when empty."""
    import numpy as np

    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return float("nan")
    return float(np.percentile(array, q, method=METHOD))


def percentiles(
    values: np.ndarray | Sequence[float], qs: Sequence[float] | np.ndarray, *, axis: int = -1
) -> np.ndarray:
    """Several nearest-rank percentiles at once, along `axis` of a 1-D or 2-D array.

    The result has the percentiles first (shape `(len(qs), …)`), as numpy gives them; an
    empty axis gives NaN for each.
    """
    import numpy as np

    array = np.asarray(values, dtype=np.float64)
    q = np.asarray(qs, dtype=np.float64)
    if array.shape[axis] == 0:
        shape = (*q.shape, *np.delete(array.shape, axis % array.ndim))
        return np.full(shape, np.nan)
    return np.percentile(array, q, axis=axis, method=METHOD)


def bound_ranks(
    n: int, qs: Sequence[float] | np.ndarray | float, level: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """The 1-based ranks (low, high) of the order statistics that bound the q-th percentile
    of n samples with two-sided confidence `level`; 0 where no rank bounds that side.

    If B ~ Binomial(n, q/100) counts the samples at or under the true percentile ξ, then
    x_(r) <= ξ exactly when B >= r, so P(x_(l) <= ξ <= x_(u)) >= P(l <= B <= u - 1). Each
    side leaves at most (1 - level) / 2 out: `low` is the largest rank with
    P(B <= low - 1) <= (1 - level) / 2 and `high` the smallest with
    P(B <= high - 1) >= (1 + level) / 2. The interval covers the true percentile with at
    least `level` probability for any continuous distribution (more where latencies tie).
    """
    import numpy as np

    if not 0 < level < 1:
        raise ValueError(f"confidence level: must be in (0, 1), got {level}")
    from scipy.stats import binom  # scipy.stats takes ~0.3 s to import: only when bounding

    p = np.clip(np.asarray(qs, dtype=np.float64) / 100.0, 0.0, 1.0)
    if n <= 0:
        zero = np.zeros(p.shape, dtype=np.int64)
        return zero, zero.copy()
    tail = (1.0 - level) / 2.0
    # binom.ppf(t) is the smallest k with P(B <= k) >= t.
    first = binom.ppf(tail, n, p)
    below = np.where(binom.cdf(first, n, p) <= tail, first, first - 1)  # largest k, cdf <= tail
    low = below + 1
    high = binom.ppf(1.0 - tail, n, p) + 1
    low = np.where((low >= 1) & (low <= n), low, 0).astype(np.int64)
    high = np.where((high >= 1) & (high <= n), high, 0).astype(np.int64)
    return low, high


def percentile_bounds(
    values: np.ndarray | Sequence[float],
    q: float | Sequence[float] | np.ndarray,
    level: float = CONFIDENCE,
) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
    """The (low, high) confidence interval of the nearest-rank q-th percentile of `values`,
    at two-sided confidence `level`: two of the values themselves (`bound_ranks`).

    `q` may be one percentile (floats back) or several (arrays back, one entry each).
    A side is NaN where too few values bound it: the high side of p99 needs at least 368
    values at 95 % (0.99^n <= 0.025), of p99.9 3,688; the low side of p1 as many. With
    no values both are NaN.
    """
    import numpy as np

    array = np.sort(np.asarray(values, dtype=np.float64))
    low_rank, high_rank = bound_ranks(array.size, q, level)
    padded = np.concatenate(([np.nan], array))  # rank 0 (no bound) reads NaN
    low, high = padded[low_rank], padded[high_rank]
    if np.ndim(q) == 0:
        return float(low), float(high)
    return low, high


def decides(n: int, at_or_under: int, q: float, level: float = CONFIDENCE) -> str | None:
    """Whether n values of which `at_or_under` are at or under a bound show the q-th
    percentile to be under it ("met": the high bound is one of them), over it ("missed":
    the low bound is not), or neither (None)."""
    low, high = bound_ranks(n, q, level)
    if high and high <= at_or_under:
        return MET
    if low and low > at_or_under:
        return MISSED
    return None


def requests_to_decide(n: int, over: int, q: float, level: float = CONFIDENCE) -> int | None:
    """The fewest requests that would decide whether the q-th percentile is under a bound,
    if the share over it stays what n requests showed (`over` of them over the bound):
    the smallest N at which `decides` says met or missed, with round(share × N) over.

    A share right at 1 - q/100 is never decided (None), nor one that needs more than
    MAX_REQUESTS_TO_DECIDE. N is found by doubling then bisection; the binomial ranks
    move in steps, so it can be a request or two off the exact minimum.
    """
    if n <= 0 or not 0 <= over <= n:
        raise ValueError(f"requests_to_decide: need 0 <= over ({over}) <= n ({n}) and n > 0")
    share = over / n
    if math.isclose(share, 1.0 - q / 100.0, rel_tol=0, abs_tol=1e-12):
        return None

    def decided(count: int) -> bool:
        return decides(count, count - round(share * count), q, level) is not None

    high = 1
    while not decided(high):
        high *= 2
        if high > MAX_REQUESTS_TO_DECIDE:
            return None
    low = high // 2  # undecided (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        if decided(middle):
            high = middle
        else:
            low = middle
    return high
