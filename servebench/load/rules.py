"""When a load stops, decided outside the engine: stop rules a coordinator evaluates on the
parts' merged counts (`load.live.MergedCounts`).

Every executor runs one `Coordinator`: one process is a coordinator with one part (its
engine's counts, read in its own loop), a gang's coordinator merges its generators' latest
counts as they publish them. So stability windows and early stop decide on every request of
the load, whichever executor sends it, and their stop goes to every part as a signal's does
(`events.LoadControl`). What the rules do not decide stays with each part: its schedule
(duration and count: every part walks the one global schedule, so they end together without
a message) and a server that is gone (each part sees its own refusals).

- `StabilityRule`: perf_analyzer's stability mode, windows of `window` s from the measured
  window's start, each complete once every part's watermark is past its end; the load ends
  (normally) once the last `agree` agree, or after `max_windows`. A window's percentile is
  the merged sketch's (within 1 %); the summary's windows are computed again from the
  records, exactly (`load.combine`).
- `EarlyStopRule`: ends the load once its SLO question is decided, each look at the level
  the error spending allows it (`load.error_spending`); the counts it reads (answers, and
  answers within the bound) are exact.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from servebench.common.quantiles import MET, UNDECIDED
from servebench.common.slo_judge import judge_counts
from servebench.common.verdict_codes import VerdictCode
from servebench.load.error_spending import ErrorSpending
from servebench.load.events import Events, LoadControl, Progress
from servebench.load.live import PUBLISH_EVERY, CountRules, LiveRate, MergedCounts
from servebench.load.settings import EarlyStopSettings, LoadSettings, StabilitySettings
from servebench.load.stats import agree
from servebench.load.summary import WindowStats

log = logging.getLogger(__name__)

# A rule's request to stop: the reason (None: the load's planned end) and its code.
StopRequest = tuple[str | None, VerdictCode]


def count_rules(settings: LoadSettings) -> CountRules:
    """What each part counts for the rules `settings` asks for."""
    return CountRules(
        bound_s=settings.early_stop.bound_s if settings.early_stop is not None else None,
        window_s=settings.stability.window if settings.stability is not None else None,
        windows_from=settings.warmup,
    )


class StabilityRule:
    def __init__(self, settings: StabilitySettings, measure_from: float) -> None:
        self.settings = settings
        self.measure_from = measure_from
        self.windows: list[WindowStats] = []
        self.stable: bool | None = None

    def due(self) -> float:
        if self.stable is not None:
            return math.inf
        return self.measure_from + (len(self.windows) + 1) * self.settings.window

    def look(self, merged: MergedCounts, now: float) -> StopRequest | None:
        st = self.settings
        while self.stable is None:
            i = len(self.windows)
            start = self.measure_from + i * st.window
            end = start + st.window
            if merged.watermark < end:
                return None
            counts = merged.window(i)
            latency = counts.sketch.get_quantile_value(st.percentile / 100) if counts.ok else None
            self.windows.append(
                WindowStats(
                    index=i,
                    start=start,
                    end=end,
                    completed=counts.ok + counts.errors,
                    errors=counts.errors,
                    throughput_rps=counts.ok / st.window,
                    latency=math.nan if latency is None else latency,
                )
            )
            if len(self.windows) >= st.agree and agree(self.windows[-st.agree :], st.tolerance):
                self.stable = True
            elif len(self.windows) >= st.max_windows:
                self.stable = False
        return (None, VerdictCode.STOPPED_EARLY)  # a normal end: no reason


class EarlyStopRule:
    def __init__(self, settings: EarlyStopSettings, load: LoadSettings) -> None:
        self.settings = settings
        self.load = load
        # Made before the load starts: it imports scipy (0.67 s measured).
        self.spending = ErrorSpending(load.confidence)
        self.decided_level: float | None = None
        self._next = load.warmup + settings.min_duration

    def due(self) -> float:
        return math.inf if self.decided_level is not None else self._next

    def look(self, merged: MergedCounts, now: float) -> StopRequest | None:
        rule = self.settings
        self._next = now + rule.every
        n = merged.ok
        if n < rule.min_requests:
            return None
        level = self.spending.level(self._planned_share(merged, now), n)
        if level is None:
            return None
        judged = judge_counts(
            n, merged.at_or_under, percentile=rule.percentile, bound_s=rule.bound_s, level=level
        )
        if judged.verdict == UNDECIDED:
            return None
        self.decided_level = level
        return (
            f"SLO {judged.verdict}: p{rule.percentile:g} "
            f"{'within' if judged.verdict == MET else 'over'} {rule.bound_s * 1e3:g} ms at "
            f"{_percent(level)} confidence after {n} requests ({self.spending.spent:.2g} of "
            f"the {self.spending.alpha:.2g} error budget spent)",
            VerdictCode.SLO_DECIDED,
        )

    def _planned_share(self, merged: MergedCounts, now: float) -> float:
        """How far through its planned measured window the load is (τ of the error
        spending): the smaller share of its duration and of its count, where it has each
        (it ends once both are reached)."""
        s = self.load
        shares = []
        if s.duration is not None:
            shares.append((now - s.warmup) / s.duration)
        if s.count is not None:
            shares.append(merged.completed / s.count)
        return min(shares, default=1.0)

    def level(self, answered: int) -> float:
        """The level of the SLO question: the deciding look's, else the final look's on
        every answered request (what the earlier looks left)."""
        if self.decided_level is not None:
            return self.decided_level
        return self.spending.final_level(answered)


@dataclass
class RulesOutcome:
    """What the rules decided, for the summary: the stability windows (as the rule saw
    them) and whether they agreed, and early stop's rule (its level of the SLO question)."""

    windows: list[WindowStats] = field(default_factory=list)
    stable: bool | None = None
    early_stop: EarlyStopRule | None = None


class Coordinator:
    """A load's stop rules and live figures over its parts' merged counts. `tick` is called
    with every part's latest snapshot and the schedule's offset now (s from its time 0);
    a rule's stop goes to `control` (the load's own), the live figures to `events` about
    every `PUBLISH_EVERY` s. Ticks come from one thread at a time."""

    def __init__(self, settings: LoadSettings, control: LoadControl, events: Events) -> None:
        self.control = control
        self.events = events
        self.stability = (
            StabilityRule(settings.stability, settings.warmup)
            if settings.stability is not None
            else None
        )
        self.early_stop = (
            EarlyStopRule(settings.early_stop, settings)
            if settings.early_stop is not None
            else None
        )
        self.rules: list[StabilityRule | EarlyStopRule] = [
            r for r in (self.stability, self.early_stop) if r is not None
        ]
        self.live = LiveRate()
        self._next_progress = 0.0

    @property
    def watching(self) -> bool:
        """Whether any rule, or the live figures, read the parts' counts at all."""
        return bool(self.rules) or self.events.live

    def due(self) -> float:
        """The schedule offset of the next look any rule or the live figures want."""
        wanted = [r.due() for r in self.rules]
        if self.events.live:
            wanted.append(self._next_progress)
        return min(wanted, default=math.inf)

    def tick(self, merged: MergedCounts, now: float, final: bool = False) -> None:
        if not final and self.control.requested is None:
            for rule in self.rules:
                if now >= rule.due() and (request := rule.look(merged, now)) is not None:
                    self.control.stop(*request)
                    break
        if self.events.live and (final or now >= self._next_progress):
            self._next_progress = now + PUBLISH_EVERY
            self.events.publish(Progress(self.live.figures(merged, max(0.0, now))))

    def outcome(self) -> RulesOutcome:
        st = self.stability
        return RulesOutcome(
            windows=list(st.windows) if st is not None else [],
            stable=st.stable if st is not None else None,
            early_stop=self.early_stop,
        )


def _percent(level: float) -> str:
    """A level near 1 with the digits that tell it from 100 %: 99.976%, 99.99999%."""
    digits = max(0, math.ceil(-math.log10((1.0 - level) * 100.0))) + 1
    return f"{level:.{digits}%}"
