"""The client-side split of a request's time (perf_analyzer's Client Send, Network+Server
and Client Recv): what each client times, how it reaches the records and the trial row,
and that runs written before it existed still read.

A local aiohttp server holds one phase of the exchange back at a time — it reads the
request body late, it answers late, or it sends the answer's headers and then its body
late — so each held phase must land in its own part of the split. Every check is a floor
the hold sets (the held phase takes at least the hold), never an upper bound on time.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path
from time import perf_counter

import loads
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aiohttp import web
from client_checks import random_request

from servebench.analysis.loader import ResultDirError, load_run
from servebench.clients.rawhttp import RawHttpClient
from servebench.clients.triton_grpc import TritonGrpcClient
from servebench.clients.triton_http import TritonHttpClient
from servebench.load import LoadSettings, MemoryRecordSink, columns_from_table, summarize
from servebench.load.records import read_records
from servebench.results import OPTIONAL_RECORD_COLUMNS, RECORD_SCHEMA, conform_records

HOLD_S = 0.1
# Larger than loopback's socket buffers: the write cannot finish before the server reads.
BIG_BODY = b"x" * (64 << 20)


async def _read_late(request: web.Request) -> web.Response:
    await asyncio.sleep(HOLD_S)
    await request.read()
    return web.Response(body=b"ok")


async def _answer_late(request: web.Request) -> web.Response:
    await request.read()
    await asyncio.sleep(HOLD_S)
    return web.Response(body=b"ok")


# The body is held for twice the floor the test checks: the client's receive starts when it
# reads the headers, which a busy machine can delay after they were sent (the hold's clock
# is already running); up to HOLD_S of that delay is the slack.
BODY_HOLD_S = 2 * HOLD_S


async def _body_late(request: web.Request) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse()
    await response.prepare(request)  # the headers go now: the client's receive starts
    await asyncio.sleep(BODY_HOLD_S)
    await response.write(b"y" * 4096)
    await response.write_eof()
    return response


@pytest.fixture
async def holding_server() -> AsyncIterator[str]:
    app = web.Application(client_max_size=len(BIG_BODY) + 1)
    app.router.add_post("/read-late", _read_late)
    app.router.add_post("/answer-late", _answer_late)
    app.router.add_post("/body-late", _body_late)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _one(url: str, body: bytes = b"{}") -> tuple[float, float, float]:
    """(send_s, receive_s, total seconds around the call) of one raw HTTP request."""
    client = RawHttpClient(url, body=body)
    await client.connect()
    try:
        start = perf_counter()
        result = await client.infer(await random_request(client, 1))
        total = perf_counter() - start
    finally:
        await client.close()
    return result.send_s, result.receive_s, total


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # aiohttp's note on a 64 MiB body
async def test_a_body_the_server_reads_late_is_client_send(holding_server: str) -> None:
    send_s, receive_s, total = await _one(f"{holding_server}/read-late", BIG_BODY)
    assert send_s >= HOLD_S
    assert receive_s >= 0 and send_s + receive_s <= total


async def test_a_late_answer_is_network_and_server(holding_server: str) -> None:
    send_s, receive_s, total = await _one(f"{holding_server}/answer-late")
    assert send_s >= 0 and receive_s >= 0
    assert total - send_s - receive_s >= HOLD_S


async def test_a_body_after_its_headers_is_client_receive(holding_server: str) -> None:
    send_s, receive_s, total = await _one(f"{holding_server}/body-late")
    assert receive_s >= HOLD_S
    assert send_s >= 0 and send_s + receive_s <= total


async def test_records_and_summary_carry_the_split(holding_server: str, tmp_path: Path) -> None:
    sink = MemoryRecordSink()
    settings = LoadSettings(concurrency=2, count=10, trial_id="split")
    summary = await loads.load_in_thread(
        lambda: RawHttpClient(f"{holding_server}/answer-late"), settings, records=sink
    )
    table = sink.table()
    records = table.to_pandas()
    assert records.ok.all() and len(records) == 10
    assert records.client_send_s.notna().all() and records.client_recv_s.notna().all()
    assert (records.client_send_s >= 0).all() and (records.client_recv_s >= 0).all()
    wait = records.completion_time - records.send_time
    assert (wait - records.client_send_s - records.client_recv_s >= HOLD_S).all()
    # The trial row's means, and the same figures again from the file.
    assert summary.client_send_s == pytest.approx(records.client_send_s.mean(), abs=1e-6)
    assert summary.client_recv_s == pytest.approx(records.client_recv_s.mean(), abs=1e-6)
    assert summary.network_server_s >= HOLD_S
    path = tmp_path / "split.parquet"
    pq.write_table(table, path)
    again = summarize(columns_from_table(read_records(path)), mode="closed", target_rate=None)
    assert again.network_server_s == pytest.approx(summary.network_server_s, abs=1e-4)
    assert again.client_recv_s == pytest.approx(summary.client_recv_s, abs=1e-6)


@pytest.mark.parametrize("variant", ["http", "grpc-lean", "grpcio"])
async def test_triton_clients_time_what_their_transport_shows(triton_dense_model, variant):
    """HTTP and the lean gRPC transport time both ends; grpcio only the receive (grpc.aio
    does not say when a request leaves, and requests are serialized once before the run)."""
    endpoints = triton_dense_model.server.endpoints
    client = (
        TritonHttpClient(endpoints.http_address, triton_dense_model.name)
        if variant == "http"
        else TritonGrpcClient(
            endpoints.grpc_address,
            triton_dense_model.name,
            transport="lean" if variant == "grpc-lean" else "grpcio",
        )
    )
    await client.connect()
    try:
        payload = await random_request(client, 4)
        start = perf_counter()
        result = await client.infer(payload)
        total = perf_counter() - start
    finally:
        await client.close()
    assert 0 <= result.receive_s <= total
    if variant == "grpcio":
        assert math.isnan(result.send_s)
    else:
        assert result.send_s >= 0 and result.send_s + result.receive_s <= total


# -- runs written before the split ---------------------------------------------------------


def _old_records(rows: int = 3) -> pa.Table:
    """A records table as servebench wrote it before the split (and model) columns existed."""
    old = pa.schema([f for f in RECORD_SCHEMA if f.name not in OPTIONAL_RECORD_COLUMNS])
    return pa.table(
        {
            "trial_id": ["t1"] * rows,
            "seq": np.arange(rows),
            "intended_time": np.arange(rows, dtype=float),
            "send_time": np.arange(rows, dtype=float),
            "completion_time": np.arange(rows, dtype=float) + 0.01,
            "latency": np.full(rows, 0.01),
            "ok": [True] * rows,
            "error_kind": pa.nulls(rows, pa.string()),
            "batch_size": pa.array([1] * rows, pa.int32()),
            "request_bytes": np.full(rows, 100),
            "response_bytes": np.full(rows, 50),
        },
        schema=old,
    )


def test_records_from_before_the_split_read_with_nulls(tmp_path: Path) -> None:
    run = tmp_path / "old-run"
    (run / "records").mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "old-run", "status": "complete"}')
    (run / "trials.csv").write_text("trial_id,status\nt1,ok\n")
    pq.write_table(_old_records(), run / "records.parquet")
    table = read_records(run / "records.parquet")
    assert table.schema.names == RECORD_SCHEMA.names
    assert table["client_send_s"].null_count == 3
    records = load_run(run).records
    assert records is not None and records["client_recv_s"].isna().all()
    summary = summarize(columns_from_table(table), mode="open", target_rate=None)
    assert math.isnan(summary.client_send_s) and math.isnan(summary.network_server_s)
    assert summary.latency_p50 == pytest.approx(0.01)


def test_records_lacking_another_column_are_refused(tmp_path: Path) -> None:
    table = _old_records().drop_columns(["latency"])
    with pytest.raises(ValueError, match=r"records lack columns \['latency'\]"):
        conform_records(table, "old")
    run = tmp_path / "broken"
    run.mkdir()
    (run / "run.json").write_text('{"run_id": "broken"}')
    pq.write_table(table, run / "records.parquet")
    with pytest.raises(ResultDirError, match="latency"):
        load_run(run)
