"""One trial: a client through the trial's link to a running server, a measured load with
telemetry beside it, and the trial's summary row.

Records go to the trial's own Parquet file as they are measured; the row is built by the
one row builder (`servebench.trial_row`) from the load's summary, the telemetry
aggregates, the model's counted size, the link and the price.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from model_zoo.counting import count
from model_zoo.imports import ImportedModel, ServedModel
from servebench.clients.base import ErrorKind, InferenceError
from servebench.common.errors import ServebenchError
from servebench.common.quantiles import CONFIDENCE
from servebench.common.verdict_codes import UNUSABLE_STEP, VerdictCode
from servebench.load import (
    EarlyStopSettings,
    LoadControl,
    LoadEvent,
    LoadPlan,
    LoadSettings,
    LoadSummary,
    Measuring,
    ParquetRecordWriter,
    StabilitySettings,
    Target,
    TraceArrivals,
    constant,
    poisson,
    run,
)
from servebench.load.engine import SERVER_UNREACHABLE
from servebench.load.events import Subscriber
from servebench.netem import LinkProfile
from servebench.pricing import InstancePrice
from servebench.results import TrialRow
from servebench.scenario.deploy import client_target
from servebench.scenario.linked import ClientRecipe, TrialClients
from servebench.scenario.plan import ModelMix, Trial
from servebench.scenario.schema import Scenario
from servebench.scenario.search import search_max_rate
from servebench.servers.base import Server
from servebench.servers.docker_engine import DockerServer, connect_docker
from servebench.telemetry import ContainerStatsSampler, TelemetryRecorder, TelemetryRow
from servebench.telemetry.interference import InterferenceRecord, InterferenceSampler
from servebench.telemetry.sampler import SamplerUnavailable
from servebench.trial_row import (
    DIRECT,
    ModelColumns,
    Search,
    Slo,
    TrialCoordinates,
    WireBytes,
    build_row,
    slo_judgement,
)


class ServerGoneError(ServebenchError, RuntimeError):
    """The server stopped answering (refused or dropped every request) during the trial."""


@dataclass
class TrialContext:
    """What every trial of one server setting shares."""

    scenario: Scenario
    base_dir: Path
    server: Server
    records_path: Callable[[str], Path]
    host_peak_flops: float | None
    price: InstancePrice | None
    # The run's: a stop (Ctrl-C) ends the running load, keeping what it measured, and any
    # load after it at once.
    control: LoadControl
    # Model id -> the name the server serves it under for this trial's setting (settings
    # served side by side have names of their own: `deploy.ServerGroup`); absent: its id.
    model_names: Mapping[str, str] = field(default_factory=dict)
    # The run's sampler of what disturbs a measured window from outside (None: not judged).
    interference: InterferenceSampler | None = None
    # Who else hears every load's events (the scenario runner).
    subscribers: tuple[Subscriber, ...] = ()

    def served(self, model: str) -> str:
        return self.model_names.get(model, model)


@dataclass
class TrialOutcome:
    row: TrialRow
    telemetry: list[TelemetryRow]


def _arrivals(scenario: Scenario, rate: float | None, base_dir: Path):
    workload = scenario.workload
    if workload.trace is not None:
        trace = workload.trace if workload.trace.is_absolute() else base_dir / workload.trace
        return TraceArrivals.from_file(trace)
    if workload.arrival == "poisson":
        return poisson(rate, seed=scenario.seed)
    return constant(rate)


def load_settings(
    scenario: Scenario, trial: Trial, trial_id: str, base_dir: Path, rate: float | None = None
) -> LoadSettings:
    w = scenario.workload
    closed = trial.level.kind == "concurrency"
    stability = (
        StabilitySettings(
            window=w.stability.window_s,
            tolerance=w.stability.tolerance,
            max_windows=w.stability.max_windows,
            percentile=scenario.slo.percentile if scenario.slo else 99.0,
        )
        if w.stability
        else None
    )
    level_rate = rate if rate is not None else trial.level.value
    return LoadSettings(
        arrivals=None if closed else _arrivals(scenario, level_rate, base_dir),
        concurrency=int(trial.level.value) if closed else None,
        think_time=w.think_time_s,
        duration=None if stability else w.duration_s,
        count=None if stability else w.requests,
        warmup=w.warmup_s,
        stability=stability,
        timeout=w.timeout_s,
        batch_size=trial.batch_size,
        seed=scenario.seed,
        trial_id=trial_id,
        late_threshold=w.late_threshold_ms / 1e3,
        late_limit=w.late_limit,
        rate_tolerance=w.rate_tolerance,
        lag_ratio=w.lag_ratio,
        early_stop=_early_stop(scenario),
        confidence=w.stop.confidence if w.stop else CONFIDENCE,
        generators=w.generators.count if w.generators else 1,
        scheduler=w.generators.scheduler if w.generators else None,
        input_data=scenario.input_data(base_dir),
    )


def _early_stop(scenario: Scenario) -> EarlyStopSettings | None:
    """`workload.stop` as the engine takes it, held to the scenario's SLO."""
    stop, slo = scenario.workload.stop, scenario.slo
    if stop is None or slo is None:
        return None
    return EarlyStopSettings(
        percentile=slo.percentile,
        bound_s=slo.latency_ms / 1e3,
        min_duration=stop.min_duration_s,
        min_requests=stop.min_requests,
    )


class TrialSink:
    """Writes records to the trial's Parquet file and keeps the byte totals the row needs,
    so nothing is read back from a file still being written. (Latency percentiles come
    from the load's summary, which holds the latencies it summarized.)"""

    def __init__(self, path: Path):
        self.writer = ParquetRecordWriter(path)
        self.request_bytes = 0
        self.response_bytes = 0
        self.rows = 0

    def write(self, batch) -> None:
        self.writer.write(batch)
        self.request_bytes += int(batch.column("request_bytes").to_numpy().sum())
        self.response_bytes += int(batch.column("response_bytes").to_numpy().sum())
        self.rows += batch.num_rows

    def close(self) -> None:
        self.writer.close()

    @property
    def wire(self) -> WireBytes:
        return WireBytes(self.rows, self.request_bytes, self.response_bytes)


async def run_trial(trial: Trial, ctx: TrialContext, trial_id: str | None = None) -> TrialOutcome:
    """Measure one trial (as the replicate `trial_id`: its records' and row's id, the
    trial's own by default); exceptions propagate (the runner marks the trial failed)."""
    scenario = ctx.scenario
    trial_id = trial_id or trial.id
    clients, targets = trial_clients(trial, ctx)
    with ExitStack() as stack:
        sink = TrialSink(ctx.records_path(trial_id))
        stack.callback(sink.close)
        recorder = server_recorder(ctx.server, trial_id).start()
        stack.callback(recorder.stop)
        closed = trial.level.kind == "concurrency"
        window = _InterferenceWindow(ctx)
        stack.callback(window.close)

        def on_event(event: LoadEvent) -> None:
            # The measured window opens (in a thread: a scrape blocks). A search keeps the
            # mark of its first step: its telemetry spans every step.
            if isinstance(event, Measuring) and recorder.measured_from is None:
                recorder.mark_measured(quiet=closed)
                window.open()

        async def measure(rate: float | None, trial_id: str) -> LoadSummary:
            settings = load_settings(scenario, trial, trial_id, ctx.base_dir, rate)
            try:
                summary = await asyncio.to_thread(
                    functools.partial(
                        run,
                        LoadPlan(settings, clients, targets),
                        records=sink,
                        control=ctx.control,
                        subscribers=(on_event, *ctx.subscribers),
                        handle_signals=False,  # the scenario runner's, through ctx.control
                    )
                )
            except InferenceError as exc:
                if exc.kind not in _GONE_ERRORS:
                    raise
                # Each load connects anew (a search's steps too): a refused connect is
                # the news a load of refusals would bring, sooner.
                raise ServerGoneError(f"{SERVER_UNREACHABLE}: {exc.detail or exc}") from None
            link = clients.describe(settings.generators)
            if summary.gang is not None and link is not None:
                summary.gang = replace(summary.gang, link=link)
            return summary

        search = None
        if trial.level.kind == "search":
            summary, search = await _search(trial, trial_id, ctx, measure)
        else:
            summary = await measure(None, trial_id)
        interference = window.close()
        recorder.stop()
        sink.close()
        telemetry = recorder.snapshot()
        # A mix's server counters are those of every model (only its models are sent to).
        model = None if isinstance(trial.model, ModelMix) else ctx.served(trial.model.id)
        row = trial_row(
            trial, ctx, trial.link, summary, recorder.summary(model), sink, search, interference
        )
        return TrialOutcome(row, telemetry)


def _recipe(trial: Trial, ctx: TrialContext, model: str) -> ClientRecipe:
    """How the trial's client for `model` is made: the protocol its server speaks."""
    return ClientRecipe(
        trial.setting.server.client_protocol.name,
        ctx.served(model),
        ctx.scenario.workload.timeout_s,
    )


def trial_clients(trial: Trial, ctx: TrialContext) -> tuple[TrialClients, tuple[Target, ...]]:
    """The trial's client source and its load's targets: its one model (records that name
    none), or each model of its mix with its weight. Each part of the load makes its own
    clients from the source, through its own emulator of the trial's link where it has one
    (`scenario.linked`)."""
    transport = trial.setting.server.protocol
    target, url = client_target(ctx.server, transport)
    if isinstance(trial.model, ModelMix):
        weights = [weight for _, weight in trial.model.members]  # trial.models' order
        targets = tuple(
            Target(spec.id, weight) for spec, weight in zip(trial.models, weights, strict=True)
        )
    else:
        targets = (Target(),)
    recipes = tuple(
        (t.model, _recipe(trial, ctx, spec.id))
        for t, spec in zip(targets, trial.models, strict=True)
    )
    link = trial.link if trial.link.name != DIRECT else None
    return TrialClients(recipes, transport, url, target, ctx.scenario.seed, link), targets


def server_recorder(server: Server, trial_id: str) -> TelemetryRecorder:
    """Telemetry for one trial on `server`: a server in a container is watched through its
    engine's stats (its own client, made on the recorder's side), any other through its
    process tree where servebench knows its pid."""
    container = None
    if isinstance(server, DockerServer) and server.container_id is not None:
        container = functools.partial(ContainerStatsSampler, server.container_id, connect_docker)
    return TelemetryRecorder.for_server(
        pid=None if container is not None else server.pid,
        metrics_url=server.endpoints.metrics_url,
        container=container,
        trial_id=trial_id,
    )


async def _search(trial, trial_id, ctx, measure) -> tuple[LoadSummary, Search]:
    slo = ctx.scenario.slo
    assert slo is not None  # validation requires an SLO for search
    held_to = Slo(slo.percentile, slo.latency_ms / 1e3)
    settings = ctx.scenario.workload.search_settings
    steps = 0

    async def one(rate: float):
        nonlocal steps
        step_id = f"{trial_id}.s{steps}"
        steps += 1
        summary = await measure(rate, step_id)
        if gone := _server_gone(summary):
            # Every lower rate would meet the same dead address: the search ends here, and
            # the trial fails rather than report a max rate for a server that is gone.
            raise ServerGoneError(f"search stopped at {rate:g} req/s: {gone}")
        # The step's SLO percentile and its judgement, of the requests its summary (and
        # so its row) covers.
        latency = summary.latency_at(slo.percentile)
        usable = not UNUSABLE_STEP.intersection(summary.reason_codes)
        return latency, slo_judgement(summary, held_to), usable, summary

    result = await search_max_rate(
        one,
        min_rate=settings.min_rate, max_rate=settings.max_rate,
        precision=settings.precision, max_steps=settings.max_steps,
        should_stop=lambda: ctx.control.requested is not None,
    )  # fmt: skip
    chosen = result.best or result.steps[-1]
    return chosen.result, Search(result.max_rate, result.steps)


_GONE_KINDS = {"connection_refused", "connection_reset"}
_GONE_ERRORS = {ErrorKind.CONNECTION_REFUSED, ErrorKind.CONNECTION_RESET}


def _server_gone(summary: LoadSummary) -> str | None:
    """Why the load says nobody serves at the address any more, or None.

    The engine stops a load after a while of nothing but refusals; a short step at a low
    rate can end before that, with every request refused: the same news."""
    if VerdictCode.SERVER_UNREACHABLE in summary.reason_codes:
        return summary.stop_reason
    if summary.count and not summary.ok and set(summary.errors_by_kind) <= _GONE_KINDS:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors_by_kind.items()))
        return f"{SERVER_UNREACHABLE}: all {summary.count} requests failed ({kinds})"
    return None


def trial_row(
    trial: Trial,
    ctx: TrialContext,
    profile: LinkProfile,
    summary: LoadSummary,
    telemetry: dict,
    sink: TrialSink,
    search: Search | None = None,
    interference: InterferenceRecord | None = None,
) -> TrialRow:
    """The trial's trials.csv row, from the one row builder."""
    slo = ctx.scenario.slo
    return build_row(
        coordinates(trial),
        summary,
        model=model_columns(trial.model),
        link=profile,
        wire=sink.wire,
        telemetry=telemetry,
        host_peak_flops=ctx.host_peak_flops,
        price=ctx.price,
        slo=Slo(slo.percentile, slo.latency_ms / 1e3) if slo is not None else None,
        search=search,
        interference=interference,
    )


class _InterferenceWindow:
    """The trial's measured window as `ctx.interference` sees it: opened with the load's
    measured part, closed when the load ends (a search's window spans its steps, as its
    telemetry does). What is ours is excluded: the server's process tree and this process
    with its children (a local gang's workers). A server whose processes are not known here
    (remote, or gone) is not judged: its CPU would read as interference."""

    def __init__(self, ctx: TrialContext) -> None:
        self.sampler = ctx.interference if ctx.server.pid is not None else None
        self.server_pid = ctx.server.pid
        self.opened = False

    def open(self) -> None:
        if self.sampler is None or self.opened:
            return
        try:
            self.sampler.start(exclude_trees=[self.server_pid, os.getpid()])
            self.opened = True
        except SamplerUnavailable:
            self.sampler = None  # the server is gone: the trial says so, not this window

    def close(self) -> InterferenceRecord | None:
        if self.sampler is None or not self.opened:
            return None
        self.opened = False
        return self.sampler.stop()


def coordinates(trial: Trial) -> TrialCoordinates:
    """Which trial of the plan, and how its server is reached, as its row says."""
    server = trial.setting.server
    return TrialCoordinates(
        trial_id=trial.id,
        index=trial.index,
        **trial.coordinates,
        launch=server.launch,
        protocol=server.protocol,
        settings_json=json.dumps(trial.setting.values, sort_keys=True),
    )


def model_columns(model: ServedModel | ModelMix, *, counted: bool = True) -> ModelColumns:
    """A model's row columns: its family and, `counted`, its size.

    A generated model is counted from its spec (`model_zoo.counting`); a user's file from
    its ONNX graph where it has one (`model_zoo.imports.counts`), its columns empty
    (unknown) where the graph does not allow; it has no family, depth or width, and its
    `format` is the file's (onnx, keras, triton, ...). A mix has no one family or size:
    its columns are empty (`mix_json` splits the trial by model).
    """
    if isinstance(model, ModelMix):
        return ModelColumns()
    if isinstance(model, ImportedModel):
        if not counted:
            return ModelColumns(format=model.source_format)
        graph = model.counts
        return ModelColumns(
            format=model.source_format,
            params=graph.params,
            flops_per_sample=float(graph.flops) if graph.flops is not None else None,
            weight_bytes=graph.weight_bytes,
            activation_bytes=graph.activation_bytes,
        )
    if not counted:
        return ModelColumns(layer_type=model.layer_type, depth=model.depth, width=model.width)
    cost = count(model)
    return ModelColumns(
        layer_type=model.layer_type,
        depth=model.depth,
        width=model.width,
        params=cost.params,
        flops_per_sample=cost.flops,
        weight_bytes=cost.weight_bytes,
        activation_bytes=cost.activation_bytes,
    )
