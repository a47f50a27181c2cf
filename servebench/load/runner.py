"""Running a load: in the caller's event loop, in a fresh (uv)loop, or over several processes.

`run_load` is for callers that already have a loop and a connected client (the scenario
runner). `run` owns everything: it builds the client from a factory, picks uvloop when
installed, turns SIGINT/SIGTERM into a graceful stop (what was measured is kept and the
verdict says the run stopped early), and with `processes > 1` splits the schedule over
worker processes, each with its own client and loop, starting on one shared wall-clock
instant, then merges their records.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import pickle
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from servebench.clients.base import InferenceClient, Payload
from servebench.clients.input_data import InputData
from servebench.common.verdict_codes import VerdictCode
from servebench.load.engine import EngineReport, LoadEngine
from servebench.load.mix import Mix
from servebench.load.records import RECORD_SCHEMA, ParquetRecordWriter, RecordSink
from servebench.load.settings import LoadSettings
from servebench.load.stats import Columns, columns_from_table, mix_figures, summarize
from servebench.load.summary import LoadSummary, judge

log = logging.getLogger(__name__)

ClientFactory = Callable[[], InferenceClient]
T = TypeVar("T")

# The verdict checks about the generator itself, logged as they are found: a late
# generator is the user's machine to fix, not the server's result.
_GENERATOR_LATE = {VerdictCode.RATE_SHORT, VerdictCode.LAG_HIGH, VerdictCode.LATE_SENDS}
# Time the workers get between "all ready" and the shared start.
_START_MARGIN = 0.25
_READY_TIMEOUT = 120.0


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


def build_payloads(
    client: InferenceClient, batch_size: int, seed: int, data: InputData | None = None
) -> list[Payload]:
    """The requests a load cycles through: a file's samples (`data`), or one seeded random
    batch; ValueError where the batch or the data does not fit the model."""
    if data is None:
        return [client.make_payload(batch_size, seed)]
    return client.make_payloads(batch_size, data)


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
        raise ValueError("load.processes: run_load runs in one loop; use run() for processes > 1")
    mix = client if isinstance(client, Mix) else None
    if payload is None:
        payload = (
            build_payloads(client, settings.batch_size, settings.seed, settings.input_data)
            if mix is None
            else ()
        )
    engine = LoadEngine(client, payload, settings, sink, on_measure_start=on_measure_start)
    if on_engine is not None:
        on_engine(engine)
    report = await engine.run()
    return summarize_reports(settings, [report], mix)


def run(
    factory: ClientFactory,
    settings: LoadSettings,
    *,
    records: str | Path | RecordSink | None = None,
    use_uvloop: bool | None = None,
    handle_signals: bool = True,
    on_measure_start: Callable[[], None] | None = None,
) -> LoadSummary:
    """Run one load from start to end; `records` is a Parquet path or a sink (or None).

    `on_measure_start` is called (in a thread: it may block, e.g. on a scrape of the
    server's counters) when the measured window opens. In one process that is before the
    first measured send (`LoadEngine`); worker processes cannot wait for a caller, so with
    `processes > 1` it is called when the warm-up ends by the shared wall clock, and
    requests in flight around that instant may fall on either side of it.
    """
    sink, owned = _open_sink(records)
    try:
        if settings.processes > 1:
            return _run_processes(factory, settings, sink, use_uvloop, on_measure_start)
        return run_in_loop(
            _run_single(factory, settings, sink, handle_signals, on_measure_start), use_uvloop
        )
    finally:
        if owned and sink is not None:
            sink.close()


def run_in_loop(coro: Coroutine[Any, Any, T], use_uvloop: bool | None = None) -> T:
    """Run a coroutine in a fresh loop: uvloop when installed (or when asked), else asyncio."""
    factory = _loop_factory(use_uvloop)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def _loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if use_uvloop is False:
        return None
    try:
        import uvloop
    except ImportError:
        if use_uvloop:
            raise ValueError("use_uvloop: uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def _open_sink(records: str | Path | RecordSink | None) -> tuple[RecordSink | None, bool]:
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
) -> LoadSummary:
    client = factory()
    await client.connect()
    try:
        payload = build_payloads(client, settings.batch_size, settings.seed, settings.input_data)
        hook = None
        if on_measure_start is not None:
            loop = asyncio.get_running_loop()

            async def hook() -> None:
                await loop.run_in_executor(None, on_measure_start)

        engine = LoadEngine(client, payload, settings, sink, on_measure_start=hook)
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


# -- several processes -----------------------------------------------------------------


def _run_processes(
    factory: ClientFactory,
    settings: LoadSettings,
    sink: RecordSink | None,
    use_uvloop: bool | None,
    on_measure_start: Callable[[], None] | None,
) -> LoadSummary:
    try:
        pickle.dumps(factory)
    except Exception as exc:
        raise ValueError(
            "load.processes: worker processes need a client factory that pickles "
            f"(e.g. functools.partial(create_client, ...)); {exc}"
        ) from None
    n = settings.processes
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="servebench-load-") as tmp:
        parts = [Path(tmp) / f"part-{i}.parquet" for i in range(n)]
        conns, procs = [], []
        for i in range(n):
            here, there = ctx.Pipe()
            proc = ctx.Process(
                target=_worker_main,
                args=(factory, settings, i, str(parts[i]), there, use_uvloop),
                name=f"servebench-load-{i}",
                daemon=True,
            )
            proc.start()
            there.close()
            conns.append(here)
            procs.append(proc)
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread:  # on Ctrl-C the workers stop themselves and report
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        timer: threading.Timer | None = None
        try:
            start_at = _start_workers(conns, procs)
            if on_measure_start is not None:
                timer = threading.Timer(
                    max(0.0, start_at + settings.warmup - time.time()), on_measure_start
                )
                timer.daemon = True
                timer.start()
            reports = []
            for i, conn in enumerate(conns):
                reports.append(_collect(i, conn, procs[i], settings, start_at, parts[i], sink))
        finally:
            if timer is not None:  # a run stopped inside its warm-up never opened the window
                timer.cancel()
                timer.join()
            if main_thread:
                signal.signal(signal.SIGINT, previous)
            for proc in procs:
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
    return summarize_reports(settings, reports)


def _start_workers(conns: list[Any], procs: list[Any]) -> float:
    deadline = time.monotonic() + _READY_TIMEOUT
    for i, conn in enumerate(conns):
        if not conn.poll(max(0.0, deadline - time.monotonic())):
            _abort(conns)
            raise RuntimeError(f"load worker {i}: not ready after {_READY_TIMEOUT:.0f} s")
        message = conn.recv()
        if message[0] != "ready":
            _abort(conns)
            raise RuntimeError(f"load worker {i} failed before the start: {message[1]}")
    start_at = time.time() + _START_MARGIN
    for conn in conns:
        conn.send(start_at)
    return start_at


def _abort(conns: list[Any]) -> None:
    for conn in conns:
        with suppress(OSError, BrokenPipeError):
            conn.send(None)


def _collect(
    index: int,
    conn: Any,
    proc: Any,
    settings: LoadSettings,
    start_at: float,
    part: Path,
    sink: RecordSink | None,
) -> EngineReport:
    """A worker's report, rebuilt from its records file so a failed worker still counts."""
    try:
        message = conn.recv()
    except EOFError:
        message = ("error", f"exited with code {proc.exitcode} without a report")
    if message[0] == "done":
        report: EngineReport = message[1]
    else:
        report = EngineReport(
            columns=Columns.concat([]), stop_reason=f"load worker {index} failed: {message[1]}"
        )
    try:
        table = pq.read_table(part)
    except (OSError, pa.ArrowInvalid) as exc:
        report.stop_reason = f"load worker {index}: records lost ({exc})"
        return report
    report.columns = columns_from_table(
        table, origin=start_at, latency_from_send=settings.mode == "closed"
    )
    if sink is not None:
        for batch in table.to_batches(max_chunksize=65536):
            sink.write(pa.RecordBatch.from_arrays(batch.columns, schema=RECORD_SCHEMA))
    return report


def _worker_main(
    factory: ClientFactory,
    settings: LoadSettings,
    index: int,
    part: str,
    conn: Any,
    use_uvloop: bool | None,
) -> None:
    """One worker process: connect, report ready, wait for the start, run its share."""

    async def main() -> EngineReport:
        client = factory()
        await client.connect()
        try:
            payload = build_payloads(
                client, settings.batch_size, settings.seed, settings.input_data
            )
            conn.send(("ready",))
            start_at = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            if start_at is None:
                raise RuntimeError("aborted before the start")
            with ParquetRecordWriter(part) as writer:
                engine = LoadEngine(
                    client,
                    payload,
                    settings,
                    writer,
                    start_at=start_at,
                    part=(index, settings.processes),
                )
                with _graceful_stop(engine, True):
                    return await engine.run()
        finally:
            await client.close()

    try:
        report = run_in_loop(main(), use_uvloop)
    except BaseException as exc:
        detail = f"{type(exc).__name__}: {exc}"
        log.debug("load worker %d failed:\n%s", index, traceback.format_exc())
        with suppress(OSError, BrokenPipeError):
            conn.send(("error", detail))
        return
    # Columns travel through the records file, not the pipe: keep the message small.
    report.columns = Columns.concat([])
    conn.send(("done", report))
