"""Running a load from start to end, on the executor its settings ask for.

One process (`load.runner`: one engine in a fresh (uv)loop), or, with `processes > 1` or
a Dask scheduler, a gang of generators on Dask (`load.gang`: the schedule split between
them, each with its own client and loop, one measured start, their records merged). Both
executors build on `load.runner`'s shared parts; this module sits above the two, so that
neither needs the other to pick.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from servebench.load.engine import Stoppable
from servebench.load.records import RecordSink
from servebench.load.runner import ClientFactory, run_in_process
from servebench.load.settings import LoadSettings
from servebench.load.summary import LoadSummary

if TYPE_CHECKING:
    from servebench.load.live import LiveFigures  # a gang's: ddsketch is imported with it


def run(
    factory: ClientFactory,
    settings: LoadSettings,
    *,
    records: str | Path | RecordSink | None = None,
    use_uvloop: bool | None = None,
    handle_signals: bool = True,
    on_measure_start: Callable[[], None] | None = None,
    on_engine: Callable[[Stoppable], None] | None = None,
    on_progress: Callable[[LiveFigures], None] | None = None,
) -> LoadSummary:
    """Run one load from start to end; `records` is a Parquet path or a sink (or None).

    `on_engine` receives what stops the load, before it starts (callable from any thread
    for a gang): the engine, or a gang's `GangStop`; either keeps what was measured, as
    SIGINT/SIGTERM do with `handle_signals`. `on_progress` receives a gang's live figures
    (`load.live`) about every second; one process has none.

    `on_measure_start` is called (in a thread: it may block, e.g. on a scrape of the
    server's counters) when the measured window opens. In one process that is before the
    first measured send (`LoadEngine`); a gang's generators cannot wait for a caller, so
    there it is called when the warm-up ends by the shared start, and requests in flight
    around that instant may fall on either side of it.
    """
    if settings.processes > 1 or settings.scheduler is not None:
        # Imported here: a load of one process does not pay for Dask's side (ddsketch).
        from servebench.load.gang import run_gang

        return run_gang(
            factory,
            settings,
            records,
            use_uvloop,
            on_measure_start,
            handle_signals=handle_signals,
            on_engine=on_engine,
            on_progress=on_progress,
        )
    return run_in_process(
        factory,
        settings,
        records,
        use_uvloop,
        on_measure_start,
        handle_signals=handle_signals,
        on_engine=on_engine,
    )
