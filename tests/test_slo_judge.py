"""The one judge of "meets the SLO" (issue 34): met, missed or undecided from an interval of
the SLO's own percentile, never from a point; the same decision from latencies and from
counts; the codes it carries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servebench.common.quantiles import percentile
from servebench.common.slo_judge import judge_counts, judge_latencies, judge_slo
from servebench.common.verdict_codes import VerdictCode


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [
        (0.030, 0.050, "met"),  # the high end at the bound meets it
        (0.030, 0.0501, "undecided"),
        (0.0501, 0.070, "missed"),
        (0.050, 0.070, "undecided"),  # the low end at the bound is not over it
        (0.030, math.nan, "undecided"),  # nothing bounds the high side
        (math.nan, math.nan, "undecided"),
        (0.060, math.nan, "missed"),  # the low side alone shows it over
        (math.nan, 0.040, "met"),
    ],
)
def test_the_interval_decides(low: float, high: float, verdict: str) -> None:
    judged = judge_slo(low, high, percentile=99.0, bound_s=0.050)
    assert judged.verdict == verdict and judged.met == (verdict == "met")
    assert (judged.percentile, judged.bound_s) == (99.0, 0.050)


def test_one_run_carries_a_warning_and_replicates_do_not() -> None:
    one = judge_slo(0.01, 0.02, percentile=95.0, bound_s=0.05)
    assert one.codes == (VerdictCode.SINGLE_RUN,)
    assert judge_slo(0.01, 0.02, percentile=95.0, bound_s=0.05, replicates=5).codes == ()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"percentile": 0.0, "bound_s": 0.05}, "SLO percentile"),
        ({"percentile": 99.0, "bound_s": 0.0}, "SLO bound"),
        ({"percentile": 99.0, "bound_s": math.inf}, "SLO bound"),
        ({"percentile": 99.0, "bound_s": 0.05, "replicates": 0}, "replicates"),
    ],
)
def test_bad_figures_are_named(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        judge_slo(0.01, 0.02, **kwargs)


def test_a_p95_slo_is_judged_on_the_p95() -> None:
    """3 % of requests slow: the p95 is fast, the p99 slow. A p95 SLO is met, a p99 one
    missed — each on its own percentile's interval."""
    rng = np.random.default_rng(1)
    latencies = np.where(rng.random(5000) < 0.03, 0.200, rng.uniform(0.005, 0.010, 5000))
    p95 = judge_latencies(latencies, percentile=95.0, bound_s=0.050, level=0.95)
    p99 = judge_latencies(latencies, percentile=99.0, bound_s=0.050, level=0.95)
    assert p95.verdict == "met" and p95.high <= 0.050 and p95.percentile == 95.0
    assert p99.verdict == "missed" and p99.low > 0.050


def test_latencies_and_counts_decide_alike() -> None:
    """The interval's ends are order statistics, so counting requests at or under the
    bound decides exactly as comparing the ends with it does — met, missed or not."""
    rng = np.random.default_rng(3)
    seen = set()
    for trial in range(300):
        n = int(rng.integers(50, 3000))
        latencies = rng.lognormal(-4.0, 0.6, n)
        bound = percentile(latencies, 99) * rng.uniform(0.8, 1.25)
        judged = judge_latencies(latencies, percentile=99.0, bound_s=bound, level=0.95)
        under = int((latencies <= bound).sum())
        counted = judge_counts(n, under, percentile=99.0, bound_s=bound, level=0.95)
        assert counted.verdict == judged.verdict, trial
        seen.add(judged.verdict)
    assert seen == {"met", "missed", "undecided"}


def test_one_runs_requests_say_how_many_would_decide() -> None:
    latencies = np.full(400, 0.010)
    latencies[:5] = 0.100  # 1.25 % over a p99 bound: undecided at 400 requests
    judged = judge_latencies(latencies, percentile=99.0, bound_s=0.050, level=0.95)
    assert judged.verdict == "undecided" and judged.level == 0.95
    assert judged.requests_to_decide is not None and judged.requests_to_decide > 400
    assert judged.codes == (VerdictCode.SINGLE_RUN,)


def test_no_request_misses() -> None:
    judged = judge_latencies([], percentile=99.0, bound_s=0.05, level=0.95)
    assert judged.verdict == "missed" and math.isnan(judged.high)
    assert judged.codes == (VerdictCode.NO_REQUESTS, VerdictCode.SINGLE_RUN)
