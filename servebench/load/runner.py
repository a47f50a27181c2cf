"""Running a load in this process: in the caller's event loop, or in a fresh (uv)loop.

`run_load` is for callers that already have a loop and a connected client (the scenario
runner). `run_in_process` owns everything: it builds the client from a factory, picks
uvloop when installed and turns SIGINT/SIGTERM into a graceful stop (what was measured is
kept and the verdict says the run stopped early). It is one of the two executors
`load.dispatch.run` chooses between; the other, a gang of generators on Dask
(`load.gang`), builds on what is shared here: one summary from several engines' reports
(`summarize_reports`), the payloads a load's settings ask for (`load_payloads`), the loop
and the record sink.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from servebench.clients.base import InferenceClient, Payload
from servebench.clients.payloads import build_payloads
from servebench.common.verdict_codes import VerdictCode
from servebench.load.engine import EngineReport, LoadEngine, Stoppable
from servebench.load.mix import Mix
from servebench.load.records import ParquetRecordWriter, RecordSink
from servebench.load.settings import LoadSettings
from servebench.load.stats import Columns, mix_figures, summarize
from servebench.load.summary import LoadSummary, judge

log = logging.getLogger(__name__)

ClientFactory = Callable[[], InferenceClient]
T = TypeVar("T")

# The verdict checks about the generator itself, logged as they are found: a late
# generator is the user's machine to fix, not the server's result.
_GENERATOR_LATE = {VerdictCode.RATE_SHORT, VerdictCode.LAG_HIGH, VerdictCode.LATE_SENDS}


def summarize_reports(
    settings: LoadSettings, reports: Sequence[EngineReport], mix: Mix | None = None
) -> LoadSummary:
    """One summary from the reports of all processes of a run, with its verdict; for a
    `mix`, with each model's figures besides (`LoadSummary.mix`)."""
    columns = Columns.concat([r.columns for r in reports])
    windows = next((r.windows for r in reports if r.windows), [])
    target = None
    if settings.arrivals is not None:
        if windows and settings.stability is not None:
            last = windows[-settings.stability.agree :]
            t0, t1 = last[0].start, last[-1].end
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
    if mix is not None:
        summary.mix = mix_figures(columns, mix.models, [t.weight for t in mix.targets])
    summary.load = settings.describe()
    summary.concurrency = settings.concurrency
    summary.batch_size = settings.batch_size
    summary.processes = settings.processes
    summary.windows = list(windows)
    summary.stable = next((r.stable for r in reports if r.stable is not None), None)
    levels = [r.slo_level for r in reports if r.slo_level is not None]  # early stop: one
    summary.slo_confidence_level = levels[0] if levels else None
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


async def load_payloads(client: InferenceClient, settings: LoadSettings) -> list[Payload]:
    """The requests a load of `settings` cycles through (`clients.payloads`), for the
    signature the connected `client` serves."""
    signature = await client.signature()
    return build_payloads(
        client.encode, signature, settings.batch_size, settings.seed, settings.input_data
    )


async def run_load(
    client: InferenceClient | Mix,
    settings: LoadSettings,
    *,
    sink: RecordSink | None = None,
    payload: Sequence[Payload] | None = None,
    on_engine: Callable[[LoadEngine], None] | None = None,
    on_measure_start: Callable[[], Awaitable[None]] | None = None,
) -> LoadSummary:
    """Run one load in the current loop with a connected client; the caller closes both.

    `on_engine` receives the engine before it starts, e.g. to wire a stop button.
    `on_measure_start` is awaited before the first measured send (see `LoadEngine`): where
    a caller reads the server's counters for the measured window. A `Mix` of models
    (connected clients, each with its payloads) runs as one load that sends each request
    to the model the mix picks.
    """
    if settings.processes != 1:
        raise ValueError("load.processes: run_load runs in one loop; use run() for a gang")
    mix = client if isinstance(client, Mix) else None
    if payload is None:
        payload = await load_payloads(client, settings) if mix is None else ()
    engine = LoadEngine(client, payload, settings, sink, on_measure_start=on_measure_start)
    if on_engine is not None:
        on_engine(engine)
    report = await engine.run()
    return summarize_reports(settings, [report], mix)


def run_in_process(
    factory: ClientFactory,
    settings: LoadSettings,
    records: str | Path | RecordSink | None,
    use_uvloop: bool | None,
    on_measure_start: Callable[[], None] | None,
    *,
    handle_signals: bool = True,
    on_engine: Callable[[Stoppable], None] | None = None,
) -> LoadSummary:
    """Run one load in this process, in a fresh loop, with a client from `factory`
    (`load.dispatch.run` says what each argument does); a `records` path is opened here
    and closed at the end."""
    sink, owned = open_sink(records)
    try:
        return run_in_loop(
            _run_single(factory, settings, sink, handle_signals, on_measure_start, on_engine),
            use_uvloop,
        )
    finally:
        if owned and sink is not None:
            sink.close()


def run_in_loop(coro: Coroutine[Any, Any, T], use_uvloop: bool | None = None) -> T:
    """Run a coroutine in a fresh loop: uvloop when installed (or when asked), else asyncio."""
    with asyncio.Runner(loop_factory=loop_factory(use_uvloop)) as runner:
        return runner.run(coro)


def loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when installed (or when asked: ValueError without it), else
    None (asyncio's own); False asks for asyncio's."""
    if use_uvloop is False:
        return None
    try:
        import uvloop
    except ImportError:
        if use_uvloop:
            raise ValueError("use_uvloop: uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def open_sink(records: str | Path | RecordSink | None) -> tuple[RecordSink | None, bool]:
    """The sink for `records` (a Parquet path or a sink), and whether the caller owns it
    (opened it here, so closes it)."""
    if records is None:
        return None, False
    if isinstance(records, str | Path):
        return ParquetRecordWriter(records), True
    return records, False


async def _run_single(
    factory: ClientFactory,
    settings: LoadSettings,
    sink: RecordSink | None,
    handle_signals: bool,
    on_measure_start: Callable[[], None] | None,
    on_engine: Callable[[Stoppable], None] | None,
) -> LoadSummary:
    client = factory()
    await client.connect()
    try:
        payload = await load_payloads(client, settings)
        hook = None
        if on_measure_start is not None:
            loop = asyncio.get_running_loop()

            async def hook() -> None:
                await loop.run_in_executor(None, on_measure_start)

        engine = LoadEngine(client, payload, settings, sink, on_measure_start=hook)
        if on_engine is not None:
            on_engine(engine)
        with _graceful_stop(engine, handle_signals):
            report = await engine.run()
        return summarize_reports(settings, [report])
    finally:
        await client.close()


class _graceful_stop:
    """SIGINT/SIGTERM stop the engine instead of killing it (main thread only)."""

    def __init__(self, engine: LoadEngine, enabled: bool):
        self.engine = engine
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.installed: list[signal.Signals] = []

    def __enter__(self) -> None:
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.engine.stop, f"interrupted by {sig.name}")
                self.installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.installed:
            loop.remove_signal_handler(sig)
