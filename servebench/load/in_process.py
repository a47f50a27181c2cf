"""The in-process executor: a load's one part, sent from this process in a fresh (uv)loop.

It is a coordinator with one part: its engine's counts are read in the same loop at the
times the stop rules and the live figures ask for (`load.rules.Coordinator`; the rules are
evaluated off the loop, since an early stop's look takes up to a few ms of integration that
would hold sends), and a stop (a rule's, or the caller's `LoadControl`) goes to the engine.
Also here: the loop (`run_in_loop`, uvloop when installed) and the record sink both
executors open (`open_sink`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from servebench.load.combine import summarize_reports
from servebench.load.engine import LoadEngine
from servebench.load.events import Events, LoadControl, Measuring, Started, Stopped
from servebench.load.executor import LoadRun
from servebench.load.live import MergedCounts
from servebench.load.plan import LoadPlan, connect_part
from servebench.load.records import ParquetRecordWriter, RecordSink
from servebench.load.rules import Coordinator, count_rules
from servebench.load.summary import LoadSummary

T = TypeVar("T")
# Longest wait between looks at the engine: how soon a stop from the caller, or the end of
# the load, is noticed by the coordinator (the engine itself stops at once).
LOOK_EVERY = 0.25


class InProcess:
    """Runs a plan of one part in this process (see the module's docstring)."""

    def run(self, load: LoadRun) -> LoadSummary:
        sink, owned = open_sink(load.records)
        try:
            return run_in_loop(_run(load.plan, sink, load.control, load.events), load.use_uvloop)
        finally:
            if owned and sink is not None:
                sink.close()


async def _run(
    plan: LoadPlan, sink: RecordSink | None, control: LoadControl, events: Events
) -> LoadSummary:
    settings = plan.settings
    loop = asyncio.get_running_loop()
    own = LoadControl()  # the load's: its rules stop it, and so does the caller's
    coordinator = Coordinator(settings, own, events)
    async with connect_part(plan, 0) as mix:
        hook = None
        if events:

            async def hook() -> None:
                # Off the loop: a subscriber may block (a scrape of the server's counters).
                await loop.run_in_executor(None, events.publish, Measuring())

        engine = LoadEngine(
            mix,
            settings,
            sink,
            on_measure_start=hook,
            counts=count_rules(settings) if coordinator.watching else None,
        )

        def stop(reason: str | None, code) -> None:
            loop.call_soon_threadsafe(engine.stop, reason, code)

        with own.listening(stop), control.listening(own.stop):
            events.publish(Started(start_at=time.time(), parts=1))
            task = loop.create_task(engine.run())
            while not task.done():
                wait = min(LOOK_EVERY, max(0.0, coordinator.due() - engine.elapsed()))
                await asyncio.wait({task}, timeout=wait)
                if task.done() or engine.elapsed() < coordinator.due():
                    continue
                merged = MergedCounts([await engine.snapshot()], [False])
                await asyncio.to_thread(coordinator.tick, merged, engine.elapsed())
            report = task.result()
            if engine.counts is not None:
                final = MergedCounts([engine.counts.snapshot(0, engine.elapsed())], [False])
                coordinator.tick(final, engine.elapsed(), final=True)
    events.publish(Stopped(report.stop_reason, report.stop_code))
    return summarize_reports(plan, [report], coordinator.outcome())


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
