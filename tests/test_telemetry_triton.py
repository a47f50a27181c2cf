"""Telemetry beside a real local Triton under concurrent load.

The server's own counters must account for exactly the requests this test sent, the
dynamic batcher must merge concurrent ones (average batch > 1), and psutil must see the
server's process tree working.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from servebench.scenario.serving import client_probe
from servebench.servers.local import LocalTritonServer
from servebench.telemetry import (
    PrometheusSampler,
    TelemetryRecorder,
    read_telemetry,
    write_telemetry,
)
from servebench.telemetry.aggregate import aggregate

CLIENTS = 16
REQUESTS = 96
# Batch-1 inferences sent one after another over one connection: (server, model, n) → seconds
probe = client_probe("triton", "http", timeout_s=30.0)


@pytest.fixture(scope="module")
def server(triton_batching_model, tmp_path_factory) -> LocalTritonServer:
    server = LocalTritonServer(
        triton_batching_model.repository, run_dir=tmp_path_factory.mktemp("triton-telemetry")
    )
    server.start()
    try:
        server.load_model(triton_batching_model.name)
        yield server
    finally:
        server.stop()


def test_warm_up_requests_are_not_counted(server: LocalTritonServer, triton_batching_model) -> None:
    name = triton_batching_model.name
    recorder = TelemetryRecorder.for_server(
        pid=server.pid, metrics_url=server.endpoints.metrics_url, interval_s=0.2, trial_id="w"
    )
    with recorder:
        probe(server, name, 7)  # the warm-up, sent while the recorder already samples
        recorder.mark_measured(quiet=True)  # the probe's answers are in: none in flight
        probe(server, name, 5)
    assert recorder.summary(model=name)["server_requests"] == 5
    assert aggregate(recorder.snapshot(), model=name)["server_requests"] == 12


def test_scrape_deltas_match_the_requests_sent(
    server: LocalTritonServer, triton_batching_model, tmp_path: Path
) -> None:
    name = triton_batching_model.name
    probe(server, name, 1)  # before the trial: must not be counted in it
    # Triton counts a request a moment after its answer left: let the counters settle, as
    # a trial's first reading does, so the recorder's first sample has it.
    assert PrometheusSampler(server.endpoints.metrics_url).wait_until_quiet()
    recorder = TelemetryRecorder.for_server(
        pid=server.pid, metrics_url=server.endpoints.metrics_url, interval_s=0.2, trial_id="t"
    )
    with recorder, ThreadPoolExecutor(CLIENTS) as pool:
        each = pool.map(lambda _: probe(server, name, REQUESTS // CLIENTS), range(CLIENTS))
        latencies = [seconds for client in each for seconds in client]
    assert not [n for n in recorder.notes if n.startswith(("server_metrics", "server_process"))]
    summary = recorder.summary(model=name)

    assert summary["server_requests"] == REQUESTS
    assert summary["server_inferences"] == REQUESTS  # batch 1 per request
    assert summary["server_failures"] == 0
    # 16 clients at once and a 10 ms queue delay: the batcher merges requests.
    assert summary["server_executions"] < REQUESTS
    assert summary["server_avg_batch"] > 1.0
    assert 0 < summary["server_queue_s"] < 5
    assert 0 < summary["server_compute_s"] < 5
    assert summary["server_request_s"] >= summary["server_queue_s"]
    # The client waited at least as long as the server worked on each request (its answer
    # left the server before it arrived), so on average over the same 96 requests too.
    client_mean = sum(latencies) / len(latencies)
    assert summary["server_request_s"] <= client_mean
    # psutil sees the server (tritonserver + python stub) working and holding memory.
    assert summary["server_cpu_mean"] > 0
    assert summary["server_rss_max"] > 10_000_000
    assert 0 < summary["host_cpu_mean"] <= 1

    path = write_telemetry(recorder.rows, tmp_path / "telemetry.parquet")
    back = read_telemetry(path)
    assert len(back) == len(recorder.rows)
    assert {r.source for r in back} >= {"server_process", "host", "server_metrics"}
