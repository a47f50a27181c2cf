"""The one judge of "meets the SLO": met, missed or undecided, from an interval.

An SLO says "the p-th percentile of latency is at most B". A measurement never knows the
percentile, only an interval that holds it at some confidence, so the judge looks at the
interval, never at a point value: **met** when its high end is at or under B, **missed**
when its low end is over B, **undecided** when it straddles B. A side too few requests
bound (NaN) decides nothing. Always on the SLO's own percentile: a p95 SLO is judged on a
p95 interval, wherever the question is asked.

Every caller asks here (tests/test_one_judge.py keeps latency-versus-bound comparisons out
of the rest of servebench), whatever its interval comes from:

- one run's requests (`judge_latencies`): the distribution-free interval of
  `common.quantiles.percentile_bounds` — trials.csv's `slo_met`, SLO-search steps, Locust
  rows. It says nothing about a re-run (another tenant, where threads land): a decision
  from one run carries the warning code `single_run`;
- replicates of a setting (`judge_slo` with `replicates=R`): an interval over R runs'
  percentiles, which does cover a re-run;
- counts during a load (`judge_counts`): how many requests so far are at or under the
  bound, at the level an early stop's look may spend (`load.error_spending`).

Defined in `common` because producers (`load`, `scenario`, `trial_row`, `pricing`) and
readers (`analysis`, `recommend`) all decide the same question.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servebench.common.quantiles import (
    MET,
    MISSED,
    UNDECIDED,
    decides,
    percentile_bounds,
    requests_to_decide,
)
from servebench.common.verdict_codes import VerdictCode

# Every word a judgement can say.
VERDICTS = (MET, MISSED, UNDECIDED)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np


@dataclass(frozen=True)
class Judgement:
    """What the judge decided, and on what: the verdict word (`quantiles.MET`, `MISSED`,
    `UNDECIDED`), the SLO's percentile and bound (s), the interval (low, high, s; NaN on a
    side nothing bounds, and both NaN from counts, which say only on which side of the
    bound each end lies), its two-sided `level` where known, how many requests would
    decide it where the caller had them, and the codes (`VerdictCode`) that qualify it."""

    verdict: str
    percentile: float
    bound_s: float
    low: float = math.nan
    high: float = math.nan
    level: float | None = None
    requests_to_decide: int | None = None
    codes: tuple[str, ...] = ()

    @property
    def met(self) -> bool:
        return self.verdict == MET


def judge_slo(
    low: float,
    high: float,
    *,
    percentile: float,
    bound_s: float,
    replicates: int = 1,
    level: float | None = None,
    requests_to_decide: int | None = None,
) -> Judgement:
    """Judge the interval (low, high) of the `percentile`-th latency against `bound_s`.

    `replicates` is how many runs the interval spans: 1 (one run's requests) says nothing
    about a re-run, and the judgement carries `VerdictCode.SINGLE_RUN`.
    """
    codes = _codes(percentile, bound_s, replicates)
    if not math.isnan(high) and high <= bound_s:
        verdict = MET
    elif not math.isnan(low) and low > bound_s:
        verdict = MISSED
    else:
        verdict = UNDECIDED
    return Judgement(
        verdict, percentile, bound_s, float(low), float(high), level, requests_to_decide, codes
    )


def judge_latencies(
    latencies: np.ndarray | Sequence[float], *, percentile: float, bound_s: float, level: float
) -> Judgement:
    """Judge one run's successful requests: the percentile's interval at `level` from
    its order statistics, with the request count that would decide it if the share over
    the bound stayed as measured. No request is a miss (no latency meets anything), with
    `VerdictCode.NO_REQUESTS`."""
    import numpy as np

    values = np.asarray(latencies, dtype=np.float64)
    if values.size == 0:
        codes = (VerdictCode.NO_REQUESTS.value, *_codes(percentile, bound_s, 1))
        return Judgement(MISSED, percentile, bound_s, level=level, codes=codes)
    low, high = percentile_bounds(values, percentile, level)
    n = int(values.size)
    over = n - count_at_or_under(values, bound_s)
    return judge_slo(
        float(low),
        float(high),
        percentile=percentile,
        bound_s=bound_s,
        level=level,
        requests_to_decide=requests_to_decide(n, over, percentile, level),
    )


def judge_counts(
    n: int, at_or_under: int, *, percentile: float, bound_s: float, level: float
) -> Judgement:
    """Judge n requests of which `at_or_under` were at or under the bound, at `level`:
    the same decision `judge_latencies` makes on those latencies (the interval's high end
    is the h-th smallest latency, at or under the bound exactly when at least h requests
    are), without sorting them — what a look during a load can afford."""
    codes = _codes(percentile, bound_s, 1)
    decided = decides(n, at_or_under, percentile, level)
    return Judgement(decided or UNDECIDED, percentile, bound_s, level=level, codes=codes)


def count_at_or_under(latencies: np.ndarray, bound_s: float) -> int:
    """How many of `latencies` (s) are at or under the bound: the one place a request's
    latency meets the SLO's bound (early stop's running counts, `judge_latencies`)."""
    return int((latencies <= bound_s).sum())


def _codes(percentile: float, bound_s: float, replicates: int) -> tuple[str, ...]:
    """The codes every judgement of this SLO carries, once its figures are checked."""
    if not 0 < percentile <= 100:
        raise ValueError(f"SLO percentile: must be in (0, 100], got {percentile}")
    if not (bound_s > 0 and math.isfinite(bound_s)):
        raise ValueError(f"SLO bound: must be a finite latency > 0 s, got {bound_s!r}")
    if replicates < 1:
        raise ValueError(f"replicates: must be >= 1, got {replicates}")
    return (VerdictCode.SINGLE_RUN.value,) if replicates == 1 else ()
