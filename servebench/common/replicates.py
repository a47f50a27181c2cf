"""What R replicates of one setting say together: the run, not the request, as the unit.

A trial's request-level interval (`quantiles.percentile_bounds`) treats its requests as
independent draws from one fixed distribution, so it says nothing of what moves a p99
from one trial to the next (a core taken away for tens of milliseconds, another tenant,
where the server's threads land). pyperf, JMH, Google Benchmark, AIPerf and MLPerf make
the run the unit of replication; so does servebench: a setting is measured R times in
interleaved rounds, and what a decision rests on comes from those R values of a
percentile, with nothing assumed about their distribution:

- **the median** of the R values (the setting's figure);
- **an interval for that median** from the replicates' order statistics (the same
  binomial argument as a percentile's: `quantiles.bound_ranks` at q = 50): with R = 6 it
  is [min, max] at 96.9 %, with R = 9 the second smallest to the second largest at
  96.1 %. Below six replicates no pair of order statistics reaches 95 %; [min, max] is
  then the widest there is, and its coverage is stated as it is (R = 5: 93.8 %);
- **a re-run range**, [min, max] of the R values: for exchangeable replicates one more
  replicate lands inside it with probability (R − 1)/(R + 1) (a prediction interval from
  order statistics; 66.7 % for R = 5), which is what "measure it again" is expected to do;
- **the between-replicate coefficient of variation** (sample standard deviation over
  mean) and its band, AIPerf's and pyperf's words: ≤ 5 % quiet, ≤ 10 % moderate,
  ≤ 20 % noisy, above that unstable (pyperf warns at 10 %).

Pure functions of numbers, here at the bottom, so the producer of the setting rows
(`servebench.setting_row`) and the readers of result files (`analysis`) share them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servebench.common.quantiles import CONFIDENCE, bound_ranks, percentile

# The coefficient-of-variation bands, (upper limit, word), rising.
CV_BANDS = ((0.05, "quiet"), (0.10, "moderate"), (0.20, "noisy"))
UNSTABLE = "unstable"


@dataclass(frozen=True)
class ReplicateSummary:
    """One percentile (or any figure) over a setting's replicates."""

    count: int
    median: float
    low: float  # interval of the median (NaN without one: R = 1)
    high: float
    coverage: float  # the interval's coverage probability (NaN without one)
    rerun_low: float  # [min, max]: where one more replicate lands (NaN with R = 1)
    rerun_high: float
    rerun_coverage: float  # (R - 1) / (R + 1)
    cv: float  # between-replicate coefficient of variation (NaN with R < 2)

    @property
    def band(self) -> str | None:
        return cv_band(self.cv)


def summarize(values: Sequence[float], level: float = CONFIDENCE) -> ReplicateSummary:
    """The median, its interval, the re-run range and the CV of `values` (NaNs dropped:
    a replicate without that figure does not vote)."""
    kept = sorted(v for v in values if v is not None and not math.isnan(v))
    n = len(kept)
    if n == 0:
        nan = math.nan
        return ReplicateSummary(0, nan, nan, nan, nan, nan, nan, nan, nan)
    median = percentile(kept, 50)
    low, high, coverage = median_interval(kept, level)
    nan = (math.nan, math.nan, math.nan)
    rerun = (kept[0], kept[-1], (n - 1) / (n + 1)) if n >= 2 else nan
    return ReplicateSummary(
        n, median, low, high, coverage, *rerun, cv=coefficient_of_variation(kept)
    )


def median_interval(
    values: Sequence[float], level: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(low, high, coverage): the narrowest symmetric order-statistic interval of the
    median with coverage >= `level`, or [min, max] with its own coverage where R is too
    small to reach `level`; NaNs with fewer than two values."""
    kept = sorted(values)
    n = len(kept)
    if n < 2:
        return math.nan, math.nan, math.nan
    low_rank, high_rank = (int(r) for r in bound_ranks(n, 50.0, level))
    if not low_rank or not high_rank:
        low_rank, high_rank = 1, n
    return kept[low_rank - 1], kept[high_rank - 1], order_statistic_coverage(n, low_rank, high_rank)


def order_statistic_coverage(n: int, low_rank: int, high_rank: int) -> float:
    """P(x_(low) <= median <= x_(high)) for n draws of a continuous distribution:
    P(low <= B <= high - 1) with B ~ Binomial(n, 1/2)."""
    total = sum(math.comb(n, k) for k in range(low_rank, high_rank))
    return total / 2**n


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over the mean (NaN for fewer than two values or a zero
    mean)."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    if mean == 0:
        return math.nan
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(variance) / abs(mean)


def cv_band(cv: float) -> str | None:
    """quiet | moderate | noisy | unstable for a coefficient of variation (None: NaN)."""
    if cv is None or math.isnan(cv):
        return None
    for limit, word in CV_BANDS:
        if cv <= limit:
            return word
    return UNSTABLE
