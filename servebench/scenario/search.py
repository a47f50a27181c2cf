"""SLO search: the highest open-loop rate whose latency percentile stays within a bound.

Bracketing (double the rate until the SLO breaks), then bisection between the last rate
that met it and the first that did not, until the bracket is narrower than `precision`
of the rate — the shape of perf_analyzer's binary search and of MLPerf's Server-scenario
tuning. A step the caller calls unusable (e.g. too many failed requests) counts as a miss.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SearchStep:
    rate: float
    latency: float  # the SLO percentile measured at this rate, seconds
    met: bool
    result: Any = None  # whatever the measurement returned (a LoadSummary)


@dataclass
class SearchResult:
    steps: list[SearchStep] = field(default_factory=list)

    @property
    def best(self) -> SearchStep | None:
        passing = [s for s in self.steps if s.met]
        return max(passing, key=lambda s: s.rate) if passing else None

    @property
    def max_rate(self) -> float | None:
        return self.best.rate if self.best else None


async def search_max_rate(
    measure: Callable[[float], Awaitable[tuple[float, bool, Any]]],
    bound: float,
    *,
    min_rate: float,
    max_rate: float,
    precision: float,
    max_steps: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> SearchResult:
    """`measure(rate)` returns (percentile latency in s, run valid?, anything to keep)."""
    result = SearchResult()

    async def step(rate: float) -> bool:
        latency, valid, kept = await measure(rate)
        met = valid and latency <= bound
        result.steps.append(SearchStep(rate, latency, met, kept))
        return met

    low, high = None, None
    rate = min_rate
    while len(result.steps) < max_steps and not should_stop():
        if await step(rate):
            low = rate
            if rate >= max_rate:
                return result  # the SLO holds at the ceiling the user allowed
            rate = min(rate * 2, max_rate)
        else:
            high = rate
            break
    if low is None:
        return result  # even the lowest rate misses the SLO
    while (
        high is not None
        and (high - low) > precision * low
        and len(result.steps) < max_steps
        and not should_stop()
    ):
        middle = (low + high) / 2
        if await step(middle):
            low = middle
        else:
            high = middle
    return result
