"""The engine with an in-process client: stop rules, warm-up, timeouts, the in-flight cap,
records, stability mode and what survives a failure.

No network, but the machine may be busy: timings are checked from below (a service time is
a floor under every latency) or against each other, never against an absolute ceiling, and
the tests wait for conditions rather than for a fixed time."""

from __future__ import annotations

import asyncio
import time

import loads
import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import until_async

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
)
from servebench.load import (
    INVALID,
    RECORD_SCHEMA,
    LoadSettings,
    MemoryRecordSink,
    ParquetRecordWriter,
    StabilitySettings,
    constant,
    linear,
    read_records,
)
from servebench.load.engine import BURST, LoadEngine
from servebench.load.events import LoadControl, Measuring
from servebench.load.mix import Mix, MixTarget


class FakeClient:
    """Answers after `delay` seconds; can fail in chosen ways at a chosen call."""

    def __init__(self, delay=0.001, fail_at=None, error=None):
        self.delay = delay
        self.fail_at = fail_at
        self.error = error
        self.calls = 0
        self.completed = 0  # calls that returned an answer

    async def connect(self):
        pass

    async def signature(self):
        return ModelSignature(name="fake", inputs=(), outputs=())

    def encode(self, batch_size, inputs):
        return Payload(batch_size=batch_size, inputs={}, encoded=b"x" * 100, request_bytes=100)

    async def infer(self, payload):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise self.error
        await asyncio.sleep(self.delay)
        self.completed += 1
        return InferResult(request_bytes=payload.request_bytes, response_bytes=50)

    async def close(self):
        pass


EPS = 1e-6  # seconds: rounding of record times (epoch float64, 2.4e-7 s) and float32 offsets


def load(client, sink=None, **kwargs):
    return loads.load(client, LoadSettings(**kwargs), records=sink)


def test_stop_on_count_only():
    sink = MemoryRecordSink()
    s = load(FakeClient(), sink, arrivals=constant(1000), count=300)
    assert s.count == 300 and s.ok == 300
    # The schedule is exact: 1000 req/s from the intended send times (float32 offsets in
    # the summary: ~1e-7 of 0.3 s). Each actual send leaves its lag later, never earlier,
    # so the sends span the schedule's span plus at most the largest lag, minus at most
    # the first's: bounds from what the run recorded, whatever the machine's load made
    # them. EPS covers the rounding of the stored times (epoch float64: 2.4e-7 s).
    assert s.scheduled_rate == pytest.approx(1000)
    t = sink.table().to_pandas().sort_values("seq")
    lag = (t.send_time - t.intended_time).to_numpy()
    assert (lag >= -EPS).all()
    span = 299 / 1000
    assert 299 / (span + lag.max() + EPS) <= s.achieved_rate
    assert s.achieved_rate * (span - lag[0] - EPS) <= 299


@pytest.mark.parametrize("count, expected", [(800, 800), (100, 500)])
def test_duration_and_count_run_until_both_are_met(count, expected):
    s = load(FakeClient(), arrivals=constant(1000), duration=0.5, count=count)
    assert s.count == expected


def test_warmup_is_not_recorded():
    sink = MemoryRecordSink()
    s = load(FakeClient(), sink, arrivals=constant(1000), warmup=0.2, duration=0.3)
    seq = sink.table()["seq"].to_numpy()
    assert s.count == 300 == len(seq)
    assert seq.min() == 200 and seq.max() == 499


def test_closed_loop_count_and_latency_from_send():
    sink = MemoryRecordSink()
    s = load(FakeClient(delay=0.002), sink, concurrency=4, count=200, think_time=0.001)
    t = sink.table().to_pandas()
    assert s.count == 200 == len(t) and s.mode == "closed"
    assert np.allclose(t.latency, t.completion_time - t.send_time, rtol=0, atol=EPS)
    assert len(set(t.seq)) == 200
    # The 2 ms service time is a floor under every latency (a busy machine only adds to it).
    assert (t.latency >= 0.002 - EPS).all()


def test_records_have_the_design_columns_and_open_loop_latency():
    sink = MemoryRecordSink()
    s = load(FakeClient(), sink, arrivals=constant(500), duration=0.4, batch_size=8, trial_id="t1")
    table = sink.table()
    assert (
        table.schema.names
        == RECORD_SCHEMA.names
        == [
            "trial_id",
            "seq",
            "intended_time",
            "send_time",
            "completion_time",
            "latency",
            "ok",
            "error_kind",
            "batch_size",
            "request_bytes",
            "response_bytes",
            "client_send_s",
            "client_recv_s",
            "model",
            "generator",
        ]
    )
    t = table.to_pandas()
    # A client that times neither end of the split leaves it null: not measured, not 0.
    assert t.client_send_s.isna().all() and t.client_recv_s.isna().all()
    assert s.client_send_s != s.client_send_s and s.network_server_s != s.network_server_s
    assert len(t) == s.count == 200
    assert (t.trial_id == "t1").all() and (t.batch_size == 8).all() and t.ok.all()
    assert t.error_kind.isna().all()
    assert t.model.isna().all()  # one model: the trial's row names it
    assert t.generator.isna().all()  # one process: no gang
    assert np.allclose(t.latency, t.completion_time - t.intended_time, rtol=0, atol=EPS)
    assert (t.send_time >= t.intended_time - EPS).all()
    assert (t.request_bytes == 100).all() and (t.response_bytes == 50).all()
    assert s.throughput_ips == pytest.approx(8 * s.throughput_rps)


def test_timeouts_are_cancelled_and_classified():
    s = load(FakeClient(delay=60.0), arrivals=constant(100), count=10, timeout=0.1)
    assert s.errors_by_kind == {"timeout": 10}
    assert s.verdict == INVALID
    # The sweeper cut them at about 0.1 s: without it the run would have lasted until the
    # answers came, 60 s after the first send, so any shorter run was cut.
    assert s.duration < 60.0


def test_client_errors_do_not_stop_the_run():
    s = load(
        FakeClient(fail_at=51, error=InferenceError(ErrorKind.SERVER_ERROR, "model failed")),
        arrivals=constant(1000),
        count=100,
    )
    assert s.count == 100 and s.errors_by_kind == {"server_error": 50}
    s = load(FakeClient(fail_at=1, error=ValueError("bug")), arrivals=constant(1000), count=20)
    assert s.errors_by_kind == {"client_error": 20}


def test_in_flight_cap_delays_sends_and_says_so():
    # 50 ms service, 5 in flight → at most 100 req/s against a 200 req/s schedule.
    s = load(FakeClient(delay=0.05), arrivals=constant(200), duration=0.5, max_in_flight=5)
    assert s.count == 100
    # Floors, which a busy machine only raises: send k waits for k // 5 service times, so it
    # leaves at least (k // 5) × 50 ms − k × 5 ms late: 25 ms or more from k = 5 on (95 of
    # 100), about 0.46 s for the last two, whose latency from the intended time is the p99.
    assert s.late_share > 0.5
    assert s.verdict == INVALID and "generator fell behind" in s.reasons[0]
    assert s.latency_p99 > 0.2  # measured from the intended time: the wait counts


def test_graceful_stop_keeps_records_and_marks_the_run():
    sink = MemoryRecordSink()

    async def main():
        control = LoadControl()
        task = asyncio.create_task(
            loads.load_in_thread(
                client,
                LoadSettings(arrivals=constant(500), duration=30, chunk_rows=50),
                records=sink,
                control=control,
            )
        )
        await until_async(lambda: sum(b.num_rows for b in sink.batches) >= 100, what="100 rows")
        begun = client.calls
        control.stop("test asked")
        return await task, begun

    client = FakeClient()
    s, begun = asyncio.run(main())
    # Stopped where it was asked, not after the 30 s schedule's 15,000: nothing is issued
    # once the stop is asked, so the run holds the requests begun by then and those the
    # issuer had created that had not started yet (at most one burst of overdue sends,
    # engine.BURST); every one of them is recorded.
    assert 100 <= begun <= s.count <= begun + BURST and s.count == sink.table().num_rows
    assert s.verdict == INVALID and s.reasons[0] == "stopped early: test asked"


def test_parquet_survives_an_exception_mid_run(tmp_path):
    path = tmp_path / "records.parquet"
    client = FakeClient(fail_at=301, error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        loads.load(client, LoadSettings(arrivals=constant(1000), duration=5), records=path)
    table = read_records(path)
    # everything that completed before the interrupt is on disk, and nothing else
    assert 0 < table.num_rows == client.completed <= 300
    assert pq.ParquetFile(path).metadata.num_rows == table.num_rows


def test_parquet_survives_cancellation(tmp_path):
    path = tmp_path / "records.parquet"
    writer = ParquetRecordWriter(path)

    async def main():
        settings = LoadSettings(arrivals=constant(1000), duration=10, chunk_rows=100)
        client = FakeClient()
        payload = client.encode(1, {})
        engine = LoadEngine(Mix([MixTarget("", 1.0, client, (payload,))], 0), settings, writer)
        task = asyncio.create_task(engine.run())
        await until_async(lambda: writer.rows >= 300, what="300 rows on disk")
        written = writer.rows
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return written

    written = asyncio.run(main())
    writer.close()
    rows = read_records(path).num_rows
    # Every row group written before the cancel, plus at most a chunk the writer thread
    # held at that moment and the partial chunk the cancel flushed: each under chunk_rows.
    assert written <= rows <= written + 2 * 100


def test_stability_mode_stable():
    settings = LoadSettings(
        arrivals=constant(400),
        stability=StabilitySettings(window=0.3, tolerance=0.2, percentile=50, max_windows=8),
    )
    # A 20 ms service time: a millisecond of scheduling noise on a busy machine moves a
    # window's p50 by 5 %, well inside the 20 % tolerance (at 3 ms it would be 33 %).
    s = loads.load(FakeClient(delay=0.02), settings)
    # (the verdict may still flag lateness on a busy machine; stability is what is tested)
    assert s.stable is True and not any(r.startswith("unstable") for r in s.reasons)
    assert 3 <= len(s.windows) <= 8
    # The summary covers the three agreeing windows: exactly their completions (a window
    # counts every completion stamped inside it), at the schedule's rate over them.
    assert s.count == sum(w.completed for w in s.windows[-3:])
    assert s.target_rate == pytest.approx(400)


def test_stability_mode_is_honest_when_load_keeps_changing():
    settings = LoadSettings(
        arrivals=linear(50, 400, 2000),
        stability=StabilitySettings(window=0.25, tolerance=0.05, percentile=50, max_windows=4),
    )
    s = loads.load(FakeClient(delay=0.002), settings)
    assert s.stable is False and len(s.windows) == 4
    assert s.verdict == INVALID and any(r.startswith("unstable") for r in s.reasons)


def test_records_file_must_be_writable(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ParquetRecordWriter(tmp_path / "missing" / "r.parquet")


class CountingClient(FakeClient):
    """A FakeClient that counts calls started and answers in flight, so a test can see
    what the server would have counted at any instant."""

    def __init__(self, delay=0.003):
        super().__init__(delay=delay)
        self.in_flight = 0

    async def infer(self, payload):
        self.in_flight += 1
        try:
            return await super().infer(payload)
        finally:
            self.in_flight -= 1


def _windowed(client, **kwargs):
    """Run a load whose window-opening hook snapshots the client, as a server's counters
    would be read there (an await inside it: nothing may be sent meanwhile)."""
    seen = {}

    def opens(event):
        if isinstance(event, Measuring):
            seen.update(calls=client.calls, completed=client.completed, in_flight=client.in_flight)
            time.sleep(0.05)
            seen["calls_after_wait"] = client.calls

    return loads.load(client, LoadSettings(**kwargs), subscribers=(opens,)), seen


@pytest.mark.parametrize("think_time", [0.0, 0.004])
def test_closed_loop_window_opens_with_nothing_in_flight_and_counts_exactly(think_time):
    # The counts a server would report between the opening reading and the end are the
    # client's measured requests, to the request: nothing in flight at the opening, nothing
    # sent while it is taken, every later request measured.
    client = CountingClient()
    s, seen = _windowed(client, concurrency=4, warmup=0.1, duration=0.3, think_time=think_time)
    assert seen["in_flight"] == 0 and seen["calls"] == seen["completed"] > 0
    assert seen["calls_after_wait"] == seen["calls"]
    assert client.completed - seen["completed"] == s.count == s.ok


def test_open_loop_window_opens_before_the_first_measured_send():
    # Open loop cannot drain: warm-up requests in flight at the opening reading complete
    # after it, so a server counts up to that many more than the client measures.
    client = CountingClient()
    s, seen = _windowed(client, arrivals=constant(500), warmup=0.1, duration=0.3)
    assert seen["calls"] == 50  # every warm-up send (0.1 s at 500 req/s), no measured one
    assert client.calls - seen["calls"] == s.count
    slack = client.completed - seen["completed"] - s.count
    assert 0 <= slack == seen["in_flight"]
