"""Running a load plan from start to end, on the executor its settings ask for.

One interface, two executors (as Locust's runners share one base): `InProcess`, one part
in this process (`load.in_process`), and `DaskGang`, `settings.generators` parts on Dask
(`load.gang`: the schedule split between them, each with its own clients and loop, one
measured start, their records merged). Both publish the same events (`load.events`), stop
through the same `LoadControl` and hand their parts' counts to the same stop rules
(`load.rules`); this module sits above the two, so that neither needs the other to pick.
"""

from __future__ import annotations

from pathlib import Path

from servebench.load.events import Events, LoadControl, Subscriber, signals_stop
from servebench.load.executor import Executor, LoadRun
from servebench.load.in_process import InProcess
from servebench.load.plan import LoadPlan
from servebench.load.records import RecordSink
from servebench.load.summary import LoadSummary


def executor_for(plan: LoadPlan) -> Executor:
    """The executor of `plan`: a gang where it has more than one generator or a Dask
    scheduler, else this process."""
    if plan.settings.is_gang:
        # Imported here: a load of one process does not pay for Dask's import.
        from servebench.load.gang import DaskGang

        return DaskGang()
    return InProcess()


def run(
    plan: LoadPlan,
    *,
    records: str | Path | RecordSink | None = None,
    control: LoadControl | None = None,
    subscribers: tuple[Subscriber, ...] = (),
    live: bool = False,
    use_uvloop: bool | None = None,
    handle_signals: bool = True,
) -> LoadSummary:
    """Run one load from start to end; `records` is a Parquet path or a sink (or None).

    `control` stops it from any thread (`LoadControl`: what was measured is kept);
    `subscribers` receive its events (`load.events`), `Progress` only with `live`. With `handle_signals` (in the main
    thread), the first SIGINT/SIGTERM stops it as `control` would and a second aborts.
    """
    control = control if control is not None else LoadControl()
    with signals_stop(control, handle_signals):
        load = LoadRun(plan, records, control, Events(*subscribers, live=live), use_uvloop)
        return executor_for(plan).run(load)
