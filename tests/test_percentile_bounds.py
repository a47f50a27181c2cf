"""Confidence bounds on a percentile (`servebench.common.quantiles.percentile_bounds`) and
the request count that decides an SLO (`requests_to_decide`).

The bounds are checked against the binomial order-statistic formula written out here on
its own (a scan over every rank, not scipy's inverse), and their coverage by simulation.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from servebench.common.quantiles import (
    bound_ranks,
    decides,
    percentile,
    percentile_bounds,
    requests_to_decide,
)


def _formula(values: np.ndarray, q: float, level: float) -> tuple[float, float]:
    """The textbook interval: x_(l) <= ξ_q <= x_(u) with l the largest rank whose
    P(Binomial(n, q) <= l - 1) is at most (1 - level)/2 and u the smallest whose
    P(Binomial(n, q) <= u - 1) is at least (1 + level)/2 (NaN where no rank qualifies)."""
    ordered = np.sort(values)
    n, p, tail = len(ordered), q / 100, (1 - level) / 2
    cdf = {r: binom.cdf(r - 1, n, p) for r in range(1, n + 1)}
    lows = [r for r in cdf if cdf[r] <= tail]
    highs = [r for r in cdf if cdf[r] >= 1 - tail]
    low = ordered[max(lows) - 1] if lows else np.nan
    high = ordered[min(highs) - 1] if highs else np.nan
    return float(low), float(high)


@pytest.mark.parametrize("n", [1, 20, 367, 368, 1000, 2503])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_bounds_are_the_binomial_order_statistics(n: int, level: float) -> None:
    values = np.random.default_rng(n).lognormal(-5, 0.6, size=n)
    qs = [1.0, 50.0, 90.0, 95.0, 99.0, 99.9]
    lows, highs = percentile_bounds(values, qs, level)
    for i, q in enumerate(qs):
        expected = _formula(values, q, level)
        assert percentile_bounds(values, q, level) == pytest.approx(expected, nan_ok=True)
        assert (lows[i], highs[i]) == pytest.approx(expected, nan_ok=True)
        point = percentile(values, q)
        for bound, side in ((lows[i], -1), (highs[i], 1)):  # the estimate lies inside
            assert np.isnan(bound) or side * (bound - point) >= 0


def test_where_a_side_cannot_be_bounded_it_is_nan() -> None:
    values = np.arange(1.0, 368.0)  # 367 values: 0.99^367 > 0.025, one too few for p99's top
    assert np.isnan(percentile_bounds(values, 99)[1])
    assert not np.isnan(percentile_bounds(np.arange(1.0, 369.0), 99)[1])
    assert bound_ranks(368, 99) == (360, 368)
    assert np.isnan(percentile_bounds([], 50)).all()
    with pytest.raises(ValueError, match="confidence level"):
        percentile_bounds(values, 99, level=1.0)


def test_the_interval_covers_the_true_percentile() -> None:
    """2000 seeded samples of 1000 exponential latencies: the 95 % interval of p99 holds
    the true p99 (ln 100) in at least 93 % of them. The bound is conservative (its exact
    coverage here is P(l <= B <= u - 1) >= 95 %); 93 % leaves four binomial standard
    deviations (sqrt(0.95 · 0.05 / 2000) = 0.49 %) for the draw."""
    draws = np.sort(np.random.default_rng(23).exponential(size=(2000, 1000)), axis=1)
    truth = np.log(100.0)
    low, high = bound_ranks(1000, 99.0, 0.95)
    covered = (draws[:, low - 1] <= truth) & (truth <= draws[:, high - 1])
    assert covered.mean() >= 0.93
    for q, truth_q in ((50.0, np.log(2.0)), (90.0, np.log(10.0))):
        low, high = bound_ranks(1000, q, 0.95)
        assert ((draws[:, low - 1] <= truth_q) & (truth_q <= draws[:, high - 1])).mean() >= 0.93


def test_a_trial_right_at_the_slo_needs_more_requests_to_decide() -> None:
    """500 requests whose p99 is the bound itself (4 of them over it, 0.8 %): the point
    estimate meets it but the interval straddles it; at the count `requests_to_decide`
    names, the same share is decided."""
    bound = 0.050
    latency = np.full(500, 0.010)
    latency[-6:-4] = bound  # ranks 495 (the p99) and 496
    latency[-4:] = 0.200
    assert percentile(latency, 99) == bound
    low, high = percentile_bounds(latency, 99)
    assert low <= bound < high
    assert decides(500, 496, 99) is None
    needed = requests_to_decide(500, 4, 99)
    assert needed is not None and needed > 500
    over = round(0.008 * needed)
    assert decides(needed, needed - over, 99) == "met"
    assert requests_to_decide(500, 5, 99) is None  # right at 1 %: no count decides it
    assert decides(5000, 5000 - 150, 99) == "missed"  # 3 % over a p99 bound
    assert requests_to_decide(5000, 150, 99) < 5000
    assert requests_to_decide(500, 0, 99) == 368  # none over: as soon as p99 has a top


def test_the_report_draws_each_p99_interval_as_an_error_bar() -> None:
    import pandas as pd

    from servebench.analysis.figures import throughput_vs_p99

    p99 = np.array([0.010, 0.012, 0.020])
    trials = pd.DataFrame(
        {
            "status": "ok",
            "throughput_ips": [100.0, 200.0, 300.0],
            "latency_p99": p99,
            "link": "direct",
            "model": "m",
            "setting": "s",
            "batch_size": 1,
            "load_level": [100.0, 200.0, 300.0],
            "slo_bound_s": np.nan,
            "latency_p99_low": np.nan,
            "latency_p99_high": np.nan,
        }
    )
    without = throughput_vs_p99(trials)
    trials["latency_p99_low"] = p99 * 0.9
    trials["latency_p99_high"] = [0.011, 0.013, np.nan]  # the last: no upper bound
    with_bars = throughput_vs_p99(trials)
    assert with_bars.count("<path") > without.count("<path")


def _trial_row(latency: np.ndarray, bound_s: float):
    """The trials.csv row of a closed-loop trial whose answered requests had `latency`."""
    from servebench.load.stats import Columns, summarize
    from servebench.trial_row import Slo, TrialCoordinates, build_row

    n = latency.size
    send = np.arange(n, dtype=np.float64) * 0.01
    cols = Columns(
        latency=latency.astype(np.float32),
        lag=np.zeros(n, dtype=np.float32),
        send=send,
        completion=send + latency,
        code=np.zeros(n, dtype=np.int8),
        batch_size=np.ones(n, dtype=np.int32),
    )
    summary = summarize(cols, mode="closed", target_rate=None)
    where = TrialCoordinates(
        "t", 1, "triton", "triton", "triton", "m", 1, "direct", "concurrency", 4.0, "local", "http"
    )
    return build_row(where, summary, slo=Slo(99.0, bound_s))


def test_a_synthetic_trial_at_its_slo_is_undecided_at_500_and_decided_with_enough() -> None:
    """The trial's own row: p99 right at the bound with 500 requests (0.8 % over it) is
    undecided and names the count that would decide it; a trial of that many requests
    with the same share over the bound is met."""
    bound = np.float32(0.050)  # the records keep latencies as float32: compare as stored

    def trial(n: int, over: int) -> np.ndarray:
        latency = np.full(n, 0.010, dtype=np.float32)
        latency[n - over - 2 : n - over] = bound
        latency[n - over :] = 0.200
        return latency

    row = _trial_row(trial(500, 4), float(bound))
    assert row.slo_latency_s == float(bound) and row.slo_met == "undecided"
    needed = row.slo_requests_to_decide
    assert needed is not None and needed > 500
    enough = _trial_row(trial(needed, round(0.008 * needed)), float(bound))
    assert enough.slo_met == "met" and enough.slo_latency_high <= float(bound)
