"""`servebench load`: one load against one URL and model, no scenario file (like perf_analyzer).

Open loop with `--rate` (constant or `--poisson`), `--request-intervals FILE`
(perf_analyzer's format) or `--load-schedule step|line` (ghz's names); closed loop with
`--concurrency`. Times on the command line are seconds; the table shows milliseconds.
Without `--protocol`, a named model gets the model protocol its address answers (asked
once). Exit status: 0 when the verdict is VALID, 3 when it is INVALID, 2 (one line, nothing
sent) when the address, model, version, protocol or an output path is wrong, the model's
request is over the request-size limit, or a local gang has more generators than cores.
Ctrl-C (or SIGTERM) stops the load and keeps what it measured: the summary says it
stopped early (INVALID). With `--generators N` a terminal shows the gang's live figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from servebench.cli.cluster import SCHEDULER
from servebench.cli.command import with_options
from servebench.cli.usage import fail
from servebench.cli.values import (
    Endpoint,
    InputFile,
    Number,
    OutputFile,
    Url,
)
from servebench.cli.values import (
    seed as seed_type,
)
from servebench.clients.registry import names as protocol_names
from servebench.common.limits import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SECONDS,
    MAX_STABILITY_WINDOWS,
    MAX_THREADS,
    MAX_TRIAL_S,
    MIN_RATE,
)
from servebench.common.quantiles import CONFIDENCE
from servebench.load import summary as defaults  # the verdict's and early stop's
from servebench.load.table import live_line, millis, print_load_summary

if TYPE_CHECKING:
    from servebench.load import ArrivalProcess, LoadPlan, LoadSettings, LoadSummary, Target
    from servebench.load.events import LoadEvent, Subscriber
    from servebench.load.settings import EarlyStopSettings, StabilitySettings
    from servebench.telemetry.server_metrics import ServerMetrics

EXIT_FAILED = 1
EXIT_INVALID = 3


class Schedule(StrEnum):
    const = "const"
    step = "step"
    line = "line"


_LOAD = "Load"
_STOP = "Stop"
_STAB = "Stability mode"
_VERDICT = "Verdict"
_HTTP = "HTTP (protocol http)"
_OUT = "Output"

# The bounds a scenario's workload gets (docs/scenario-limits.md), for the same numbers here.
RATE = Number(float, ge=MIN_RATE, le=MAX_RATE, limit="max_rate", unit=" req/s")
TRIAL_SECONDS = Number(float, gt=0, le=MAX_TRIAL_S, limit="max_trial_s", unit=" s")


@dataclass(frozen=True)
class LoadOptions:
    """`servebench load`'s options, as parsed: the command's parameters (`cli.command`)."""

    url: Annotated[
        str,
        typer.Option(help="Server URL (the full endpoint for protocol http).", parser=Endpoint()),
    ]
    model: Annotated[str, typer.Option(help="Model name.")] = ""
    mix: Annotated[
        list[str] | None,
        typer.Option(
            help="MODEL=WEIGHT, repeatable: one load over several models at the URL, each "
            "request to a model picked by weight (seeded); instead of --model.",
            rich_help_panel=_LOAD,
        ),
    ] = None
    protocol: Annotated[
        str | None,
        typer.Option(
            help=f"Client protocol: {', '.join(protocol_names())} (default: with --model, "
            "the model protocol the address answers, asked once; without, http)."
        ),
    ] = None
    model_version: Annotated[str | None, typer.Option(help="Model version.")] = None
    rate: Annotated[
        float | None,
        typer.Option(help="Open loop: requests per second.", rich_help_panel=_LOAD, parser=RATE),
    ] = None
    poisson: Annotated[
        bool, typer.Option(help="Poisson arrivals instead of evenly spaced.", rich_help_panel=_LOAD)
    ] = False
    request_intervals: Annotated[
        Path | None,
        typer.Option(
            help="Open loop: replay gaps from a file (microseconds, one per line).",
            rich_help_panel=_LOAD,
            parser=InputFile(),
        ),
    ] = None
    load_schedule: Annotated[
        Schedule, typer.Option(help="Rate schedule, as ghz.", rich_help_panel=_LOAD)
    ] = Schedule.const
    load_start: Annotated[
        float | None,
        typer.Option(
            help="step/line: first rate (req/s).",
            rich_help_panel=_LOAD,
            parser=Number(float, ge=0, le=MAX_RATE, limit="max_rate", unit=" req/s"),
        ),
    ] = None
    load_step: Annotated[
        float | None,
        typer.Option(
            help="step: change per step; line: change per second (req/s).",
            rich_help_panel=_LOAD,
            parser=Number(float, ge=-MAX_RATE, le=MAX_RATE, nonzero=True, limit="max_rate"),
        ),
    ] = None
    load_end: Annotated[
        float | None,
        typer.Option(help="step/line: rate to hold (req/s).", rich_help_panel=_LOAD, parser=RATE),
    ] = None
    load_step_duration: Annotated[
        float,
        typer.Option(help="step: seconds per step.", rich_help_panel=_LOAD, parser=TRIAL_SECONDS),
    ] = 5.0
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Closed loop: concurrent workers.",
            rich_help_panel=_LOAD,
            parser=Number(int, ge=1, le=MAX_CONCURRENCY, limit="max_concurrency"),
        ),
    ] = None
    think_time: Annotated[
        float,
        typer.Option(
            help="Closed loop: seconds between requests.",
            rich_help_panel=_LOAD,
            parser=Number(float, ge=0, le=MAX_SECONDS, unit=" s"),
        ),
    ] = 0.0
    batch_size: Annotated[
        int,
        typer.Option(
            help="Batch size.", rich_help_panel=_LOAD, parser=Number(int, ge=1, le=MAX_BATCH)
        ),
    ] = 1
    seed: Annotated[
        int, typer.Option(help="Seed (data, Poisson).", rich_help_panel=_LOAD, parser=seed_type())
    ] = 0
    input_data: Annotated[
        Path | None,
        typer.Option(
            help="Send the samples of this file (.npz, or perf_analyzer's JSON) in order "
            "instead of random data; expected outputs in it are checked (wrong_answer).",
            rich_help_panel=_LOAD,
            parser=InputFile(text=False),
        ),
    ] = None
    generators: Annotated[
        int,
        typer.Option(
            "--generators",
            "--processes",
            help="Send the load from a gang of N generators on Dask: worker processes here, "
            "or with --scheduler workers of that cluster; one schedule split between them "
            "(--processes: the older name).",
            rich_help_panel=_LOAD,
            parser=Number(int, ge=1, le=MAX_THREADS),
        ),
    ] = 1
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="Dask scheduler whose workers are the generators, tcp://HOST:PORT "
            "(default: a LocalCluster here).",
            rich_help_panel=_LOAD,
            parser=SCHEDULER,
        ),
    ] = None
    duration: Annotated[
        float | None,
        typer.Option(
            help="Measure for at least this many seconds.",
            rich_help_panel=_STOP,
            parser=TRIAL_SECONDS,
        ),
    ] = None
    count: Annotated[
        int | None,
        typer.Option(
            help="Measure at least this many requests.",
            rich_help_panel=_STOP,
            parser=Number(int, ge=1, le=MAX_REQUESTS, limit="max_requests"),
        ),
    ] = None
    warmup: Annotated[
        float,
        typer.Option(
            help="Seconds of unrecorded warm-up first.",
            rich_help_panel=_STOP,
            parser=Number(float, ge=0, le=MAX_TRIAL_S, limit="max_trial_s", unit=" s"),
        ),
    ] = 0.0
    timeout: Annotated[
        float,
        typer.Option(
            help="Per-request timeout, seconds.",
            rich_help_panel=_STOP,
            parser=Number(float, gt=0, le=MAX_SECONDS, unit=" s"),
        ),
    ] = 10.0
    max_in_flight: Annotated[
        int | None,
        typer.Option(
            help="Cap on requests in flight.",
            rich_help_panel=_STOP,
            parser=Number(int, ge=1, le=100 * MAX_CONCURRENCY),
        ),
    ] = 10_000
    late_threshold_ms: Annotated[
        float,
        typer.Option(
            help="A send this late counts as late.",
            rich_help_panel=_VERDICT,
            parser=Number(float, gt=0, le=MAX_SECONDS * 1e3, unit=" ms"),
        ),
    ] = defaults.LATE_THRESHOLD * 1e3
    late_limit: Annotated[
        float,
        typer.Option(
            help="Share of late sends above which to warn.",
            rich_help_panel=_VERDICT,
            parser=Number(float, ge=0, le=1),
        ),
    ] = defaults.LATE_LIMIT
    rate_tolerance: Annotated[
        float,
        typer.Option(
            help="INVALID when the sent rate falls this share short of the schedule.",
            rich_help_panel=_VERDICT,
            parser=Number(float, ge=0, lt=1),
        ),
    ] = defaults.RATE_TOLERANCE
    lag_ratio: Annotated[
        float,
        typer.Option(
            help="INVALID when schedule lag p99 exceeds this share of latency p99.",
            rich_help_panel=_VERDICT,
            parser=Number(float, gt=0, le=1000),
        ),
    ] = defaults.LAG_RATIO
    early_stop_ms: Annotated[
        float | None,
        typer.Option(
            help="Early stop: end once latency p<--percentile> is shown within or over this "
            "bound (ms) at --confidence, after --min-duration and --min-requests.",
            rich_help_panel=_STOP,
            parser=Number(float, gt=0, le=MAX_SECONDS * 1e3, unit=" ms"),
        ),
    ] = None
    confidence: Annotated[
        float,
        typer.Option(
            help="Two-sided confidence of every percentile's interval (and of --early-stop-ms).",
            rich_help_panel=_STOP,
            parser=Number(float, ge=0.5, lt=1),
        ),
    ] = CONFIDENCE
    min_duration: Annotated[
        float,
        typer.Option(
            help="Early stop: never before this many measured seconds.",
            rich_help_panel=_STOP,
            parser=Number(float, ge=0, le=MAX_TRIAL_S, limit="max_trial_s", unit=" s"),
        ),
    ] = defaults.EARLY_STOP_MIN_DURATION
    min_requests: Annotated[
        int,
        typer.Option(
            help="Early stop: never before this many answered requests.",
            rich_help_panel=_STOP,
            parser=Number(int, ge=1, le=MAX_REQUESTS, limit="max_requests"),
        ),
    ] = defaults.EARLY_STOP_MIN_REQUESTS
    stability: Annotated[
        bool, typer.Option(help="Measure in windows until stable.", rich_help_panel=_STAB)
    ] = False
    window: Annotated[
        float,
        typer.Option(help="Seconds per window.", rich_help_panel=_STAB, parser=TRIAL_SECONDS),
    ] = 5.0
    stability_percentage: Annotated[
        float,
        typer.Option(
            help="Allowed deviation, percent.",
            rich_help_panel=_STAB,
            parser=Number(float, gt=0, lt=100),
        ),
    ] = 10.0
    percentile: Annotated[
        float,
        typer.Option(
            help="Latency percentile compared (stability windows, --early-stop-ms).",
            rich_help_panel=_STAB,
            parser=Number(float, gt=0, le=100),
        ),
    ] = 99.0
    max_windows: Annotated[
        int,
        typer.Option(
            help="Give up (unstable) after this many.",
            rich_help_panel=_STAB,
            parser=Number(int, ge=1, le=MAX_STABILITY_WINDOWS),
        ),
    ] = 10
    method: Annotated[str, typer.Option(help="HTTP method.", rich_help_panel=_HTTP)] = "POST"
    body: Annotated[
        str | None,
        typer.Option(help="Request body (default: a ~90-byte JSON).", rich_help_panel=_HTTP),
    ] = None
    body_file: Annotated[
        Path | None,
        typer.Option(
            help="Read the body from a file.", rich_help_panel=_HTTP, parser=InputFile(text=False)
        ),
    ] = None
    header: Annotated[
        list[str] | None, typer.Option(help="'Name: value', repeatable.", rich_help_panel=_HTTP)
    ] = None
    expect_status: Annotated[
        int,
        typer.Option(
            help="Status that counts as success.",
            rich_help_panel=_HTTP,
            parser=Number(int, ge=100, le=599),
        ),
    ] = 200
    connections: Annotated[
        int,
        typer.Option(
            help="Keep-alive connections in all, split between the generators.",
            rich_help_panel=_HTTP,
            parser=Number(int, ge=1, le=MAX_CONCURRENCY, limit="max_concurrency"),
        ),
    ] = 64
    transport: Annotated[
        str,
        typer.Option(
            help="Transport: auto (default) is the lean one — HTTP/1.1 keep-alive (llhttp on "
            "uvloop) for http://, cleartext HTTP/2 for the gRPC protocols — and aiohttp for "
            "https://; lean, aiohttp (HTTP) or grpcio (gRPC, the reference) force one.",
            rich_help_panel=_HTTP,
        ),
    ] = "auto"
    option: Annotated[
        list[str] | None,
        typer.Option(
            help="Client option key=value (JSON values), repeatable.", rich_help_panel=_HTTP
        ),
    ] = None
    records: Annotated[
        Path | None,
        typer.Option(
            help="Write per-request records to this Parquet file.",
            rich_help_panel=_OUT,
            parser=OutputFile(),
        ),
    ] = None
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json", help="Write the summary as JSON.", rich_help_panel=_OUT, parser=OutputFile()
        ),
    ] = None
    metrics_url: Annotated[
        str | None,
        typer.Option(
            help="Server's Prometheus page, for its queue/compute time per request "
            "(default for Triton: port 8002 of its host; '' for none).",
            rich_help_panel=_OUT,
            parser=Url(empty=True),
        ),
    ] = None
    trial_id: Annotated[
        str, typer.Option(help="Trial id in the records.", rich_help_panel=_OUT)
    ] = ""

    def settings(self) -> LoadSettings:
        """The load layer's settings for these options, checked where a scenario's are
        (`LoadSettings`); ValueError naming the option where the command line decides."""
        from servebench.clients.input_data import read_input_data
        from servebench.load import LoadSettings
        from servebench.load.gang import check_local_gang

        if self.generators > 1 and self.scheduler is None:
            check_local_gang(self.generators, "--generators")
        arrivals = self.arrivals()
        if arrivals is not None and self.concurrency is not None:
            raise ValueError("give either an open-loop load (--rate, ...) or --concurrency")
        return LoadSettings(
            arrivals=arrivals,
            concurrency=self.concurrency,
            think_time=self.think_time,
            duration=self.duration,
            count=self.count,
            warmup=self.warmup,
            stability=self._stability(),
            timeout=self.timeout,
            max_in_flight=self.max_in_flight,
            batch_size=self.batch_size,
            seed=self.seed,
            trial_id=self.trial_id,
            generators=self.generators,
            scheduler=self.scheduler,
            late_threshold=self.late_threshold_ms / 1e3,
            late_limit=self.late_limit,
            rate_tolerance=self.rate_tolerance,
            lag_ratio=self.lag_ratio,
            input_data=read_input_data(self.input_data) if self.input_data is not None else None,
            early_stop=self._early_stop(),
            confidence=self.confidence,
        )

    def _stability(self) -> StabilitySettings | None:
        from servebench.load import StabilitySettings

        if not self.stability:
            return None
        return StabilitySettings(
            window=self.window,
            tolerance=self.stability_percentage / 100,
            percentile=self.percentile,
            max_windows=self.max_windows,
        )

    def _early_stop(self) -> EarlyStopSettings | None:
        from servebench.load import EarlyStopSettings

        if self.early_stop_ms is None:
            return None
        return EarlyStopSettings(
            percentile=self.percentile,
            bound_s=self.early_stop_ms / 1e3,
            min_duration=self.min_duration,
            min_requests=self.min_requests,
        )

    def arrivals(self) -> ArrivalProcess | None:
        """The open-loop schedule the options give (None: closed loop); ValueError where
        they give two, or a schedule without its rates."""
        from servebench.load import TraceArrivals, arrivals

        given = [
            name
            for name, on in (
                ("--rate", self.rate is not None),
                ("--request-intervals", self.request_intervals is not None),
                ("--load-schedule", self.load_schedule is not Schedule.const),
            )
            if on
        ]
        if len(given) > 1:
            raise ValueError(f"choose one open-loop load, got {' and '.join(given)}")
        if self.rate is not None:
            return (
                arrivals.poisson(self.rate, self.seed)
                if self.poisson
                else arrivals.constant(self.rate)
            )
        if self.request_intervals is not None:
            if self.poisson:
                raise ValueError("--poisson does not apply to --request-intervals (a fixed trace)")
            return TraceArrivals.from_file(self.request_intervals)
        if self.load_schedule is Schedule.const:
            return None
        return self._schedule()

    def _schedule(self) -> ArrivalProcess:
        """`--load-schedule step|line` from its rates."""
        from servebench.load import arrivals

        start, step, end = self.load_start, self.load_step, self.load_end
        missing = [
            f"--load-{n}" for n, v in (("start", start), ("step", step), ("end", end)) if v is None
        ]
        if missing:
            schedule = self.load_schedule.value
            raise ValueError(f"--load-schedule {schedule} needs {', '.join(missing)}")
        assert start is not None and step is not None and end is not None
        if self.load_schedule is Schedule.step:
            return arrivals.step(
                start, step, end, self.load_step_duration, poisson=self.poisson, seed=self.seed
            )
        return arrivals.linear(start, step, end, poisson=self.poisson, seed=self.seed)

    def plan(self, settings: LoadSettings) -> Plan:
        """The load plan: its models (`--model`, or each of `--mix`) and their clients, made
        from these options and checked against the server before anything is sent
        (`clients.probe.checked_connect`): the address, each model, version, protocol,
        request size and input data. ValueError saying which."""
        from servebench.clients.factory import ModelClients
        from servebench.clients.probe import checked_connect, chosen_protocol
        from servebench.load import LoadPlan

        targets = self.targets()
        named = targets[0].model != ""
        protocol, probed = chosen_protocol(
            self.protocol, self.url, targets[0].model if named else self.model
        )
        if named and protocol == "http":
            raise ValueError("--mix: protocol http sends to one endpoint; give a model protocol")
        options = self.client_options(protocol)
        options.setdefault("transport", self.transport)
        served = tuple((t.model, t.model or self.model) for t in targets)
        source = ModelClients(
            protocol, self.url, served, self.model_version, tuple(sorted(options.items()))
        )
        clients = source.for_part(0, [m for m, _ in served])
        for (_, model), client in zip(served, clients, strict=True):
            check = checked_connect(
                lambda client=client: client,
                protocol,
                self.url,
                model,
                settings.batch_size,
                settings.seed,
                settings.input_data,
            )
            asyncio.run(check)
        return Plan(protocol, probed, LoadPlan(settings, source, targets))

    def targets(self) -> tuple[Target, ...]:
        """`--mix`'s models and weights, or the one unnamed target of `--model`."""
        from servebench.load import Target

        if not self.mix:
            return (Target(),)
        if self.model:
            raise ValueError("give --model or --mix, not both")
        targets = []
        for item in self.mix:
            model, sep, weight = item.partition("=")
            try:
                value = float(weight)
            except ValueError:
                value = math.nan
            if not sep or not model or not (math.isfinite(value) and value > 0):
                raise ValueError(f"--mix {item!r}: expected MODEL=WEIGHT, a weight > 0")
            targets.append(Target(model, value))
        if len({t.model for t in targets}) != len(targets):
            raise ValueError("--mix: each model once")
        return tuple(targets)

    def client_options(self, protocol: str) -> dict[str, Any]:
        """The client's options: protocol http's request and pool (each generator's
        share of `--connections`: `load.shares`), then every `--option`."""
        from servebench.load import per_generator

        options: dict[str, Any] = {}
        if protocol == "http":
            options.update(
                self._body(),
                method=self.method,
                headers=_headers(self.header or []),
                expect_status=self.expect_status,
                connections=per_generator(self.connections, self.generators),
            )
        for item in self.option or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--option {item!r}: expected key=value")
            try:
                options[key] = json.loads(value)
            except json.JSONDecodeError:
                options[key] = value
        return options

    def _body(self) -> dict[str, str | bytes]:
        """`--body` or `--body-file` (nothing: the client's default body)."""
        if self.body is not None and self.body_file is not None:
            raise ValueError("give --body or --body-file, not both")
        if self.body_file is not None:
            try:
                return {"body": self.body_file.read_bytes()}
            except OSError as exc:
                raise ValueError(f"--body-file {self.body_file}: {exc.strerror}") from None
        return {"body": self.body} if self.body is not None else {}


@dataclass(frozen=True)
class Plan:
    """The load to run: its plan, and its protocol (and whether the address was asked)."""

    protocol: str
    probed: bool
    load: LoadPlan


@with_options(LoadOptions)
def load(options: LoadOptions) -> None:
    """Run one load against a URL and model and print the summary (like perf_analyzer).

    Exit status 0 when the verdict is VALID, 3 when it is INVALID, 2 when the address,
    model, protocol or an output path is wrong (one line saying which).
    """
    try:
        plan = options.plan(options.settings())
    except ValueError as exc:
        raise fail(str(exc)) from None
    _run(options, plan)


def _run(o: LoadOptions, client: Plan) -> None:
    """Measure, print the summary (and write what was asked for), exit 3 unless VALID."""
    from servebench.clients.probe import default_metrics_url, protocol_hint
    from servebench.telemetry.server_metrics import ServerMetrics

    if client.probed:
        typer.echo(f"protocol: {client.protocol} (what {o.url} answers; --protocol to choose)")
    metrics_url = o.metrics_url
    if metrics_url is None:
        metrics_url = default_metrics_url(client.protocol, o.url)
    settings = client.load.settings
    quiet = settings.mode == "closed" and not settings.is_gang
    metrics = ServerMetrics(metrics_url, o.model, quiet=quiet) if metrics_url else None
    summary = _measure(o, client, metrics)
    server = metrics.summary() if metrics is not None else None
    print_load_summary(
        summary,
        url=o.url,
        records=o.records,
        extra_rows=_server_rows(summary, server) if server is not None else (),
        late_threshold_s=settings.late_threshold,
    )
    if metrics is not None and server is None and metrics.note:
        typer.echo(metrics.note)
    failed = summary.ok == 0 and set(summary.errors_by_kind) == {"http_status"}
    if client.protocol == "http" and failed:
        hint = asyncio.run(protocol_hint(o.url, client.protocol, o.model))
        if hint:
            typer.echo(f"note: {hint}")
    if o.json_out is not None:
        _write_json(o.json_out, summary, server)
    if summary.verdict != "VALID":
        raise typer.Exit(EXIT_INVALID)


def _measure(o: LoadOptions, client: Plan, metrics: ServerMetrics | None) -> LoadSummary:
    """Run the load (its live figures on a terminal); a failure is one line."""
    from servebench.clients.base import InferenceError
    from servebench.clients.probe import explain
    from servebench.load import Measuring, run

    def on_measuring(event: LoadEvent) -> None:
        if isinstance(event, Measuring) and metrics is not None:
            metrics.start()

    try:
        with _live_display(o.json_out is None, o.generators) as on_progress:
            return run(
                client.load,
                records=o.records,
                # Only what listens: a subscriber makes the load count its requests live.
                subscribers=tuple(
                    s
                    for s in (on_measuring if metrics is not None else None, on_progress)
                    if s is not None
                ),
                live=on_progress is not None,
            )
    except InferenceError as exc:  # the server went away after the check above
        raise fail(asyncio.run(explain(exc, client.protocol, o.url, o.model))) from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    except (RuntimeError, OSError) as exc:  # a worker process, or the records file, failed
        raise fail(str(exc), EXIT_FAILED) from None


def _write_json(path: Path, summary: LoadSummary, server: dict[str, Any] | None) -> None:
    document = summary.to_dict()
    document["confidence"] = summary.confidence()
    if server is not None:
        document["server"] = server
    path.write_text(json.dumps(document, indent=2) + "\n")


def _headers(items: list[str]) -> dict[str, str]:
    """`--header 'Name: value'`s."""
    headers = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {item!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


@contextlib.contextmanager
def _live_display(wanted: bool, generators: int) -> Iterator[Subscriber | None]:
    """The load's live figures as one line that updates in place, on a terminal only (the
    final table replaces it)."""
    from rich.console import Console
    from rich.live import Live

    from servebench.load import Progress

    console = Console()
    if not wanted or not console.is_terminal:
        yield None
        return
    starting = f"starting {generators} generators …" if generators > 1 else "starting …"
    with Live(starting, console=console, transient=True) as live:

        def show(event: LoadEvent) -> None:
            if isinstance(event, Progress):
                live.update(live_line(event.figures))

        yield show


def _server_rows(summary: LoadSummary, server: dict[str, Any]) -> list[tuple[str, str]]:
    """The server's figures per request (means over the measured part of the load)."""
    from servebench.telemetry.aggregate import client_minus_server_s

    def count(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    rows = [
        (
            "server requests (ok / failed)",
            f"{count(server.get('server_requests'))} / {count(server.get('server_failures'))}",
        ),
        (
            "server avg batch",
            "-" if server.get("server_avg_batch") is None else f"{server['server_avg_batch']:.2f}",
        ),
        ("server request (ms)", millis(server.get("server_request_s"))),
        ("  queue (ms)", millis(server.get("server_queue_s"))),
        ("  compute input (ms)", millis(server.get("server_compute_input_s"))),
        ("  compute infer (ms)", millis(server.get("server_compute_infer_s"))),
        ("  compute output (ms)", millis(server.get("server_compute_output_s"))),
    ]
    if summary.ok:
        rows.append(
            (
                "client - server (ms)",
                millis(client_minus_server_s(summary.latency_mean, server)),
            )
        )
    return rows
