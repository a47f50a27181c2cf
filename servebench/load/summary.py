"""What one load run measured, and whether the measurement can be trusted.

Like MLPerf LoadGen, a run ends with an explicit verdict: VALID, or INVALID with the
reasons ("generator fell behind", "unstable", "errors", "stopped early"). Keys follow the
trial-summary names of DESIGN.md; every time is in seconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

VALID = "VALID"
INVALID = "INVALID"


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
    achieved_rate: float
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
    processes: int = 1
    windows: list[WindowStats] = field(default_factory=list)
    stable: bool | None = None
    verdict: str = VALID
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON/CSV; NaN becomes None so JSON stays valid."""
        return {key: _plain(value) for key, value in asdict(self).items()}


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
    stop_reason: str | None = None,
) -> LoadSummary:
    """Set the verdict and its reasons; returns the same summary for chaining."""
    reasons: list[str] = []
    if stop_reason:
        reasons.append(f"stopped early: {stop_reason}")
    if summary.count == 0:
        reasons.append("no requests measured")
    if summary.mode == "open" and summary.late_share > late_limit:
        reasons.append(
            f"generator fell behind: {summary.late_share:.1%} of requests were sent more than "
            f"{late_threshold * 1e3:g} ms late (limit {late_limit:.1%}); "
            f"schedule lag p99 {summary.schedule_lag_p99 * 1e3:.2f} ms"
        )
    if summary.count and summary.errors / summary.count > max_error_share:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors_by_kind.items()))
        reasons.append(
            f"errors: {summary.errors} of {summary.count} requests failed "
            f"({summary.errors / summary.count:.2%}, limit {max_error_share:.2%}: {kinds})"
        )
    if summary.stable is False:
        reasons.append(
            f"unstable: throughput and latency did not settle within {len(summary.windows)} windows"
        )
    summary.reasons = reasons
    summary.verdict = INVALID if reasons else VALID
    return summary
