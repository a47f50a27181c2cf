"""A load's summary as a person reads it: a rich table, then the verdict, its reasons and
warnings; and the one-line live figures a terminal shows while the load runs.

The load layer's own presentation, so that every command that runs a load (`servebench
load`, and anything that prints one load's figures) shows them the same way; rows about
the server's side (its counters are telemetry's) come in from the caller (`extra_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servebench.common.readable import ms_interval
from servebench.load.summary import LATE_THRESHOLD, LoadSummary

if TYPE_CHECKING:
    from servebench.load.live import LiveFigures
    from servebench.results import GangRecord


def live_line(f: LiveFigures) -> str:
    """Locust's live figures: requests, failures, req/s, p50/p90/p99 (with the sketch's
    accuracy: the final table's come from the records) and, for a gang, each generator's
    share."""
    shares = " / ".join(f"{n:,}" for n in f.by_generator)
    return (
        f"live, ±{f.relative_accuracy * 100:g} %: {f.elapsed:.0f} s, {f.completed:,} requests, "
        f"{f.errors:,} failures, {f.rate:,.1f} req/s, p50 {millis(f.p50)} / p90 {millis(f.p90)} / "
        f"p99 {millis(f.p99)} ms" + (f"; by generator {shares}" if len(f.by_generator) > 1 else "")
    )


def millis(seconds: float | None) -> str:
    """Seconds as plain milliseconds to the microsecond, "-" for none: the digits
    perf_analyzer's users compare (`common.readable.ms` is the report's, rounded)."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    return f"{seconds * 1e3:.3f}"


def print_load_summary(
    summary: LoadSummary,
    *,
    url: str = "",
    records: Path | None = None,
    extra_rows: Sequence[tuple[str, str]] = (),
    late_threshold_s: float = LATE_THRESHOLD,
) -> None:
    """The summary as a rich table, then the verdict, its reasons and warnings.

    `extra_rows` (name, value) follow the load's own rows: the server's side of a request,
    where the caller read its counters.
    """
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"servebench load: {summary.load}" + (f" → {url}" if url else ""))
    table.add_column("metric")
    table.add_column("value", justify="right")
    errors = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors_by_kind.items())) or "none"
    rows = [
        ("requests (ok / errors)", f"{summary.count} ({summary.ok} / {summary.errors})"),
        ("errors by kind", errors),
        (
            "target rate (req/s)",
            f"{summary.target_rate:.1f}" if summary.target_rate is not None else "-",
        ),
        ("achieved send rate (req/s)", f"{summary.achieved_rate:.1f}"),
        ("throughput (req/s)", f"{summary.throughput_rps:.1f}"),
        ("throughput (infer/s)", f"{summary.throughput_ips:.1f}"),
        ("error rate", f"{summary.error_rate:.2%}"),
        ("latency mean (ms)", millis(summary.latency_mean)),
        ("latency p50 (ms)", millis(summary.latency_p50)),
        ("latency p90 (ms)", millis(summary.latency_p90)),
        ("latency p95 (ms)", millis(summary.latency_p95)),
        (
            "latency p99 (ms)",
            ms_interval(
                summary.latency_p99, summary.latency_p99_low, summary.latency_p99_high, digits=3
            ),
        ),
        ("latency p99.9 (ms)", millis(summary.latency_p99_9)),
        ("latency max (ms)", millis(summary.latency_max)),
        ("schedule lag p99 (ms)", millis(summary.schedule_lag_p99)),
        (f"sent > {late_threshold_s * 1e3:g} ms late", f"{summary.late_share:.2%}"),
        ("measured span (s)", f"{summary.duration:.2f}"),
        ("(…–…): confidence interval", f"{summary.confidence_level:.0%}"),
    ]
    rows += list(extra_rows)
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if summary.windows:
        windows = Table(title="stability windows")
        for col in ("window", "completed", "errors", "req/s", "latency (ms)"):
            windows.add_column(col, justify="right")
        for w in summary.windows:
            windows.add_row(
                str(w.index),
                str(w.completed),
                str(w.errors),
                f"{w.throughput_rps:.1f}",
                millis(w.latency),
            )
        console.print(windows)
    if summary.gang is not None:
        console.print(_gang_table(summary.gang))
    style = "bold green" if summary.verdict == "VALID" else "bold red"
    console.print(f"verdict: [{style}]{summary.verdict}[/]")
    for reason in summary.reasons:
        console.print(f"  [red]- {reason}[/]")
    for warning in summary.warnings:
        console.print(f"  [yellow]warning: {warning}[/]")
    if records is not None:
        console.print(f"records: {records}")


def _gang_table(gang: GangRecord) -> Any:
    """Each generator of a gang: its clock against this one's, what it sent, how late."""
    from rich.table import Table

    table = Table(
        title=f"generators ({gang.scheduler}): start skew <= "
        f"{gang.start_skew_s * 1e3:.3f} ms (limit {gang.start_skew_limit_s * 1e3:g} ms)"
        + (", partial" if gang.partial else "")
    )
    for col in ("#", "worker", "clock (ms)", "± (ms)", "requests", "req/s", "short", "lag p99"):
        table.add_column(col, justify="right")
    table.add_column("lost")
    for g in gang.generators:
        short = g.shortfall
        table.add_row(
            str(g.index),
            g.worker.removeprefix("tcp://"),
            f"{g.clock_offset_s * 1e3:+.3f}",
            f"{g.clock_uncertainty_s * 1e3:.3f}",
            str(g.count),
            f"{g.sent_rate:.1f}",
            "-" if short is None else f"{max(short, 0.0):.1%}",  # never "-0.0%"
            millis(g.lag_p99_s),
            g.lost or "",
        )
    return table
