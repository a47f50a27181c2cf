"""What one load run measured, and whether the measurement can be trusted.

Like MLPerf LoadGen, a run ends with an explicit verdict: VALID, or INVALID with the
reasons ("generator fell behind", "unstable", "errors", "stopped early"), plus warnings that
do not invalidate it. Each reason and warning has a stable code beside its text
(`servebench.common.verdict_codes`): programs decide on the codes, people read the text.
Keys follow the trial-summary names of DESIGN.md; every time is in seconds.

Generator lateness: open-loop latency is measured from the intended send time, so a send
that leaves late is charged to the latency and cannot flatter the server. Lateness only
makes a run INVALID when it changes the answer: the generator sent fewer requests than were
scheduled (`rate_tolerance` short), or its lag is a large part of the latencies it measured
(schedule lag p99 above `late_threshold` and above `lag_ratio` of latency p99). More than
`late_limit` of sends later than `late_threshold` is a warning with the figures (MLPerf
LoadGen does not invalidate for lateness either). The defaults pass a quiet 2-core machine
at 2,000 req/s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from servebench.common.quantiles import CONFIDENCE
from servebench.common.verdict_codes import VerdictCode

if TYPE_CHECKING:
    import numpy as np

    from servebench.results import GangRecord

VALID = "VALID"
INVALID = "INVALID"
# A run whose failed requests are more than this share of its requests is INVALID, and an
# SLO search step that fails more is not a rate the server sustains. The one definition:
# load settings, the scenario runner's search and the Locust adapter all use it.
MAX_ERROR_SHARE = 0.01
# The lateness rules' defaults (see above), defined here once: `LoadSettings`, the
# scenario schema's workload and `servebench load`'s options all start from them.
LATE_THRESHOLD = 1e-3  # seconds: a send this late counts as late
LATE_LIMIT = 0.01  # share of late sends above which the run is warned about
RATE_TOLERANCE = 0.05  # share short of the schedule that makes an open-loop run INVALID
LAG_RATIO = 0.5  # schedule lag p99 over this share of latency p99 makes it INVALID
# Early stop's minimums (`settings.EarlyStopSettings`): a load runs at least this long
# and this many answered requests before its SLO question may end it (MLPerf LoadGen's
# min_duration and min_query_count, scaled to servebench's short trials: 500 requests
# give a p99 both bounds at 95 %, which needs 368).
EARLY_STOP_MIN_DURATION = 2.0
EARLY_STOP_MIN_REQUESTS = 500
# A gang's generators (`load.gang`) may start at most this far apart (s): the clock offset's
# uncertainty (half the best round trip to the generator) plus how late it began. 5 ms is a
# few loopback or LAN round trips of Dask's (0.7-0.9 ms measured here on loopback).
START_SKEW_LIMIT = 5e-3


# The latency percentiles a summary reports, by field name; each has a `_low` and `_high`.
PERCENTILE_FIELDS = {
    "latency_p50": 50.0,
    "latency_p90": 90.0,
    "latency_p95": 95.0,
    "latency_p99": 99.0,
    "latency_p99_9": 99.9,
}


@dataclass(frozen=True)
class WindowStats:
    """One stability window: requests that completed in [start, end) (run offsets)."""

    index: int
    start: float
    end: float
    completed: int
    errors: int
    throughput_rps: float
    latency: float  # the stability percentile of this window's latencies


@dataclass
class LoadSummary:
    mode: str  # "open" or "closed"
    count: int
    ok: int
    errors: int
    errors_by_kind: dict[str, int]
    target_rate: float | None
    achieved_rate: float  # requests sent per second (actual send times)
    throughput_rps: float  # successful completions / duration
    throughput_ips: float
    latency_mean: float
    latency_p50: float
    latency_p90: float
    latency_p95: float
    latency_p99: float
    latency_p99_9: float
    latency_max: float
    schedule_lag_p99: float
    late_share: float
    duration: float  # the measured span: first send to last completion, failures included
    error_rate: float = 0.0  # errors / count, shown beside throughput (successes only)
    load: str = ""  # the load in words: "constant 500 req/s", "concurrency 64"
    concurrency: int | None = None
    batch_size: int = 1
    generators: int | None = None  # generators that sent the load, where servebench ran it
    windows: list[WindowStats] = field(default_factory=list)
    stable: bool | None = None
    verdict: str = VALID
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reason_codes: list[str] = field(default_factory=list)  # VerdictCode of each reason
    warning_codes: list[str] = field(default_factory=list)  # VerdictCode of each warning
    stop_reason: str | None = None  # why the load stopped early, if it did
    scheduled_rate: float | None = None  # open loop: requests per second the schedule asked for
    # The client-side split, means over successful requests that the client timed
    # (stats.Columns; NaN where none was): perf_analyzer's Client Send, Network+Server
    # Send/Recv (with the server's own time still in it) and Client Recv.
    client_send_s: float = math.nan
    client_recv_s: float = math.nan
    network_server_s: float = math.nan
    # How sure each latency percentile is: its distribution-free interval at two-sided
    # confidence `confidence_level` (`common.quantiles.percentile_bounds`), NaN on a side
    # too few requests bound (p99's high side needs 368 at 95 %).
    confidence_level: float = CONFIDENCE
    latency_p50_low: float = math.nan
    latency_p50_high: float = math.nan
    latency_p90_low: float = math.nan
    latency_p90_high: float = math.nan
    latency_p95_low: float = math.nan
    latency_p95_high: float = math.nan
    latency_p99_low: float = math.nan
    latency_p99_high: float = math.nan
    latency_p99_9_low: float = math.nan
    latency_p99_9_high: float = math.nan
    # The two-sided level an SLO question of this load is decided at: None is
    # `confidence_level`; with early stop (`load.error_spending`), the level of the look
    # that stopped the load, or of the final look at its end (what earlier looks left).
    slo_confidence_level: float | None = None
    # A weighted mix of models (`load.mix`): per model, its weight, share of the requests,
    # counts and latency p50/p99 (`stats.mix_figures`); None for a load of one model.
    mix: dict[str, dict[str, float | int]] | None = None
    # A load sent by a gang of generators (`load.gang`): the scheduler, the start skew, whether
    # the run is partial (a generator lost) and each generator's clock and figures; None for
    # a load of one process.
    gang: GangRecord | None = None
    # The successful requests' latencies (s, float64) the percentiles above were taken
    # from: any other percentile of the same requests (an SLO's) comes from them too, by
    # the same function (`latency_at`). Not written out.
    latencies: np.ndarray | None = field(default=None, repr=False, compare=False)

    def latency_at(self, q: float) -> float:
        """The q-th latency percentile of the summarized requests, as `latency_p99` is
        computed (`servebench.common.quantiles`): the same number when q is 99."""
        from servebench.common.quantiles import percentile

        return percentile(self.latencies if self.latencies is not None else [], q)

    def latency_bounds_at(self, q: float) -> tuple[float, float]:
        """The (low, high) interval of `latency_at(q)` at this summary's confidence level,
        as the `latency_p*_low/_high` fields are computed."""
        from servebench.common.quantiles import percentile_bounds

        values = self.latencies if self.latencies is not None else []
        low, high = percentile_bounds(values, q, self.confidence_level)
        return float(low), float(high)

    def confidence(self) -> dict[str, Any]:
        """The intervals as `servebench load --json` writes them: {"level": 0.95,
        "latency_p99": [low, high], ...}, None for a side that is not bounded."""
        document: dict[str, Any] = {"level": self.confidence_level}
        for name in PERCENTILE_FIELDS:
            bounds = [getattr(self, f"{name}_low"), getattr(self, f"{name}_high")]
            document[name] = _plain(bounds)
        return document

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON/CSV; NaN becomes None so JSON stays valid."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "latencies"}
        values["windows"] = [asdict(window) for window in self.windows]
        values["gang"] = asdict(self.gang) if self.gang is not None else None
        return {key: _plain(value) for key, value in values.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def judge(
    summary: LoadSummary,
    *,
    late_threshold: float,
    late_limit: float,
    max_error_share: float,
    rate_tolerance: float = RATE_TOLERANCE,
    lag_ratio: float = LAG_RATIO,
    stop_reason: str | None = None,
    stop_code: VerdictCode = VerdictCode.STOPPED_EARLY,
) -> LoadSummary:
    """Set the verdict, its reasons and warnings, each with its code; returns the same
    summary for chaining. `stop_code` says what kind of stop `stop_reason` was: an early
    stop because the SLO was decided (`SLO_DECIDED`) is said, but does not invalidate."""
    reasons = _Findings()
    warnings = _Findings()
    summary.stop_reason = stop_reason
    if stop_reason and stop_code == VerdictCode.SLO_DECIDED:
        warnings.add(stop_code, f"stopped early: {stop_reason}")
    elif stop_reason:
        reasons.add(stop_code, f"stopped early: {stop_reason}")
    if summary.count == 0:
        reasons.add(VerdictCode.NO_REQUESTS, "no requests measured")
    if summary.mode == "open" and summary.count:
        _lateness_reasons(reasons, summary, late_threshold, rate_tolerance, lag_ratio)
        if summary.late_share > late_limit:
            warnings.add(
                VerdictCode.LATE_SENDS,
                f"generator lag: {summary.late_share:.1%} of requests were sent more than "
                f"{late_threshold * 1e3:g} ms late (limit {late_limit:.1%}); schedule lag p99 "
                f"{summary.schedule_lag_p99 * 1e3:.2f} ms, counted in the latencies",
            )
    if summary.count and summary.errors / summary.count > max_error_share:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors_by_kind.items()))
        reasons.add(
            VerdictCode.ERRORS,
            f"errors: {summary.errors} of {summary.count} requests failed "
            f"({summary.errors / summary.count:.2%}, limit {max_error_share:.2%}: {kinds})",
        )
    if summary.stable is False:
        reasons.add(
            VerdictCode.UNSTABLE,
            f"unstable: throughput and latency did not settle within {len(summary.windows)} windows",
        )
    summary.reasons, summary.reason_codes = reasons.texts, reasons.codes
    summary.warnings, summary.warning_codes = warnings.texts, warnings.codes
    summary.verdict = INVALID if reasons.texts else VALID
    return summary


def add_reason(summary: LoadSummary, code: VerdictCode, text: str) -> None:
    """One more reason found after `judge` (a gang's lost generator, its start skew): the
    summary becomes INVALID with it."""
    summary.reason_codes.append(str(code))
    summary.reasons.append(text)
    summary.verdict = INVALID


@dataclass
class _Findings:
    """Reasons (or warnings) as judge finds them: each text with its code, in order."""

    texts: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)

    def add(self, code: VerdictCode, text: str) -> None:
        self.codes.append(str(code))
        self.texts.append(text)


def _lateness_reasons(
    reasons: _Findings,
    summary: LoadSummary,
    late_threshold: float,
    rate_tolerance: float,
    lag_ratio: float,
) -> None:
    """Why the generator's lateness changes the answer, if it does."""
    scheduled, sent = summary.scheduled_rate, summary.achieved_rate
    if scheduled and sent < scheduled * (1 - rate_tolerance):
        reasons.add(
            VerdictCode.RATE_SHORT,
            f"generator fell behind: sent {sent:.1f} req/s of the {scheduled:.1f} scheduled "
            f"({1 - sent / scheduled:.1%} short, limit {rate_tolerance:.0%})",
        )
    lag, tail = summary.schedule_lag_p99, summary.latency_p99
    if math.isfinite(tail) and lag > late_threshold and lag > lag_ratio * tail:
        reasons.add(
            VerdictCode.LAG_HIGH,
            f"generator fell behind: schedule lag p99 {lag * 1e3:.2f} ms is {lag / tail:.0%} "
            f"of latency p99 {tail * 1e3:.2f} ms (limit {lag_ratio:.0%} once over "
            f"{late_threshold * 1e3:g} ms)",
        )
