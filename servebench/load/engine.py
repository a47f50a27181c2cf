"""The issuing engine: sends requests on schedule (open loop) or from N workers (closed loop).

It sees only `InferenceClient`. Accuracy choices, each for a measured reason:
- Timestamps are `time.perf_counter()` (ns resolution); uvloop's `loop.time()` is
  cached per loop iteration in whole milliseconds.
- The open-loop issuer waits for each send on a timerfd (`timer.py`): the loop's own
  timers have 1 ms granularity. Where there is no timerfd it sleeps on the loop timer
  until ~2 ms before the send and then yields (`sleep(0)`, still serving I/O) until due.
- Latency is completion - intended send in open loop (no coordinated omission) and
  completion - actual send in closed loop; both times are recorded, so schedule lag is too.
- Per-request timeouts come from one sweeper task over an insertion-ordered dict of
  deadlines rather than an `asyncio.timeout` per request: deadlines are monotone (same
  timeout, sends in time order), so a sweep stops at the first live one, and the hot path
  pays one dict insert and one delete instead of a timer-heap entry.
- Records go to array-backed columns and are handed, a chunk at a time, to one writer
  thread that converts and writes them, so the event loop never encodes Parquet.
- The measured window opens with `on_measure_start` (a caller reading the server's
  counters beside the load takes its first reading there), awaited before the first
  measured request is sent. Closed loop first lets every warm-up request finish, so the
  server's counts between that reading and one after the run are exactly the measured
  requests; open loop cannot pause its schedule to drain, so warm-up requests still in
  flight at that instant (at most rate × latency) are in the server's counts too, and the
  sends scheduled while the reading is taken leave late (their lag is recorded and counted).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from time import perf_counter

from servebench.clients.base import ErrorKind, InferenceError
from servebench.clients.input_data import answer_matches
from servebench.common.verdict_codes import VerdictCode
from servebench.load.live import CountRules, PartCounts
from servebench.load.mix import Mix
from servebench.load.records import (
    CLIENT_ERROR_CODE,
    ERROR_CODE,
    OK,
    TIMEOUT_CODE,
    WRONG_ANSWER_CODE,
    Chunk,
    Clock,
    RecordBuffer,
    RecordSink,
    chunk_to_batch,
)
from servebench.load.settings import LoadSettings
from servebench.load.stats import Columns, Measurements
from servebench.load.timer import PreciseTimer, precise_timer

log = logging.getLogger(__name__)

# How long before a send the issuer stops trusting the loop timer and starts yielding.
SPIN_AHEAD = 0.002
# Longest single sleep, so a stop request is noticed promptly even at very low rates.
MAX_NAP = 0.05
# Below this wait the issuer yields (`sleep(0)`) instead of arming the timerfd: arming
# costs a syscall and, in a VM, a timer exit (measured: ~15 µs a send at 20k req/s), and
# at such gaps the loop is busy with answers anyway.
TIMER_MIN = 200e-6
# Overdue sends issued back to back before the issuer yields to the loop once.
BURST = 32
# How the text of a stop for a vanished server starts; programs tell such a stop by its
# code (`VerdictCode.SERVER_UNREACHABLE`, the report's `stop_code`).
SERVER_UNREACHABLE = "server unreachable"
# Failures that mean nobody is serving at the address any more, as opposed to a server
# that answers badly: those runs go on, and their errors are counted.
_GONE = {ErrorKind.CONNECTION_REFUSED, ErrorKind.CONNECTION_RESET}
_GONE_CODES = {ERROR_CODE[kind] for kind in _GONE}


@dataclass
class EngineReport:
    """What one engine (one process) measured; `summarize_reports` turns reports into a summary.

    Offsets are seconds from the common schedule start, so reports of several processes
    that share a start merge by concatenation.
    """

    columns: Columns
    first_offset: float | None = None  # first and last measured intended send, global schedule
    last_offset: float | None = None
    stop_reason: str | None = None
    stop_code: VerdictCode | None = None  # what kind of stop stop_reason is
    # Seconds the engine began after the shared start it was given (0 when it began in time,
    # or had none): its first sends left late by as much, and a gang counts it as start skew.
    late_start: float = 0.0


class LoadEngine:
    """Runs one part of a load from its connected clients (`load.plan.connect_part`);
    `part=(i, n)` runs the i-th of n shares.

    Request `seq` goes to the model `mix.target(seq)` picks (a load of one model: always
    it, without a look-up) and sends `payloads[seq % len(payloads)]` of that model, `seq`
    counted over every part, so the parts of a load go through the cycle in order between
    them. A payload with `expected` outputs has its answer compared
    (`input_data.answer_matches`) after the answer's time is taken; a mismatch is recorded
    as `wrong_answer`. The records of a mix of named models name each request's model.

    When to stop, beyond its schedule and a server that is gone, is not the engine's: a
    coordinator (`load.rules`) reads its counts (`snapshot`) and calls `stop`.
    """

    def __init__(
        self,
        mix: Mix,
        settings: LoadSettings,
        sink: RecordSink | None = None,
        *,
        start_at: float | None = None,
        part: tuple[int, int] = (0, 1),
        on_measure_start: Callable[[], Awaitable[None]] | None = None,
        counts: CountRules | None = None,
    ):
        if not 0 <= part[0] < part[1]:
            raise ValueError(f"engine part: index {part[0]} outside 0..{part[1] - 1}")
        # One target: its client and payloads, with no look-up on the hot path.
        self.mix = mix if len(mix.targets) > 1 else None
        self.client = mix.targets[0].client
        self.payloads = mix.targets[0].payloads
        # The records' model codes: only a mix of named models has them.
        self.models = mix.models if mix.named else ()
        self._codes = mix.codes if mix.named else None
        self.settings = settings
        self.sink = sink
        self.start_at = start_at  # wall-clock start shared by cooperating processes
        self.part = part
        self.on_measure_start = on_measure_start
        # Done once the measured window is open (`_open_window`); None until it opens.
        self._window: asyncio.Task | None = None
        self._buffer = RecordBuffer()
        self._active: dict[int, tuple[float, asyncio.Task]] = {}
        self._expired: set[int] = set()
        self._inflight = 0
        self._slot_waiter: asyncio.Future | None = None
        self._drained: asyncio.Future | None = None
        self._stopping = False
        self._stop_reason: str | None = None
        self._stop_code = VerdictCode.STOPPED_EARLY
        self._pending: list[Future] = []
        self._client_bug_logged = False
        self._first_offset: float | None = None
        self._last_offset: float | None = None
        # Counted only where a coordinator reads them: counting costs the writer thread
        # a sketch update a chunk (1-2 % of a core at 70k req/s), and so the sending loop
        # its share of the GIL.
        self.counts = PartCounts(counts) if counts is not None else None
        self._timer: PreciseTimer | None = None
        self._unreachable_since: float | None = None
        self._late_start = 0.0
        # One writer thread converts and writes record chunks off the event loop; it starts
        # with the first chunk, so an engine that never runs holds no thread.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="servebench-records")
        # The run's time base, set by `run` when its schedule starts: perf_counter at the
        # schedule's time 0 and at the end of the warm-up, the wall/perf pair records are
        # stamped with, and the measured columns (offsets from that time 0).
        self._start = 0.0
        self._measure_from = 0.0
        self._clock: Clock | None = None
        self._measurements: Measurements | None = None
        # Closed loop: requests issued and measured by this part, and how many it must measure.
        self._closed_seq = 0
        self._closed_measured = 0
        self._closed_count = 0

    def stop(
        self, reason: str | None = "stop requested", code: VerdictCode = VerdictCode.STOPPED_EARLY
    ) -> None:
        """Stop issuing, let requests in flight finish, and keep everything measured.

        A `reason` marks the run as stopped early (the verdict says so, with `code`); None
        is a normal end (stability windows that agreed).
        """
        if reason and not self._stop_reason:
            self._stop_reason, self._stop_code = reason, code
        self._stopping = True

    async def run(self) -> EngineReport:
        s = self.settings
        loop = asyncio.get_running_loop()
        if s.arrivals is not None:
            self._timer = precise_timer(loop)
        # Every object alive now (numpy, pyarrow, aiohttp, ... ~10^5) would otherwise be
        # rescanned by each full garbage collection during the run: 70 ms stalls measured
        # here. Frozen objects are skipped until the run ends. Only the young generations
        # are collected first: a full collection with torch and TensorFlow loaded takes
        # 0.4 s or more, and the little old garbage frozen with the rest is freed after.
        gc.collect(1)
        gc.freeze()
        # The clock starts after the set-up above, or the first sends would start late.
        self._clock = clock = Clock(time.time(), perf_counter())
        if self.start_at is None:
            start = perf_counter()
        else:
            start = clock.perf0 + (self.start_at - clock.wall0)
            self._late_start = max(0.0, clock.wall0 - self.start_at)
        self._start = start
        self._measure_from = start + s.warmup
        self._measurements = Measurements(
            start, batch_size=s.batch_size, latency_from_send=s.mode == "closed"
        )
        background = [loop.create_task(self._sweep())]
        try:
            await self._sleep_until(start)
            if s.arrivals is not None:
                await self._issue_open()
                await self._drain()
            else:
                await self._run_closed()
        except BaseException as exc:
            if not self._stop_reason:
                self._stop_reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            for _, task in list(self._active.values()):
                task.cancel()
            raise
        finally:
            if self._window is not None:
                background.append(self._window)  # a window still opening when the run failed
            for task in background:
                task.cancel()
            if self._timer is not None:
                self._timer.close()
            gc.unfreeze()
            self._finish_records()
        return self._report()

    # -- open loop ---------------------------------------------------------------------

    async def _issue_open(self) -> None:
        s = self.settings
        assert s.arrivals is not None
        index, parts = self.part
        start = self._start
        loop = asyncio.get_running_loop()
        create_task = loop.create_task
        call = self._call
        cap = s.max_in_flight if s.max_in_flight is not None else math.inf
        measure_at = s.warmup
        # Stop once both minimums are met; a missing one counts as met.
        end = s.warmup + s.duration if s.duration is not None else -math.inf
        count = s.count if s.count is not None else 0
        by_schedule = s.duration is not None or s.count is not None
        measured = 0
        overdue = 0
        seq = -1
        for offset in s.arrivals.offsets():
            seq += 1
            is_measured = offset >= measure_at
            if is_measured:
                if by_schedule and offset >= end and measured >= count:
                    break
                if self._window is None:
                    await self._open_window(drain=False)
                measured += 1
                if self._first_offset is None:
                    self._first_offset = offset
                self._last_offset = offset
            if parts > 1 and seq % parts != index:
                continue
            due = start + offset
            if due > perf_counter():
                await self._sleep_until(due, precise=True)
                overdue = 0
            else:
                # Behind schedule: send what is due, but let the loop read answers now
                # and then, or a long backlog would starve the very I/O that clears it.
                overdue += 1
                if overdue >= BURST:
                    overdue = 0
                    await asyncio.sleep(0)
            if self._stopping:
                break
            while self._inflight >= cap:
                self._slot_waiter = loop.create_future()
                await self._slot_waiter
            self._inflight += 1
            create_task(call(seq, due, is_measured))

    async def _drain(self) -> None:
        if self._inflight == 0:
            return
        self._drained = asyncio.get_running_loop().create_future()
        # The sweeper cancels anything past its deadline, so this wait is bounded; the
        # margin only guards against a client that swallows cancellation.
        try:
            await asyncio.wait_for(asyncio.shield(self._drained), self.settings.timeout + 5.0)
        except TimeoutError:
            log.warning("%d requests still in flight after the timeout; abandoned", self._inflight)
            for _, task in list(self._active.values()):
                task.cancel()

    # -- closed loop -------------------------------------------------------------------

    async def _run_closed(self) -> None:
        s = self.settings
        assert s.concurrency is not None
        index, parts = self.part
        workers = s.concurrency // parts + (1 if index < s.concurrency % parts else 0)
        if s.count is not None:
            self._closed_count = s.count // parts + (1 if index < s.count % parts else 0)
        await asyncio.gather(*(self._worker() for _ in range(workers)))

    async def _worker(self) -> None:
        s = self.settings
        index, parts = self.part
        think = s.think_time
        end = self._measure_from + s.duration if s.duration is not None else -math.inf
        by_schedule = s.duration is not None or s.count is not None
        call = self._call
        while not self._stopping:
            if think:
                intended = perf_counter() + think
                await self._sleep_until(intended)
                if self._stopping:
                    break
            else:
                intended = perf_counter()
            # Once the window is opening, every send is measured (and waits for it), so
            # no warm-up request reaches the server inside the measured window.
            is_measured = intended >= self._measure_from or self._window is not None
            if is_measured:
                if by_schedule and intended >= end and self._closed_measured >= self._closed_count:
                    break
                if self._window is None or not self._window.done():
                    await self._open_window(drain=True)
                    if self._stopping:
                        break
                    intended = perf_counter()  # the wait for the window is not the server's
                self._closed_measured += 1
            seq = self._closed_seq * parts + index
            self._closed_seq += 1
            self._inflight += 1
            await call(seq, intended, is_measured)

    # -- the measured window -----------------------------------------------------------

    async def _open_window(self, *, drain: bool) -> None:
        """Open the measured window once: with `drain`, after every warm-up request in
        flight has finished; then `on_measure_start`. Every caller waits for it."""
        if self._window is None:
            self._window = asyncio.get_running_loop().create_task(self._window_opens(drain))
        await asyncio.shield(self._window)

    async def _window_opens(self, drain: bool) -> None:
        if drain:
            await self._drain()
        if self.on_measure_start is not None:
            await self.on_measure_start()

    # -- one request -------------------------------------------------------------------

    async def _call(self, seq: int, intended: float, measured: bool) -> None:
        """Send one request and record it; never raises except on engine cancellation."""
        mix = self.mix
        if mix is None:
            client, payloads = self.client, self.payloads
        else:  # the record's model is found again from seq when written (`Mix.codes`)
            target = mix.target(seq)
            client, payloads = target.client, target.payloads
        payload = payloads[seq % len(payloads)]
        send = perf_counter()
        self._active[seq] = (send + self.settings.timeout, asyncio.current_task())
        client_send = client_recv = math.nan  # the split of a failed request: not timed
        try:
            result = await client.infer(payload)
            done = perf_counter()
            code = OK
            if payload.expected is not None and not answer_matches(
                result.outputs, payload.expected
            ):
                code = WRONG_ANSWER_CODE
            request_bytes = result.request_bytes or payload.request_bytes
            response_bytes = result.response_bytes
            client_send, client_recv = result.send_s, result.receive_s
        except InferenceError as exc:
            done = perf_counter()
            code = ERROR_CODE.get(exc.kind, CLIENT_ERROR_CODE)
            request_bytes, response_bytes = payload.request_bytes, 0
            if exc.kind in _GONE:
                self._note_gone(done, exc)
        except asyncio.CancelledError:
            if seq not in self._expired:
                self._release(seq)
                raise
            done = perf_counter()
            self._expired.discard(seq)
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            code = TIMEOUT_CODE
            request_bytes, response_bytes = payload.request_bytes, 0
        except Exception as exc:  # a client broke its contract; count it, keep going
            done = perf_counter()
            code = CLIENT_ERROR_CODE
            request_bytes, response_bytes = payload.request_bytes, 0
            if not self._client_bug_logged:
                self._client_bug_logged = True
                log.warning("client raised %r instead of InferenceError", exc, exc_info=exc)
        if code not in _GONE_CODES:
            self._unreachable_since = None  # an answer, or a timeout: someone is there
        self._release(seq)
        if measured:
            n = self._buffer.add(
                seq,
                intended,
                send,
                done,
                code,
                request_bytes,
                response_bytes,
                client_send,
                client_recv,
            )
            if n >= self.settings.chunk_rows:
                self._flush()

    def _note_gone(self, now: float, exc: InferenceError) -> None:
        """Stop once the address has refused or dropped every request for a while."""
        limit = self.settings.unreachable_after
        if limit is None:
            return
        if self._unreachable_since is None:
            self._unreachable_since = now
        elif now - self._unreachable_since >= limit and not self._stopping:
            self.stop(
                f"{SERVER_UNREACHABLE} for {limit:g} s ({exc.detail})",
                VerdictCode.SERVER_UNREACHABLE,
            )

    def _release(self, seq: int) -> None:
        self._active.pop(seq, None)
        self._inflight -= 1
        waiter = self._slot_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._inflight == 0 and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- timing ------------------------------------------------------------------------

    async def _sleep_until(self, due: float, precise: bool = False) -> None:
        """Return at `due` (perf_counter) or on a stop; `precise` is for the issuer only."""
        while True:
            now = perf_counter()
            delay = due - now
            if delay <= 0 or self._stopping:
                return
            if not precise:
                await asyncio.sleep(min(delay, MAX_NAP))
            elif self._timer is not None and delay > TIMER_MIN:
                await self._timer.sleep_until(min(due, now + MAX_NAP))
            elif self._timer is not None:
                await asyncio.sleep(0)
            elif delay > SPIN_AHEAD:
                await asyncio.sleep(min(delay - SPIN_AHEAD, MAX_NAP))
            else:
                await asyncio.sleep(0)

    async def _sweep(self) -> None:
        """Cancel requests past their deadline; the cancellation is recorded as a timeout."""
        interval = min(0.05, self.settings.timeout / 4)
        active = self._active
        while True:
            await asyncio.sleep(interval)
            now = perf_counter()
            expired = []
            for seq, (deadline, task) in active.items():
                if deadline > now:
                    break
                expired.append((seq, task))
            for seq, task in expired:
                del active[seq]
                self._expired.add(seq)
                task.cancel()

    # -- records -----------------------------------------------------------------------

    def _flush(self) -> Future:
        for f in self._pending:
            if f.done() and f.exception():
                raise RuntimeError("writing records failed") from f.exception()
        future = self._executor.submit(self._write, self._buffer.take())
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(future)
        return future

    async def flush(self) -> None:
        """Hand the records buffered so far to the writer (and the sink) and wait for it."""
        await asyncio.wrap_future(self._flush())

    def elapsed(self) -> float:
        """Seconds since the schedule's time 0 (-inf before the run sets it)."""
        return perf_counter() - self._start if self._clock is not None else -math.inf

    async def snapshot(self) -> dict:
        """This part's counts so far (`load.live.PartCounts`), every request completed
        before the call counted (its watermark); in the run only."""
        assert self.counts is not None, "an engine made without counts"
        mark = self.elapsed()
        await self.flush()
        return self.counts.snapshot(self._inflight, mark)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return self._inflight

    def _write(self, chunk: Chunk) -> None:
        clock, measurements = self._clock, self._measurements
        assert clock is not None and measurements is not None, "records before the run started"
        if self._codes is not None:
            chunk.model = self._codes(chunk.seq)
        part = measurements.add(chunk)
        if self.counts is not None:
            self.counts.add(part)
        if self.sink is not None and len(chunk):
            self.sink.write(
                chunk_to_batch(
                    chunk,
                    trial_id=self.settings.trial_id,
                    batch_size=self.settings.batch_size,
                    clock=clock,
                    latency_from_send=self.settings.mode == "closed",
                    models=self.models,
                )
            )

    def _finish_records(self) -> None:
        """Write what is buffered and wait for the writer, even when the run failed."""
        self._executor.shutdown(wait=True)
        failed = [f.exception() for f in self._pending if f.exception()]
        self._pending = []
        self._write(self._buffer.take())
        if failed:
            raise RuntimeError("writing records failed") from failed[0]

    def _report(self) -> EngineReport:
        assert self._measurements is not None
        return EngineReport(
            columns=self._measurements.columns(),
            first_offset=self._first_offset,
            last_offset=self._last_offset,
            stop_reason=self._stop_reason,
            stop_code=self._stop_code if self._stop_reason else None,
            late_start=self._late_start,
        )
