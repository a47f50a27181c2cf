"""A gang of load generators on Dask: one load sent from several processes or machines.

One seeded schedule, split: every generator walks the same global arrival schedule and
sends every k-th arrival (`LoadEngine`'s `part`), so the union of what they send is the
single-process schedule, with its intended offsets and sequence numbers; a closed loop's
concurrency (and request count) is split instead. Without a scheduler address the gang is
a `LocalCluster` of worker processes here (loopback, no dashboard); with one, workers of
that Dask cluster (`servebench cluster follower`, dask-jobqueue, dask-kubernetes).

A common start on honest clocks: each generator connects and says it is ready; the
coordinator then measures each one's clock offset NTP-style over Dask (several exchanges,
the one with the smallest round trip kept: offset = worker time - the exchange's midpoint,
uncertainty = half the round trip), picks a start instant far enough ahead on its own clock
and hands each generator that instant on the generator's clock. Records come back through
Dask as Parquet, their times moved onto the coordinator's timeline (offset taken off) and
stamped with the generator's index; the merged records are the union, and every figure is
computed on the union (`summarize_reports`), never averaged across generators.

A generator whose worker dies or whose task fails is lost: the others' records are kept,
the run is partial (`LoadSummary.gang`) and INVALID with `generator_lost` naming it and why.
A start skew (clock uncertainty plus a late start) over `start_skew_limit` is `start_skew`.

While the load runs, each generator publishes its counts every second (`load.live.PartCounts`,
a Dask `Variable` each: the counts are cumulative, so the latest is all the coordinator
needs), which the coordinator merges for its stop rules (stability windows, early stop:
`load.rules`) and the live figures (`events.Progress`). A stop (a rule's, or the caller's
`LoadControl`: a signal, the scenario runner's Ctrl-C) goes to every generator through a
Dask `Event`; each stops its engine as one process does (`LoadEngine.stop`: no new sends,
the ones in flight answered) and returns its records as at a normal end, so a stopped gang
keeps everything it measured and its verdict says why it stopped. A local gang's workers
ignore SIGINT and SIGTERM: a Ctrl-C at the terminal, or a SIGTERM to the whole process
group (systemd's default), reaches every process of the group, and would kill them with
their records; the coordinator stops them instead.

A local gang has at most one generator per core here (`check_local_gang`): more measure
the generators' fight for the cores, not the server. Dask's own messages (its
`distributed`, `tornado` and `bokeh` loggers, here and in a local gang's workers) go to
a log file, kept and named only when something was written there (`_dask_log`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from servebench.common.dask_cluster import (
    SCHEDULER_TIMEOUT,
    SLOT,
    SchedulerUnreachable,
    connect,
    free_slot_workers,
    local_cluster,
)
from servebench.common.errors import ServebenchError
from servebench.common.verdict_codes import VerdictCode
from servebench.load.combine import summarize_reports
from servebench.load.engine import EngineReport, LoadEngine
from servebench.load.events import Events, LoadControl, Measuring, PartLost, Started, Stopped
from servebench.load.executor import LoadRun
from servebench.load.in_process import loop_factory, open_sink
from servebench.load.live import PUBLISH_EVERY, MergedCounts
from servebench.load.plan import LoadPlan, connect_part
from servebench.load.records import RECORD_SCHEMA, ParquetRecordWriter, RecordSink
from servebench.load.rules import Coordinator, count_rules
from servebench.load.settings import LoadSettings
from servebench.load.stats import Columns, columns_from_table, summarize
from servebench.load.summary import LoadSummary, add_reason
from servebench.results import GangRecord, GeneratorRecord

log = logging.getLogger(__name__)

# Clock exchanges per generator; the one with the smallest round trip is kept.
CLOCK_EXCHANGES = 10
# Seconds between the measured clocks and the shared start: the start message's trip to
# every generator over Dask (a few ms on a LAN) with room for a busy machine.
START_MARGIN = 0.5
# Seconds the generators get to connect and say they are ready.
READY_TIMEOUT = 120.0
# How often the coordinator looks for lost workers and stop requests while the load runs,
# and a generator for a stop (s).
POLL = 0.25
# Longest wait for one generator's live figures on the scheduler (s).
LIVE_TIMEOUT = 0.1
_TIME_COLUMNS = ("intended_time", "send_time", "completion_time")


class GangError(ServebenchError, RuntimeError):
    """The gang could not start: a generator failed before the start, or none answered."""


@dataclass(frozen=True)
class ClockReading:
    """A generator's clock against the coordinator's: its time = ours + `offset` (s),
    known to within ± `uncertainty` (half the best exchange's round trip)."""

    offset: float
    uncertainty: float


def measure_clock(client: Any, worker: str, exchanges: int = CLOCK_EXCHANGES) -> ClockReading:
    """NTP over Dask: t0 sent, t1 = t2 read on the worker, t3 back; offset = ((t1 - t0) +
    (t2 - t3)) / 2 and uncertainty = round trip / 2, from the exchange with the smallest
    round trip (the one least delayed on either way)."""
    best: ClockReading | None = None
    for _ in range(exchanges):
        t0 = time.time()
        t1 = client.run(time.time, workers=[worker])[worker]
        t3 = time.time()
        reading = ClockReading(offset=((t1 - t0) + (t1 - t3)) / 2, uncertainty=(t3 - t0) / 2)
        if best is None or reading.uncertainty < best.uncertainty:
            best = reading
    assert best is not None, "at least one exchange"
    return best


@dataclass
class _Outcome:
    """One generator's end: its report and records (Parquet bytes), or why it was lost."""

    report: EngineReport | None = None
    records: bytes = b""
    lost: str | None = None


class DaskGang:
    """Runs a plan's `settings.generators` parts on Dask (see the module's docstring)."""

    def run(self, load: LoadRun) -> LoadSummary:
        """The records (a Parquet path or a sink) are opened once the generators are done,
        so a gang that never starts leaves no file behind."""
        plan = load.plan
        settings = plan.settings
        if settings.scheduler is None:
            check_local_gang(settings.generators)
        try:
            pickle.dumps(plan.clients)
        except Exception as exc:
            raise ValueError(
                "load.generators: generators need a client source that pickles "
                f"(e.g. functools.partial(create_client, ...)); {exc}"
            ) from None
        return _run(load)


def _run(load: LoadRun) -> LoadSummary:
    plan, control, events = load.plan, load.control, load.events
    settings = plan.settings
    n = settings.generators
    run_id = f"servebench-gang-{uuid.uuid4().hex[:12]}"
    own = LoadControl()  # the load's: its rules stop it, and so does the caller's
    coordinator = Coordinator(settings, own, events)
    with _dask_log(run_id) as dask_log, _dask_client(n, settings.scheduler, dask_log) as client:
        workers = _pick_workers(client, n, settings.scheduler)
        futures = [
            client.submit(
                _generate,
                plan,
                i,
                run_id,
                load.use_uvloop,
                key=f"{run_id}-{i}",
                workers=[workers[i]],
                allow_other_workers=False,  # a generator is never re-run elsewhere
                resources={SLOT: 1},  # nothing else measures on its worker meanwhile
                pure=False,
            )
            for i in range(n)
        ]
        try:
            _wait_ready(client, futures, workers, run_id)
            clocks = [measure_clock(client, w) for w in workers]
            start_at = time.time() + START_MARGIN
            _start(client, run_id, {"start_at": start_at, "offsets": [c.offset for c in clocks]})
        except BaseException:
            with contextlib.suppress(Exception):  # the cluster may be what failed
                _start(client, run_id, None)
                client.cancel(futures)
            raise
        events.publish(Started(start_at=start_at, parts=n, name=run_id))
        timer: threading.Timer | None = None
        if events:
            timer = threading.Timer(
                max(0.0, start_at + settings.warmup - time.time()), events.publish, (Measuring(),)
            )
            timer.daemon = True
            timer.start()
        watch = _Watch(client, run_id, n, start_at, own, coordinator, events)
        try:
            with control.listening(own.stop):
                outcomes = _await(client, futures, workers, watch)
            watch.tick(final=True)
        except BaseException:  # a second signal: the generators must not run on
            with contextlib.suppress(Exception):
                _send_stop(client, run_id, ("aborted", VerdictCode.STOPPED_EARLY))
            raise
        finally:
            if timer is not None:  # a run stopped inside its warm-up never opened the window
                timer.cancel()
                timer.join()
            with contextlib.suppress(Exception):  # a long-lived scheduler keeps nothing of it
                _forget(client, run_id, n)
    sink, owned = open_sink(load.records)
    try:
        reports = [
            _merge(i, outcome, clocks[i], settings, start_at, sink)
            for i, outcome in enumerate(outcomes)
        ]
    finally:
        if owned and sink is not None:
            sink.close()
    summary = summarize_reports(plan, reports, coordinator.outcome())
    summary.gang = _describe(settings, workers, clocks, outcomes, reports, summary)
    _judge_gang(summary, settings)
    code = next((r.stop_code for r in reports if r.stop_reason), None)
    events.publish(Stopped(summary.stop_reason, code))
    return summary


def check_local_gang(n: int, option: str = "load.generators") -> None:
    """Refuse a local gang of more generators than this machine has cores (Dask's count:
    affinity and cgroup quota included): each is a process that must send on time, and
    64 of them on 2 cores measured their own contention, took 25 s to stop and printed
    548 lines of Dask's tracebacks. Refused rather than capped, so that a run is the one
    asked for; a `--scheduler`'s workers are other machines' cores (that cluster's
    worker count bounds them, `_pick_workers`)."""
    from dask.system import CPU_COUNT

    if n > CPU_COUNT:
        raise ValueError(
            f"{option} {n}: a local gang runs a process per generator and this machine has "
            f"{CPU_COUNT} {'core' if CPU_COUNT == 1 else 'cores'}: give at most {CPU_COUNT}, "
            "or a Dask cluster's workers (--scheduler tcp://HOST:PORT; "
            "workload.generators.scheduler in a scenario)"
        )


# The logger families Dask configures (distributed.config gives several of their loggers
# a stream handler of their own): a gang's messages from them go to its log file
# (`_dask_log`), not the terminal.
_DASK_LOGGERS = ("distributed", "tornado", "bokeh")


@contextlib.contextmanager
def _dask_log(run_id: str) -> Iterator[Path]:
    """Dask's warnings and errors during a gang go to a file (a local gang's workers
    append theirs, `_generator_process`), not to the terminal: a worker that dies or a
    loaded machine makes pages of them beside the one line the gang says itself. The file
    is kept, and named in a warning, only when something was written to it."""
    path = Path(tempfile.gettempdir()) / f"{run_id}-dask.log"
    handler = _log_file_handler(path)
    saved = _log_to(handler)
    try:
        yield path
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate
        handler.close()
        if path.exists() and path.stat().st_size:
            log.warning("Dask's own warnings during the gang are in %s", path)
        else:
            path.unlink(missing_ok=True)


_Saved = list[tuple[logging.Logger, list[logging.Handler], bool]]


def _log_to(handler: logging.Handler) -> _Saved:
    """Send Dask's loggers to `handler` alone: it takes the place of their stream handlers
    (distributed.config gives several their own; their in-memory ones, which
    `Client.get_worker_logs` reads, stay), and each family's top logger no longer passes
    messages up to the root's handlers (where a process configured logging before
    importing distributed, it gives none of its own and relies on those). Returns each
    changed logger with its handlers and `propagate` before."""
    import distributed  # noqa: F401  (configures its loggers, which are changed here)

    saved: _Saved = []
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name.split(".")[0] not in _DASK_LOGGERS:
            continue
        streams = [h for h in logger.handlers if type(h) is logging.StreamHandler]
        if streams or name in _DASK_LOGGERS:
            saved.append((logger, logger.handlers[:], logger.propagate))
            logger.handlers = [h for h in logger.handlers if h not in streams] + [handler]
            logger.propagate = False
    return saved


def _log_file_handler(path: Path) -> logging.Handler:
    """Warnings and up, appended to `path` (several processes write to it), opened on the
    first message only."""
    handler = logging.FileHandler(path, mode="a", delay=True)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(processName)s %(name)s %(levelname)s: %(message)s")
    )
    return handler


@contextlib.contextmanager
def _dask_client(n: int, scheduler: str | None, dask_log: Path) -> Iterator[Any]:
    """A Dask client on `scheduler`, or on a `local_cluster` of `n` workers here (which
    ignore SIGINT and SIGTERM and log to `dask_log`: `_generator_process`)."""
    from distributed import Client

    if scheduler is None:
        with local_cluster(n) as cluster, Client(cluster) as client:
            client.run(_generator_process, str(dask_log))
            yield client
        return
    with connect(scheduler) as client:
        yield client


def _pick_workers(client: Any, n: int, scheduler: str | None) -> list[str]:
    """`n` workers whose slot is free (`common.dask_cluster`), waiting up to
    SCHEDULER_TIMEOUT for workers that are still starting or finishing a job."""
    deadline = time.monotonic() + SCHEDULER_TIMEOUT
    while True:
        identity = _identity(client)
        free = free_slot_workers(identity, client.processing())
        if len(free) >= n:
            return free[:n]
        if time.monotonic() > deadline:
            raise SchedulerUnreachable(
                f"load.generators: {n} generators need {n} Dask workers with a free "
                f"{SLOT}, {scheduler or 'the local cluster'} has {len(free)} of "
                f"{len(identity['workers'])} after {SCHEDULER_TIMEOUT:g} s (a worker offers "
                f"one with --resources {SLOT}=1, as `servebench cluster follower` does; one "
                "running a benchmark job or another gang's generator is busy)"
            )
        time.sleep(POLL)


def _identity(client: Any) -> dict[str, Any]:
    """The scheduler's description of itself and its workers now, asked of the scheduler
    itself: `Client.scheduler_info()` returns the client's cached copy, which the client's
    own periodic refresh (asking for no workers) can overwrite between the fetch and the
    read, so a look now and then finds no workers at all (2 looks in 1160 measured), and a
    generator would be taken for lost."""
    return client.sync(client.scheduler.identity, n_workers=-1)


def _workers(client: Any) -> set[str]:
    """The addresses of the scheduler's workers now (`_identity`)."""
    return set(_identity(client)["workers"])


def _event(client: Any, name: str) -> Any:
    from distributed import Event

    return Event(name, client=client)


def _wait_ready(client: Any, futures: list[Any], workers: list[str], run_id: str) -> None:
    """Wait until every generator has connected; one that fails first, or whose worker
    leaves, is a GangError."""
    deadline = time.monotonic() + READY_TIMEOUT
    waiting = set(range(len(futures)))
    while waiting:
        alive = _workers(client)
        for i in sorted(waiting):
            if futures[i].done():
                raise GangError(f"generator {i} failed before the start: {_why(futures[i])}")
            if workers[i] not in alive:
                raise GangError(f"generator {i}: its worker {workers[i]} left before the start")
            if _event(client, f"{run_id}-ready-{i}").wait(timeout=POLL / len(waiting)):
                waiting.discard(i)
        if waiting and time.monotonic() > deadline:
            raise GangError(f"generators {sorted(waiting)} not ready after {READY_TIMEOUT:.0f} s")


def _start(client: Any, run_id: str, start: dict[str, Any] | None) -> None:
    """Tell every generator when to start (`start`), or to give up (None)."""
    from distributed import Variable

    Variable(f"{run_id}-start", client=client).set(start)
    _event(client, f"{run_id}-go").set()


def _send_stop(client: Any, run_id: str, request: tuple[str | None, VerdictCode]) -> None:
    """Ask every generator to stop its engine with `request`'s reason and code."""
    from distributed import Variable

    reason, code = request
    Variable(f"{run_id}-stop", client=client).set({"reason": reason, "code": str(code)})
    _event(client, f"{run_id}-stop").set()


def _forget(client: Any, run_id: str, n: int) -> None:
    """Remove the run's events and variables from the scheduler."""
    from distributed import Variable

    for name in (f"{run_id}-start", f"{run_id}-stop", *(f"{run_id}-live-{i}" for i in range(n))):
        Variable(name, client=client).delete()
    for name in (*(f"{run_id}-ready-{i}" for i in range(n)), f"{run_id}-go", f"{run_id}-stop"):
        _event(client, name).clear()


class _Watch:
    """The coordinator's side of a running gang, called every `POLL`: passes a stop on to
    the generators, and about every `PUBLISH_EVERY` merges their latest counts for the
    stop rules and the live figures (`load.rules.Coordinator`)."""

    def __init__(
        self,
        client: Any,
        run_id: str,
        n: int,
        start_at: float,
        control: LoadControl,
        coordinator: Coordinator,
        events: Events,
    ):
        self.client, self.run_id, self.n, self.start_at = client, run_id, n, start_at
        self.control = control
        self.coordinator = coordinator
        self.events = events
        self.latest: list[dict[str, Any] | None] = [None] * n
        self.lost = [False] * n
        self.stop_sent = False
        self.due = time.monotonic()

    def tick(self, final: bool = False) -> None:
        if not self.stop_sent and self.control.requested is not None:
            _send_stop(self.client, self.run_id, self.control.requested)
            self.stop_sent = True
        if not (final or time.monotonic() >= self.due):
            return
        self.due = time.monotonic() + PUBLISH_EVERY
        if not (final or self.coordinator.watching):
            return  # no rule to look, no figures wanted
        from distributed import Variable

        for i in range(self.n):
            with contextlib.suppress(TimeoutError):  # not published yet
                board = Variable(f"{self.run_id}-live-{i}", client=self.client)
                self.latest[i] = board.get(timeout=LIVE_TIMEOUT)
        now = time.time() - self.start_at
        self.coordinator.tick(MergedCounts(self.latest, self.lost), now, final=final)

    def part_lost(self, index: int, why: str) -> None:
        self.lost[index] = True
        self.events.publish(PartLost(index, why))


def _why(future: Any) -> str:
    try:
        exc = future.exception(timeout=5)
    except Exception as err:  # cancelled, or the scheduler lost it
        return f"{type(err).__name__}: {err}".rstrip(": ")
    if exc is None:
        return "returned before the start"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def _await(client: Any, futures: list[Any], workers: list[str], watch: _Watch) -> list[_Outcome]:
    """Every generator's outcome; a generator whose worker left the cluster is lost (its
    task is cancelled, so the scheduler never re-runs it late on another worker). `watch`
    ticks every `POLL` meanwhile."""
    outcomes: list[_Outcome | None] = [None] * len(futures)
    began = time.monotonic()
    missing: set[int] = set()  # generators whose worker the last look did not find
    while any(o is None for o in outcomes):
        time.sleep(POLL)
        watch.tick()
        alive = _workers(client)
        for i, future in enumerate(futures):
            if outcomes[i] is not None:
                continue
            gone = workers[i] not in alive
            if future.status == "finished":
                report, records = future.result()
                outcomes[i] = _Outcome(report=report, records=records)
            elif future.done():
                outcomes[i] = _Outcome(lost=f"failed: {_why(future)}")
                watch.part_lost(i, outcomes[i].lost)
            elif gone and i not in missing:
                missing.add(i)  # look once more: a result may be on its way
            elif gone:
                future.cancel()
                outcomes[i] = _Outcome(
                    lost=f"its worker {workers[i]} left the cluster "
                    f"{time.monotonic() - began:.1f} s into the run (process died or was "
                    "killed); its records are lost"
                )
                log.warning("load generator %d lost: %s", i, outcomes[i].lost)
                watch.part_lost(i, outcomes[i].lost)
    return [o for o in outcomes if o is not None]


def _merge(
    index: int,
    outcome: _Outcome,
    clock: ClockReading,
    settings: LoadSettings,
    start_at: float,
    sink: RecordSink | None,
) -> EngineReport:
    """A generator's report with its records on the coordinator's timeline, which also go
    to `sink`, stamped with the generator's index."""
    if outcome.report is None:
        return EngineReport(columns=Columns.concat([]))
    report = outcome.report
    table = pq.read_table(pa.BufferReader(outcome.records))
    for name in _TIME_COLUMNS:
        position = table.schema.get_field_index(name)
        table = table.set_column(
            position, RECORD_SCHEMA.field(name), pc.subtract(table[name], clock.offset)
        )
    position = table.schema.get_field_index("generator")
    table = table.set_column(
        position,
        RECORD_SCHEMA.field("generator"),
        pa.array([index] * table.num_rows, pa.int32()),
    )
    report.columns = columns_from_table(
        table, origin=start_at, latency_from_send=settings.mode == "closed"
    )
    if sink is not None:
        for batch in table.to_batches(max_chunksize=65536):
            sink.write(pa.RecordBatch.from_arrays(batch.columns, schema=RECORD_SCHEMA))
    return report


def _describe(
    settings: LoadSettings,
    workers: list[str],
    clocks: list[ClockReading],
    outcomes: list[_Outcome],
    reports: list[EngineReport],
    summary: LoadSummary,
) -> GangRecord:
    """The gang's part of the summary: its start and each generator's figures, from that
    generator's own records (its share of the schedule is 1/n of it)."""
    n = len(workers)
    # The schedule's rate over the measured span (`target_rate`): the rate the records
    # show (`scheduled_rate`) lacks a lost generator's share.
    scheduled = summary.target_rate or summary.scheduled_rate
    share = scheduled / n if scheduled else None
    generators = []
    for i, (worker, clock, outcome, report) in enumerate(
        zip(workers, clocks, outcomes, reports, strict=True)
    ):
        own = summarize(report.columns, mode=settings.mode, target_rate=None)
        sent = own.achieved_rate if own.count else 0.0
        generators.append(
            GeneratorRecord(
                index=i,
                worker=worker,
                clock_offset_s=clock.offset,
                clock_uncertainty_s=clock.uncertainty,
                late_start_s=report.late_start,
                count=own.count,
                sent_rate=sent,
                scheduled_rate=share,
                shortfall=(1 - sent / share) if share else None,
                lag_p99_s=own.schedule_lag_p99 if own.count else None,
                lost=outcome.lost,
            )
        )
    return GangRecord(
        scheduler=settings.scheduler or "local",
        start_skew_s=max(g.clock_uncertainty_s + g.late_start_s for g in generators),
        start_skew_limit_s=settings.start_skew_limit,
        partial=any(o.lost for o in outcomes),
        generators=tuple(generators),
    )


def _judge_gang(summary: LoadSummary, settings: LoadSettings) -> None:
    """The gang's own reasons (a lost generator, the start skew), and each generator's
    figures beside a verdict about lateness, so one verdict names the generator to fix."""
    gang = summary.gang
    assert gang is not None
    for g in gang.generators:
        if g.lost:
            add_reason(
                summary,
                VerdictCode.GENERATOR_LOST,
                f"partial run: generator {g.index} ({g.worker}) lost: {g.lost}"
                + (
                    f"; its share of the schedule ({g.scheduled_rate:.1f} req/s, "
                    f"{g.shortfall:.0%} of it missing) is not in the records"
                    if g.scheduled_rate and g.shortfall is not None
                    else ""
                ),
            )
    if gang.start_skew_s > settings.start_skew_limit:
        add_reason(
            summary,
            VerdictCode.START_SKEW,
            f"start skew: the generators may have started {gang.start_skew_s * 1e3:.2f} ms "
            f"apart (clock uncertainty plus late start; limit "
            f"{settings.start_skew_limit * 1e3:g} ms)",
        )
    late = {str(VerdictCode.RATE_SHORT), str(VerdictCode.LAG_HIGH)}
    causes = "; ".join(_cause(g) for g in gang.generators)
    summary.reasons = [
        f"{text} (by generator: {causes})" if code in late else text
        for code, text in zip(summary.reason_codes, summary.reasons, strict=True)
    ]


def _cause(g: GeneratorRecord) -> str:
    if g.lost:
        return f"g{g.index} lost"
    lag = "-" if g.lag_p99_s is None else f"{g.lag_p99_s * 1e3:.2f} ms"
    short = "" if g.shortfall is None else f", {max(g.shortfall, 0.0):.1%} short"
    return f"g{g.index} lag p99 {lag}{short}"


# -- on the worker -----------------------------------------------------------------------


def _generate(
    plan: LoadPlan, index: int, run_id: str, use_uvloop: bool | None
) -> tuple[EngineReport, bytes]:
    """One generator (a Dask task): connect its part's clients, say ready, wait for the
    start, send its share; returns its report and its records as Parquet bytes (the
    columns travel in those)."""
    from distributed import get_client

    dask = get_client()
    with asyncio.Runner(loop_factory=loop_factory(use_uvloop)) as runner:
        return runner.run(_generate_part(plan, index, run_id, dask))


async def _generate_part(
    plan: LoadPlan, index: int, run_id: str, dask: Any
) -> tuple[EngineReport, bytes]:
    from distributed import Event, Variable

    settings = plan.settings
    loop = asyncio.get_running_loop()
    async with connect_part(plan, index) as mix:
        await loop.run_in_executor(None, Event(f"{run_id}-ready-{index}", client=dask).set)
        go = Event(f"{run_id}-go", client=dask)
        if not await loop.run_in_executor(None, go.wait, READY_TIMEOUT):
            raise GangError(f"no start after {READY_TIMEOUT:.0f} s")
        start = await loop.run_in_executor(None, Variable(f"{run_id}-start", client=dask).get)
        if start is None:
            raise GangError("aborted before the start")
        local_start = start["start_at"] + start["offsets"][index]
        with tempfile.TemporaryDirectory(prefix="servebench-generator-") as tmp:
            part = os.path.join(tmp, "records.parquet")
            with ParquetRecordWriter(part) as writer:
                engine = LoadEngine(
                    mix,
                    settings,
                    writer,
                    start_at=local_start,
                    part=(index, settings.generators),
                    counts=count_rules(settings),
                )
                report = await _run_engine(engine, dask, run_id, index)
            with open(part, "rb") as f:
                records = f.read()
    report.columns = Columns.concat([])  # they travel in the records
    return report, records


def _generator_process(dask_log: str) -> None:
    """In a local generator's process (`client.run`, in its main thread): ignore SIGINT
    and SIGTERM, which a Ctrl-C at the terminal or a stop of the whole process group
    (systemd's) sends to every process of the group, since the coordinator stops the gang
    and keeps what it measured (killed, the workers' records were lost); and send Dask's
    messages to the gang's log file (`_dask_log`). The process ends with the gang's
    LocalCluster, and with its parent should that die (Dask's process watches its pipe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _log_to(_log_file_handler(Path(dask_log)))


async def _run_engine(engine: LoadEngine, dask: Any, run_id: str, index: int) -> EngineReport:
    """Run the engine, publishing its counts every `PUBLISH_EVERY` s (and once more at the
    end, every record in) and stopping it when the coordinator asks. Dask's calls block,
    so they run off the loop; should they fail, the load goes on."""
    from distributed import Event, Variable

    loop = asyncio.get_running_loop()
    board = Variable(f"{run_id}-live-{index}", client=dask)
    stop = Event(f"{run_id}-stop", client=dask)
    finished = asyncio.Event()

    async def watch() -> None:
        due = time.monotonic()  # the first (empty) counts at once
        stopped = False
        while not finished.is_set():
            if stopped:
                await asyncio.sleep(POLL)
            elif await loop.run_in_executor(None, stop.wait, POLL):
                stopped = True
                request = await loop.run_in_executor(
                    None, Variable(f"{run_id}-stop", client=dask).get
                )
                engine.stop(request["reason"], VerdictCode(request["code"]))
            if not finished.is_set() and time.monotonic() >= due:
                due = time.monotonic() + PUBLISH_EVERY
                counts = await engine.snapshot()
                await loop.run_in_executor(None, board.set, counts)

    async def watching() -> None:
        try:
            await watch()
        except Exception:
            log.warning("generator %d: live counts and stop requests failed", index, exc_info=True)

    task = loop.create_task(watching())
    try:
        report = await engine.run()
    finally:
        finished.set()
        await task
    try:
        board.set(engine.counts.snapshot(0, engine.elapsed()))
    except Exception:  # the counts are live ones: the records still go back
        log.warning("generator %d: the last live counts were not published", index, exc_info=True)
    return report
