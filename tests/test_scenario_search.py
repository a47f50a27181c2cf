"""SLO search: bracketing then bisection finds the highest rate that meets the bound.

The measurement is a function of the rate here so the search logic itself is checked
exactly; the runner feeds it real loads.
"""

import asyncio

import pytest

from servebench.scenario.search import search_max_rate


def saturating_server(capacity: float, base: float = 0.005):
    """p99 grows without bound as the rate approaches `capacity` (an M/M/1-like knee)."""

    async def measure(rate: float):
        latency = base / max(1e-9, 1 - rate / capacity) if rate < capacity else float("inf")
        return latency, True, {"rate": rate}

    return measure


def run(measure, bound, **kwargs):
    settings = {"min_rate": 10, "max_rate": 10_000, "precision": 0.02, "max_steps": 30}
    return asyncio.run(search_max_rate(measure, bound, **{**settings, **kwargs}))


def test_finds_the_knee_within_precision():
    # p99 <= 50 ms  <=>  rate <= capacity * (1 - 0.005 / 0.05) = 0.9 * capacity
    result = run(saturating_server(400), 0.05)
    assert result.max_rate == pytest.approx(360, rel=0.02)
    assert result.max_rate <= 360
    rates = [s.rate for s in result.steps]
    assert rates[:5] == [10, 20, 40, 80, 160]  # bracketing doubles first
    assert all(s.met == (s.latency <= 0.05) for s in result.steps)


def test_invalid_runs_count_as_misses():
    async def measure(rate):
        return 0.001, rate <= 100, None  # fast, but the generator cannot offer > 100/s

    assert run(measure, 0.05).max_rate == pytest.approx(100, rel=0.02)


def test_none_when_even_the_lowest_rate_misses_and_ceiling_when_never():
    assert run(saturating_server(5), 0.05).max_rate is None
    result = run(saturating_server(1e9), 0.05, max_rate=1000)
    assert result.max_rate == 1000


def test_step_budget_and_stop_request_are_honoured():
    assert len(run(saturating_server(400), 0.05, max_steps=4).steps) == 4
    calls = []

    async def measure(rate):
        calls.append(rate)
        return 0.001, True, None

    asyncio.run(
        search_max_rate(
            measure, 0.05, min_rate=1, max_rate=1e6, precision=0.01, max_steps=50,
            should_stop=lambda: len(calls) >= 2,
        )
    )  # fmt: skip
    assert len(calls) == 2
