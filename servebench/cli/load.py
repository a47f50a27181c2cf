"""`servebench load`: one load against one URL and model, no scenario file (like perf_analyzer).

Open loop with `--rate` (constant or `--poisson`), `--request-intervals FILE`
(perf_analyzer's format) or `--load-schedule step|line` (ghz's names); closed loop with
`--concurrency`. Times on the command line are seconds; the table shows milliseconds.
Exit status: 0 when the verdict is VALID, 3 when it is INVALID.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from servebench.load import LoadSummary

EXIT_INVALID = 3


class Schedule(StrEnum):
    const = "const"
    step = "step"
    line = "line"


_LOAD = "Load"
_STOP = "Stop"
_STAB = "Stability mode"
_HTTP = "HTTP (protocol http)"
_OUT = "Output"


def load(
    url: Annotated[str, typer.Option(help="Server URL (the full endpoint for protocol http).")],
    model: Annotated[str, typer.Option(help="Model name.")] = "",
    protocol: Annotated[str, typer.Option(help="Client protocol, e.g. http.")] = "http",
    model_version: Annotated[str | None, typer.Option(help="Model version.")] = None,
    rate: Annotated[
        float | None, typer.Option(help="Open loop: requests per second.", rich_help_panel=_LOAD)
    ] = None,
    poisson: Annotated[
        bool, typer.Option(help="Poisson arrivals instead of evenly spaced.", rich_help_panel=_LOAD)
    ] = False,
    request_intervals: Annotated[
        Path | None,
        typer.Option(
            help="Open loop: replay gaps from a file (microseconds, one per line).",
            rich_help_panel=_LOAD,
        ),
    ] = None,
    load_schedule: Annotated[
        Schedule, typer.Option(help="Rate schedule, as ghz.", rich_help_panel=_LOAD)
    ] = Schedule.const,
    load_start: Annotated[
        float | None, typer.Option(help="step/line: first rate (req/s).", rich_help_panel=_LOAD)
    ] = None,
    load_step: Annotated[
        float | None,
        typer.Option(
            help="step: change per step; line: change per second (req/s).", rich_help_panel=_LOAD
        ),
    ] = None,
    load_end: Annotated[
        float | None, typer.Option(help="step/line: rate to hold (req/s).", rich_help_panel=_LOAD)
    ] = None,
    load_step_duration: Annotated[
        float, typer.Option(help="step: seconds per step.", rich_help_panel=_LOAD)
    ] = 5.0,
    concurrency: Annotated[
        int | None, typer.Option(help="Closed loop: concurrent workers.", rich_help_panel=_LOAD)
    ] = None,
    think_time: Annotated[
        float, typer.Option(help="Closed loop: seconds between requests.", rich_help_panel=_LOAD)
    ] = 0.0,
    batch_size: Annotated[int, typer.Option(help="Batch size.", rich_help_panel=_LOAD)] = 1,
    seed: Annotated[int, typer.Option(help="Seed (data, Poisson).", rich_help_panel=_LOAD)] = 0,
    processes: Annotated[
        int, typer.Option(help="Split the load over worker processes.", rich_help_panel=_LOAD)
    ] = 1,
    duration: Annotated[
        float | None,
        typer.Option(help="Measure for at least this many seconds.", rich_help_panel=_STOP),
    ] = None,
    count: Annotated[
        int | None, typer.Option(help="Measure at least this many requests.", rich_help_panel=_STOP)
    ] = None,
    warmup: Annotated[
        float, typer.Option(help="Seconds of unrecorded warm-up first.", rich_help_panel=_STOP)
    ] = 0.0,
    timeout: Annotated[
        float, typer.Option(help="Per-request timeout, seconds.", rich_help_panel=_STOP)
    ] = 10.0,
    max_in_flight: Annotated[
        int | None, typer.Option(help="Cap on requests in flight.", rich_help_panel=_STOP)
    ] = 10_000,
    stability: Annotated[
        bool, typer.Option(help="Measure in windows until stable.", rich_help_panel=_STAB)
    ] = False,
    window: Annotated[float, typer.Option(help="Seconds per window.", rich_help_panel=_STAB)] = 5.0,
    stability_percentage: Annotated[
        float, typer.Option(help="Allowed deviation, percent.", rich_help_panel=_STAB)
    ] = 10.0,
    percentile: Annotated[
        float, typer.Option(help="Latency percentile compared.", rich_help_panel=_STAB)
    ] = 99.0,
    max_windows: Annotated[
        int, typer.Option(help="Give up (unstable) after this many.", rich_help_panel=_STAB)
    ] = 10,
    method: Annotated[str, typer.Option(help="HTTP method.", rich_help_panel=_HTTP)] = "POST",
    body: Annotated[
        str | None,
        typer.Option(help="Request body (default: a ~90-byte JSON).", rich_help_panel=_HTTP),
    ] = None,
    body_file: Annotated[
        Path | None, typer.Option(help="Read the body from a file.", rich_help_panel=_HTTP)
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="'Name: value', repeatable.", rich_help_panel=_HTTP)
    ] = None,
    expect_status: Annotated[
        int, typer.Option(help="Status that counts as success.", rich_help_panel=_HTTP)
    ] = 200,
    connections: Annotated[
        int, typer.Option(help="Keep-alive connections per process.", rich_help_panel=_HTTP)
    ] = 64,
    option: Annotated[
        list[str] | None,
        typer.Option(
            help="Client option key=value (JSON values), repeatable.", rich_help_panel=_HTTP
        ),
    ] = None,
    records: Annotated[
        Path | None,
        typer.Option(help="Write per-request records to this Parquet file.", rich_help_panel=_OUT),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the summary as JSON.", rich_help_panel=_OUT)
    ] = None,
    trial_id: Annotated[
        str, typer.Option(help="Trial id in the records.", rich_help_panel=_OUT)
    ] = "",
) -> None:
    """Run one load against a URL and model and print the summary (like perf_analyzer).

    Exit status 0 when the verdict is VALID, 3 when it is INVALID.
    """
    import functools

    from servebench.clients.factory import create_client
    from servebench.load import LoadSettings, StabilitySettings, run

    try:
        arrivals = _arrivals(
            rate,
            poisson,
            seed,
            request_intervals,
            load_schedule,
            load_start,
            load_step,
            load_end,
            load_step_duration,
        )
        if arrivals is not None and concurrency is not None:
            raise ValueError("give either an open-loop load (--rate, ...) or --concurrency")
        options = _client_options(
            protocol, method, body, body_file, header, expect_status, connections, option
        )
        factory = functools.partial(
            create_client, protocol, url, model, version=model_version, **options
        )
        factory()  # validate the URL and options before anything starts
        settings = LoadSettings(
            arrivals=arrivals,
            concurrency=concurrency,
            think_time=think_time,
            duration=duration,
            count=count,
            warmup=warmup,
            stability=StabilitySettings(
                window=window,
                tolerance=stability_percentage / 100,
                percentile=percentile,
                max_windows=max_windows,
            )
            if stability
            else None,
            timeout=timeout,
            max_in_flight=max_in_flight,
            batch_size=batch_size,
            seed=seed,
            trial_id=trial_id,
            processes=processes,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    summary = run(factory, settings, records=records)
    print_summary(summary, url=url, records=records)
    if json_out is not None:
        json_out.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    if summary.verdict != "VALID":
        raise typer.Exit(EXIT_INVALID)


def _arrivals(
    rate: float | None,
    poisson: bool,
    seed: int,
    request_intervals: Path | None,
    load_schedule: Schedule,
    load_start: float | None,
    load_step: float | None,
    load_end: float | None,
    load_step_duration: float,
) -> Any:
    from servebench.load import TraceArrivals, arrivals

    given = [
        name
        for name, on in (
            ("--rate", rate is not None),
            ("--request-intervals", request_intervals is not None),
            ("--load-schedule", load_schedule is not Schedule.const),
        )
        if on
    ]
    if len(given) > 1:
        raise ValueError(f"choose one open-loop load, got {' and '.join(given)}")
    if rate is not None:
        return arrivals.poisson(rate, seed) if poisson else arrivals.constant(rate)
    if request_intervals is not None:
        if poisson:
            raise ValueError("--poisson does not apply to --request-intervals (a fixed trace)")
        return TraceArrivals.from_file(request_intervals)
    if load_schedule is Schedule.const:
        return None
    missing = [
        f"--load-{n}"
        for n, v in (("start", load_start), ("step", load_step), ("end", load_end))
        if v is None
    ]
    if missing:
        raise ValueError(f"--load-schedule {load_schedule.value} needs {', '.join(missing)}")
    assert load_start is not None and load_step is not None and load_end is not None
    if load_schedule is Schedule.step:
        return arrivals.step(
            load_start, load_step, load_end, load_step_duration, poisson=poisson, seed=seed
        )
    return arrivals.linear(load_start, load_step, load_end, poisson=poisson, seed=seed)


def _client_options(
    protocol: str,
    method: str,
    body: str | None,
    body_file: Path | None,
    header: list[str] | None,
    expect_status: int,
    connections: int,
    option: list[str] | None,
) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if protocol == "http":
        if body is not None and body_file is not None:
            raise ValueError("give --body or --body-file, not both")
        if body_file is not None:
            try:
                options["body"] = body_file.read_bytes()
            except OSError as exc:
                raise ValueError(f"--body-file {body_file}: {exc.strerror}") from None
        elif body is not None:
            options["body"] = body
        headers = {}
        for item in header or []:
            name, sep, value = item.partition(":")
            if not sep or not name.strip():
                raise ValueError(f"--header {item!r}: expected 'Name: value'")
            headers[name.strip()] = value.strip()
        options.update(
            method=method,
            headers=headers,
            expect_status=expect_status,
            connections=connections,
        )
    for item in option or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--option {item!r}: expected key=value")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _ms(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    return f"{seconds * 1e3:.3f}"


def print_summary(summary: LoadSummary, *, url: str = "", records: Path | None = None) -> None:
    """The summary as a rich table, then the verdict and its reasons."""
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
        ("latency mean (ms)", _ms(summary.latency_mean)),
        ("latency p50 (ms)", _ms(summary.latency_p50)),
        ("latency p90 (ms)", _ms(summary.latency_p90)),
        ("latency p95 (ms)", _ms(summary.latency_p95)),
        ("latency p99 (ms)", _ms(summary.latency_p99)),
        ("latency p99.9 (ms)", _ms(summary.latency_p99_9)),
        ("latency max (ms)", _ms(summary.latency_max)),
        ("schedule lag p99 (ms)", _ms(summary.schedule_lag_p99)),
        ("sent > 1 ms late", f"{summary.late_share:.2%}"),
        ("measured span (s)", f"{summary.duration:.2f}"),
    ]
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
                _ms(w.latency),
            )
        console.print(windows)
    style = "bold green" if summary.verdict == "VALID" else "bold red"
    console.print(f"verdict: [{style}]{summary.verdict}[/]")
    for reason in summary.reasons:
        console.print(f"  [red]- {reason}[/]")
    if records is not None:
        console.print(f"records: {records}")
