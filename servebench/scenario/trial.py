"""One trial: a client through the trial's link to a running server, a measured load with
telemetry beside it, and the trial's summary row.

Records go to the trial's own Parquet file as they are measured; the row is built from
the load's summary, the telemetry aggregates, the model's cost figures and the link.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from model_zoo.counting import count
from servebench.clients.factory import create_client
from servebench.clients.registry import for_server
from servebench.common.errors import ServebenchError
from servebench.load import (
    LoadEngine,
    LoadSettings,
    LoadSummary,
    ParquetRecordWriter,
    StabilitySettings,
    TraceArrivals,
    constant,
    poisson,
    run_load,
)
from servebench.load.engine import SERVER_UNREACHABLE
from servebench.load.summary import MAX_ERROR_SHARE
from servebench.netem import LinkEmulator, LinkProfile
from servebench.pricing import InstancePrice, cost_per_million
from servebench.results import TrialRow
from servebench.scenario.deploy import client_target
from servebench.scenario.plan import Trial
from servebench.scenario.schema import Scenario
from servebench.scenario.search import search_max_rate
from servebench.servers.base import Server
from servebench.servers.docker_engine import DockerServer, connect_docker
from servebench.telemetry import (
    ContainerStatsSampler,
    TelemetryRecorder,
    TelemetryRow,
    client_minus_server_s,
)

DIRECT = "direct"


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
    on_engine: Callable[[LoadEngine | None], None]
    stop_requested: Callable[[], bool]


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
    )


class TrialSink:
    """Writes records to the trial's Parquet file and keeps what the row needs in memory:
    successful latencies per trial id (for any SLO percentile, and per search step) and
    the byte totals, so nothing is read back from a file still being written."""

    def __init__(self, path: Path):
        self.writer = ParquetRecordWriter(path)
        self.latencies: dict[str, list[np.ndarray]] = {}
        self.request_bytes = 0
        self.response_bytes = 0
        self.rows = 0

    def write(self, batch) -> None:
        self.writer.write(batch)
        ok = batch.column("ok").to_numpy(zero_copy_only=False)
        latency = batch.column("latency").to_numpy(zero_copy_only=False)
        trial_id = batch.column("trial_id")[0].as_py() if batch.num_rows else ""
        self.latencies.setdefault(trial_id, []).append(latency[ok])
        self.request_bytes += int(batch.column("request_bytes").to_numpy().sum())
        self.response_bytes += int(batch.column("response_bytes").to_numpy().sum())
        self.rows += batch.num_rows

    def close(self) -> None:
        self.writer.close()

    def percentile(self, trial_id: str, q: float) -> float:
        parts = self.latencies.get(trial_id, [])
        values = np.concatenate(parts) if parts else np.empty(0)
        return float(np.percentile(values, q)) if values.size else float("nan")


async def run_trial(trial: Trial, ctx: TrialContext) -> TrialOutcome:
    """Measure one trial; exceptions propagate (the runner marks the trial failed)."""
    scenario = ctx.scenario
    server_section = trial.setting.server
    protocol = for_server(server_section.kind, server_section.protocol).name
    target, direct_url = client_target(ctx.server, server_section.protocol)
    profile = trial.link
    records_path = ctx.records_path(trial.id)
    async with AsyncExitStack() as stack:
        url = direct_url
        if profile.name != DIRECT:
            address = await stack.enter_async_context(
                LinkEmulator(profile, target, seed=scenario.seed)
            )
            url = f"http://{address}" if server_section.protocol == "http" else str(address)
        client = create_client(protocol, url, trial.model.id, timeout=scenario.workload.timeout_s)
        await client.connect()
        stack.push_async_callback(client.close)
        payload = client.make_payload(trial.batch_size, scenario.seed)
        sink = TrialSink(records_path)
        stack.callback(sink.close)
        recorder = server_recorder(ctx.server, trial.id).start()
        stack.callback(recorder.stop)

        loop = asyncio.get_running_loop()
        closed = trial.level.kind == "concurrency"

        async def window_opens() -> None:
            # Before the first measured send (the engine waits for it); off the loop, since
            # a scrape blocks. A search keeps the mark of its first step: its telemetry
            # spans every step.
            if recorder.measured_from is None:
                await loop.run_in_executor(
                    None, functools.partial(recorder.mark_measured, quiet=closed)
                )

        async def measure(rate: float | None, trial_id: str) -> LoadSummary:
            settings = load_settings(scenario, trial, trial_id, ctx.base_dir, rate)
            try:
                return await run_load(
                    client,
                    settings,
                    sink=sink,
                    payload=payload,
                    on_engine=ctx.on_engine,
                    on_measure_start=window_opens,
                )
            finally:
                ctx.on_engine(None)

        extra: dict[str, Any] = {}
        if trial.level.kind == "search":
            summary, extra = await _search(trial, ctx, measure, sink)
        else:
            summary = await measure(None, trial.id)
        recorder.stop()
        sink.close()
        telemetry = recorder.snapshot()
        row = build_row(trial, ctx, profile, summary, recorder.summary(trial.model.id), sink, extra)
        return TrialOutcome(row, telemetry)


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


async def _search(trial, ctx, measure, sink: TrialSink):
    slo = ctx.scenario.slo
    assert slo is not None  # validation requires an SLO for search
    bound = slo.latency_ms / 1e3
    settings = ctx.scenario.workload.search_settings
    steps = 0

    async def one(rate: float):
        nonlocal steps
        step_id = f"{trial.id}.s{steps}"
        steps += 1
        summary = await measure(rate, step_id)
        if gone := _server_gone(summary):
            # Every lower rate would meet the same dead address: the search ends here, and
            # the trial fails rather than report a max rate for a server that is gone.
            raise ServerGoneError(f"search stopped at {rate:g} req/s: {gone}")
        latency = sink.percentile(step_id, slo.percentile)
        # A late generator is already charged in the latency (measured from the intended
        # send time), so only errors make a step unusable: a rate that fails requests is
        # not a rate the server sustains.
        usable = summary.count > 0 and summary.errors <= MAX_ERROR_SHARE * summary.count
        return latency, usable, summary

    result = await search_max_rate(
        one, bound,
        min_rate=settings.min_rate, max_rate=settings.max_rate,
        precision=settings.precision, max_steps=settings.max_steps,
        should_stop=ctx.stop_requested,
    )  # fmt: skip
    chosen = result.best or result.steps[-1]
    extra = {
        "max_rate": result.max_rate,
        # Each step: rate, SLO-percentile latency (s), met?, and why an invalid run was invalid.
        "search_steps": json.dumps(
            [[s.rate, s.latency, s.met, "; ".join(s.result.reasons)] for s in result.steps]
        ),
    }
    return chosen.result, extra


_GONE_KINDS = {"connection_refused", "connection_reset"}


def _server_gone(summary: LoadSummary) -> str | None:
    """Why the load says nobody serves at the address any more, or None.

    The engine stops a load after a while of nothing but refusals; a short step at a low
    rate can end before that, with every request refused: the same news."""
    if summary.stop_reason and SERVER_UNREACHABLE in summary.stop_reason:
        return summary.stop_reason
    if summary.count and not summary.ok and set(summary.errors_by_kind) <= _GONE_KINDS:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors_by_kind.items()))
        return f"{SERVER_UNREACHABLE}: all {summary.count} requests failed ({kinds})"
    return None


def build_row(
    trial: Trial,
    ctx: TrialContext,
    profile: LinkProfile,
    summary: LoadSummary,
    telemetry: dict[str, Any],
    sink: TrialSink,
    extra: dict[str, Any],
) -> TrialRow:
    """The trial's trials.csv row (columns: `servebench.results.TRIAL_SCHEMA`).

    The load summary's and telemetry's fields go in under their own names, so a field
    either adds must also be added to the schema (`RunDirectory` refuses the row else)."""
    scenario = ctx.scenario
    cost = count(trial.model)
    stats = summary.to_dict()
    row: TrialRow = {
        "trial_id": trial.id,
        "index": trial.index,
        "status": "ok",
        "reason": "",
        "verdict": stats.pop("verdict"),
        "verdict_reasons": "; ".join(stats.pop("reasons")),
        "verdict_warnings": "; ".join(stats.pop("warnings")),
        **trial.coordinates,
        "launch": trial.setting.server.launch,
        "protocol": trial.setting.server.protocol,
        "settings_json": json.dumps(trial.setting.values, sort_keys=True),
        "layer_type": trial.model.layer_type,
        "depth": trial.model.depth,
        "width": trial.model.width,
        "params": cost.params,
        "flops_per_sample": cost.flops,
        "weight_bytes": cost.weight_bytes,
        "activation_bytes": cost.activation_bytes,
        "link_rtt_s": profile.rtt_s,
        "link_down_mbps": profile.down_mbps,
        "link_up_mbps": profile.up_mbps,
    }
    stats.pop("windows", None)
    stats["errors_by_kind"] = json.dumps(stats["errors_by_kind"])
    row.update({k: v for k, v in stats.items() if k not in ("batch_size",)})
    row.update(_bytes_and_link_time(sink, profile))
    row.update({k: v for k, v in telemetry.items() if k != "gpu_source"})
    row["client_minus_server_s"] = (
        client_minus_server_s(row["latency_mean"], telemetry)
        if row.get("latency_mean") is not None
        else None
    )
    row["host_peak_flops"] = ctx.host_peak_flops
    if ctx.price is not None:
        row["instance"] = ctx.price.instance_type
        row["usd_per_hour"] = ctx.price.usd_per_hour
        ips = row.get("throughput_ips") or 0.0
        row["cost_per_million"] = cost_per_million(ips, ctx.price.usd_per_hour) if ips > 0 else None
    if scenario.slo is not None:
        row["slo_percentile"] = scenario.slo.percentile
        row["slo_bound_s"] = scenario.slo.latency_ms / 1e3
        if trial.level.kind != "search":
            row["slo_latency_s"] = sink.percentile(trial.id, scenario.slo.percentile)
            row["slo_met"] = bool(row["slo_latency_s"] <= row["slo_bound_s"])
    row.update(extra)
    return row


def _bytes_and_link_time(sink: TrialSink, profile: LinkProfile) -> dict[str, Any]:
    """Mean wire sizes, and the time the link alone should add: RTT + bytes / bandwidth."""
    if sink.rows == 0:
        return {}
    request = sink.request_bytes / sink.rows
    response = sink.response_bytes / sink.rows
    link_time = profile.rtt_s
    if profile.up_mbps:
        link_time += request * 8 / (profile.up_mbps * 1e6)
    if profile.down_mbps:
        link_time += response * 8 / (profile.down_mbps * 1e6)
    return {
        "request_bytes_mean": request,
        "response_bytes_mean": response,
        "link_time_analytic_s": link_time if profile.name != DIRECT else 0.0,
    }
