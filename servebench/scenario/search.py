"""SLO search: the highest open-loop rate whose latency percentile stays within a bound.

Bracketing (double the rate until the SLO breaks), then bisection between the last rate
that met it and the first that did not, until the bracket is narrower than `precision`
of the rate — the shape of perf_analyzer's binary search and of MLPerf's Server-scenario
tuning. A step the caller calls unusable (e.g. too many failed requests) counts as a miss.

Each step is judged on its SLO percentile's interval (`common.slo_judge`), never on the
point value: a step meets the SLO only when the interval lies within the bound, and
`max_rate` is the highest rate that *met*. An undecided step keeps its own word,
`undecided`, in `search_steps`, and is never a met rate; for the bracket:

- its interval straddles the bound: the SLO is not shown to hold there, so it closes the
  bracket as a miss would (the rate is too close to the edge to call);
- nothing bounds its high side (too few requests for the percentile: a p99 needs 368
  answered requests at 95 %, so a 10 req/s step of 5 s cannot show it met): it says
  nothing either way, and bracketing goes on doubling to a rate that sends enough.

A step cannot be measured longer here (each is one load of the workload's duration);
where steps come out undecided, a longer `duration_s` decides more of them.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from servebench.common.quantiles import MISSED, UNDECIDED
from servebench.common.slo_judge import Judgement

# What `measure(rate)` returns: the step's SLO percentile (s, for people), its judgement,
# whether the step's run is usable at all, and anything to keep (a LoadSummary).
Measurement = tuple[float, Judgement, bool, Any]


@dataclass(frozen=True)
class SearchStep:
    rate: float
    latency: float  # the SLO percentile measured at this rate, seconds
    slo: Judgement  # that percentile's interval judged against the bound
    usable: bool = True  # False: the step's requests failed, or none was measured
    result: Any = None  # whatever the measurement returned (a LoadSummary)

    @property
    def met(self) -> bool:
        return self.usable and self.slo.met

    @property
    def too_few(self) -> bool:
        """Undecided because too few requests bound the percentile's high side."""
        return self.usable and self.slo.verdict == UNDECIDED and math.isnan(self.slo.high)

    @property
    def verdict(self) -> str:
        """met / missed / undecided; an unusable step missed, whatever its latencies."""
        return self.slo.verdict if self.usable else MISSED


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
    measure: Callable[[float], Awaitable[Measurement]],
    *,
    min_rate: float,
    max_rate: float,
    precision: float,
    max_steps: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> SearchResult:
    """`measure(rate)` returns (SLO-percentile latency in s, its judgement, run usable?,
    anything to keep)."""
    result = SearchResult()

    async def step(rate: float) -> SearchStep:
        latency, judged, usable, kept = await measure(rate)
        result.steps.append(SearchStep(rate, latency, judged, usable, kept))
        return result.steps[-1]

    low, high = None, None
    rate = min_rate
    while len(result.steps) < max_steps and not should_stop():
        measured = await step(rate)
        if not (measured.met or measured.too_few):
            high = rate
            break
        if measured.met:
            low = rate
        if rate >= max_rate:
            return result  # the ceiling the user allowed: met there, or never enough requests
        rate = min(rate * 2, max_rate)
    if low is None:
        return result  # no rate up to the first miss met the SLO
    while (
        high is not None
        and (high - low) > precision * low
        and len(result.steps) < max_steps
        and not should_stop()
    ):
        middle = (low + high) / 2
        if (await step(middle)).met:
            low = middle
        else:
            high = middle
    return result
