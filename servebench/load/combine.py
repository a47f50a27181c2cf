"""One summary of a load from its parts' reports and what its stop rules decided.

Every figure is computed on the union of the parts' records (never averaged across parts),
and the stability windows are computed again from that union, exactly: the rule decided on
the merged sketches' percentiles (within 1 %, `load.rules`), the summary shows the records'.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from servebench.common.verdict_codes import VerdictCode
from servebench.load.engine import EngineReport
from servebench.load.plan import LoadPlan
from servebench.load.rules import RulesOutcome
from servebench.load.stats import Columns, mix_figures, summarize, window_stats
from servebench.load.summary import LoadSummary, WindowStats, judge

log = logging.getLogger(__name__)

# The verdict checks about the generator itself, logged as they are found: a late
# generator is the user's machine to fix, not the server's result.
_GENERATOR_LATE = {VerdictCode.RATE_SHORT, VerdictCode.LAG_HIGH, VerdictCode.LATE_SENDS}


def summarize_reports(
    plan: LoadPlan, reports: Sequence[EngineReport], rules: RulesOutcome
) -> LoadSummary:
    """One summary from the reports of all parts of a load, with its verdict; for a mix of
    named models, with each model's figures besides (`LoadSummary.mix`)."""
    settings = plan.settings
    columns = Columns.concat([r.columns for r in reports])
    windows = rules.windows
    if windows and settings.stability is not None and rules.stable is not None:
        windows = [_exact(w, columns, settings.stability.percentile) for w in windows]
        # The requests of the windows that agreed (or the last ones looked at); a load an
        # early stop or a signal ended first covers every request it measured.
        last = windows[-settings.stability.agree :]
        t0, t1 = last[0].start, last[-1].end
        columns = columns.select((columns.completion >= t0) & (columns.completion < t1))
    target = None
    if settings.arrivals is not None:
        if windows and settings.stability is not None and rules.stable is not None:
            t0, t1 = windows[-settings.stability.agree :][0].start, windows[-1].end
        else:
            firsts = [r.first_offset for r in reports if r.first_offset is not None]
            lasts = [r.last_offset for r in reports if r.last_offset is not None]
            t0, t1 = (min(firsts), max(lasts)) if firsts else (0.0, 0.0)
        if t1 > t0:
            target = settings.arrivals.expected(t0, t1) / (t1 - t0)
    summary = summarize(
        columns,
        mode=settings.mode,
        target_rate=target,
        late_threshold=settings.late_threshold,
        confidence=settings.confidence,
    )
    if len(plan.targets) > 1:
        summary.mix = mix_figures(columns, plan.models, [t.weight for t in plan.targets])
    summary.load = settings.describe()
    summary.concurrency = settings.concurrency
    summary.batch_size = settings.batch_size
    summary.generators = settings.generators
    summary.windows = list(windows)
    summary.stable = rules.stable
    if rules.early_stop is not None:
        summary.slo_confidence_level = rules.early_stop.level(int(summary.ok))
    stopped = [r for r in reports if r.stop_reason]
    unreachable = any(r.stop_code == VerdictCode.SERVER_UNREACHABLE for r in stopped)
    decided = bool(stopped) and all(r.stop_code == VerdictCode.SLO_DECIDED for r in stopped)
    judge(
        summary,
        late_threshold=settings.late_threshold,
        late_limit=settings.late_limit,
        max_error_share=settings.max_error_share,
        rate_tolerance=settings.rate_tolerance,
        lag_ratio=settings.lag_ratio,
        stop_reason="; ".join(dict.fromkeys(r.stop_reason for r in stopped)) or None,
        stop_code=VerdictCode.SERVER_UNREACHABLE
        if unreachable
        else (VerdictCode.SLO_DECIDED if decided else VerdictCode.STOPPED_EARLY),
    )
    found = zip(
        summary.reason_codes + summary.warning_codes,
        summary.reasons + summary.warnings,
        strict=True,
    )
    for code, text in found:
        if code in _GENERATOR_LATE:
            log.warning("load %s", text)
    return summary


def _exact(window: WindowStats, columns: Columns, percentile: float) -> WindowStats:
    """A window's figures from the records that completed in it."""
    mine = columns.select((columns.completion >= window.start) & (columns.completion < window.end))
    return window_stats(window.index, mine, window.start, window.end, percentile)
