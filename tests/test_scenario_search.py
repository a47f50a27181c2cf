"""SLO search: bracketing then bisection finds the highest rate that meets the bound.

The measurement is a function of the rate here so the search logic itself is checked
exactly: a latency known exactly is an interval of width zero, judged by the one judge;
the runner feeds it real loads and their intervals.
"""

import asyncio
import math

import pytest

from servebench.common.slo_judge import judge_slo
from servebench.scenario.search import search_max_rate


def known(latency: float, bound: float, low: float | None = None, high: float | None = None):
    """The judgement of an interval (low, high), by default exactly the latency."""
    low = latency if low is None else low
    high = latency if high is None else high
    return judge_slo(low, high, percentile=99.0, bound_s=bound)


def saturating_server(capacity: float, bound: float, base: float = 0.005):
    """p99 grows without bound as the rate approaches `capacity` (an M/M/1-like knee)."""

    async def measure(rate: float):
        latency = base / max(1e-9, 1 - rate / capacity) if rate < capacity else float("inf")
        return latency, known(latency, bound), True, {"rate": rate}

    return measure


def run(measure, **kwargs):
    settings = {"min_rate": 10, "max_rate": 10_000, "precision": 0.02, "max_steps": 30}
    return asyncio.run(search_max_rate(measure, **{**settings, **kwargs}))


def test_finds_the_knee_within_precision():
    # p99 <= 50 ms  <=>  rate <= capacity * (1 - 0.005 / 0.05) = 0.9 * capacity
    result = run(saturating_server(400, 0.05))
    assert result.max_rate == pytest.approx(360, rel=0.02)
    assert result.max_rate <= 360
    rates = [s.rate for s in result.steps]
    assert rates[:5] == [10, 20, 40, 80, 160]  # bracketing doubles first
    # An exact latency is an interval of width zero: met exactly when it is within the bound.
    assert all(s.met == (s.latency <= 0.05) for s in result.steps)
    assert {s.verdict for s in result.steps} == {"met", "missed"}


def test_invalid_runs_count_as_misses():
    async def measure(rate):
        # fast, but the generator cannot offer > 100/s
        return 0.001, known(0.001, 0.05), rate <= 100, None

    result = run(measure)
    assert result.max_rate == pytest.approx(100, rel=0.02)
    unusable = [s for s in result.steps if not s.usable]
    assert unusable and all(s.verdict == "missed" and s.slo.met for s in unusable)


def test_an_undecided_step_is_no_rate_shown_to_meet_the_slo():
    """A point estimate under the bound whose interval reaches over it (or whose high side
    too few requests bound) is not a met step: the bracket closes below it, and the step
    says undecided rather than missed."""

    async def measure(rate):
        if rate < 100:
            return 0.010, known(0.010, 0.05, 0.008, 0.012), True, None
        if rate < 200:
            return 0.040, known(0.040, 0.05, 0.030, 0.060), True, None  # point under the bound
        return 0.045, known(0.045, 0.05, 0.040, math.nan), True, None  # high side unbounded

    result = run(measure, precision=0.01)
    assert result.max_rate is not None and 99 <= result.max_rate < 100
    words = {s.verdict for s in result.steps}
    assert words == {"met", "undecided"}
    assert all(s.met == (s.rate < 100) for s in result.steps)
    assert all(s.latency < 0.05 for s in result.steps)  # the point alone would meet it


def test_a_step_with_too_few_requests_to_bound_it_says_nothing_either_way():
    """Below 40 req/s a step sends too few requests to bound the p99's high side: those
    steps are undecided, not met, and bracketing doubles past them instead of stopping."""

    async def measure(rate):
        if rate < 40:
            return 0.010, known(0.010, 0.05, 0.009, math.nan), True, None
        if rate <= 300:
            return 0.010, known(0.010, 0.05, 0.009, 0.011), True, None
        return 0.090, known(0.090, 0.05, 0.080, 0.100), True, None

    result = run(measure, precision=0.02)
    assert [s.verdict for s in result.steps[:3]] == ["undecided", "undecided", "met"]
    assert [s.rate for s in result.steps[:3]] == [10, 20, 40]
    assert not any(s.met for s in result.steps[:2])
    assert result.max_rate == pytest.approx(300, rel=0.02) and result.max_rate <= 300


def test_none_when_even_the_lowest_rate_misses_and_ceiling_when_never():
    assert run(saturating_server(5, 0.05)).max_rate is None
    result = run(saturating_server(1e9, 0.05), max_rate=1000)
    assert result.max_rate == 1000


def test_step_budget_and_stop_request_are_honoured():
    assert len(run(saturating_server(400, 0.05), max_steps=4).steps) == 4
    calls = []

    async def measure(rate):
        calls.append(rate)
        return 0.001, known(0.001, 0.05), True, None

    asyncio.run(
        search_max_rate(
            measure, min_rate=1, max_rate=1e6, precision=0.01, max_steps=50,
            should_stop=lambda: len(calls) >= 2,
        )
    )  # fmt: skip
    assert len(calls) == 2
