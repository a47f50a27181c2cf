"""Telemetry without a model server: parsing, counter deltas, summaries, parquet, samplers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import until

from servebench.telemetry import (
    NO_GPU,
    HostSampler,
    NvmlSampler,
    ProcessTreeSampler,
    PrometheusSampler,
    SamplerUnavailable,
    TelemetryRecorder,
    TelemetryRow,
    TelemetryWriter,
    aggregate,
    client_minus_server_s,
    parse_metrics,
    read_telemetry,
    write_telemetry,
)
from servebench.telemetry.aggregate import counter_increase


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _sample_times(recorder: TelemetryRecorder, source: str) -> set[float]:
    """The distinct times `source` was sampled at so far (one per sampling round)."""
    return {r.timestamp for r in recorder.snapshot() if r.source == source}


# What Triton 2.51 prints (trimmed) and what TF Serving's Prometheus exporter prints.
TRITON_PAGE = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{{model="m",version="1"}} {success}
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{{model="m",reason="BACKEND",version="1"}} 0
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {count}
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{{model="m",version="1"}} {execs}
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{{model="m",version="1"}} {request_us}
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{{model="m",version="1"}} {queue_us}
# TYPE nv_inference_compute_input_duration_us counter
nv_inference_compute_input_duration_us{{model="m",version="1"}} {input_us}
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{{model="m",version="1"}} {infer_us}
# TYPE nv_inference_compute_output_duration_us counter
nv_inference_compute_output_duration_us{{model="m",version="1"}} {output_us}
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{{gpu_uuid="GPU-1"}} {gpu}
# TYPE nv_pinned_memory_pool_total_bytes gauge
nv_pinned_memory_pool_total_bytes 268435456
"""

TFS_PAGE = """\
# TYPE :tensorflow:serving:request_count counter
:tensorflow:serving:request_count{{model_name="m",status="OK"}} {ok}
:tensorflow:serving:request_count{{model_name="m",status="INVALID_ARGUMENT"}} {bad}
# TYPE :tensorflow:serving:request_latency histogram
:tensorflow:serving:request_latency_bucket{{model_name="m",API="predict",entrypoint="REST",le="10"}} 0
:tensorflow:serving:request_latency_bucket{{model_name="m",API="predict",entrypoint="REST",le="+Inf"}} {ok}
:tensorflow:serving:request_latency_sum{{model_name="m",API="predict",entrypoint="REST"}} {req_us}
:tensorflow:serving:request_latency_count{{model_name="m",API="predict",entrypoint="REST"}} {ok}
# TYPE :tensorflow:serving:runtime_latency histogram
:tensorflow:serving:runtime_latency_sum{{model_name="m",API="Predict",runtime="TF1"}} {run_us}
:tensorflow:serving:runtime_latency_count{{model_name="m",API="Predict",runtime="TF1"}} {runs}
# TYPE :tensorflow:serving:batching_session:queuing_latency histogram
:tensorflow:serving:batching_session:queuing_latency_sum{{thread_pool_name="model_server_batch_threads"}} {queue_us}
:tensorflow:serving:batching_session:queuing_latency_count{{thread_pool_name="model_server_batch_threads"}} {ok}
# TYPE :tensorflow:serving:batching_session:wrapped_run_count counter
:tensorflow:serving:batching_session:wrapped_run_count {execs}
# TYPE :tensorflow:core:graph_runs counter
:tensorflow:core:graph_runs 12
"""


def _rows(source: str, page: str, stamp: float) -> list[TelemetryRow]:
    return [
        TelemetryRow("t1", stamp, source, r.metric, r.value, r.labels) for r in parse_metrics(page)
    ]


def _triton(stamp: float, **values: float) -> list[TelemetryRow]:
    return _rows("server_metrics", TRITON_PAGE.format(**values), stamp)


def test_parse_keeps_the_page_names_and_drops_buckets() -> None:
    page = TRITON_PAGE.format(success=5, count=9, execs=3, request_us=1, queue_us=1,
                              input_us=1, infer_us=1, output_us=1, gpu=0.5)  # fmt: skip
    readings = {r.metric: r for r in parse_metrics(page)}
    # prometheus_client renames counter samples to *_total; rows keep the page's name.
    assert readings["nv_inference_request_success"].value == 5
    assert readings["nv_inference_request_success"].labels == {"model": "m", "version": "1"}
    assert readings["nv_gpu_utilization"].value == 0.5
    assert "nv_pinned_memory_pool_total_bytes" not in readings  # not a family we keep
    tfs = {r.metric for r in parse_metrics(TFS_PAGE.format(
        ok=1, bad=0, req_us=1, run_us=1, runs=1, queue_us=1, execs=1))}  # fmt: skip
    assert ":tensorflow:serving:request_latency_sum" in tfs
    assert not any(m.endswith("_bucket") for m in tfs)
    assert ":tensorflow:core:graph_runs" not in tfs


def test_counter_increase_handles_restarts() -> None:
    assert counter_increase([10, 15, 15, 30]) == 20
    assert counter_increase([10, 15, 3, 8]) == 5 + 3 + 5  # restarted from 0 after 15
    assert counter_increase([7]) == 0


def test_triton_summary_is_per_request_and_per_execution() -> None:
    start = dict(success=100, count=150, execs=60, request_us=1e6, queue_us=2e5,
                 input_us=1e4, infer_us=5e5, output_us=1e4, gpu=0.2)  # fmt: skip
    # The trial: 40 requests (80 inferences) in 10 executions, 4 ms queue, 10 ms compute.
    end = dict(success=140, count=230, execs=70, request_us=1e6 + 40 * 15_000,
               queue_us=2e5 + 40 * 4_000, input_us=1e4 + 40 * 1_000,
               infer_us=5e5 + 40 * 8_000, output_us=1e4 + 40 * 1_000, gpu=0.6)  # fmt: skip
    rows = _triton(1.0, **start) + _triton(1.5, **{**start, "gpu": 0.4}) + _triton(2.0, **end)
    summary = aggregate(rows, model="m")
    assert summary["server_requests"] == 40
    assert summary["server_inferences"] == 80
    assert summary["server_executions"] == 10
    assert summary["server_avg_batch"] == pytest.approx(8.0)
    assert summary["server_queue_s"] == pytest.approx(0.004)
    assert summary["server_compute_infer_s"] == pytest.approx(0.008)
    assert summary["server_compute_s"] == pytest.approx(0.010)
    assert summary["server_request_s"] == pytest.approx(0.015)
    assert summary["server_failures"] == 0
    # No NVML rows: the GPU figures fall back to the server's own gauge, and say so.
    assert summary["gpu_source"] == "server_metrics"
    assert summary["gpu_util_mean"] == pytest.approx(0.4)
    assert summary["gpu_util_max"] == pytest.approx(0.6)
    # Another model's name matches nothing: not measured is None, not 0.
    assert aggregate(rows, model="other")["server_requests"] is None
    # Client latency 20 ms mean, server request time 15 ms: 5 ms network + client.
    assert client_minus_server_s(0.020, summary) == pytest.approx(0.005)


def test_tfs_summary() -> None:
    page = TFS_PAGE.format
    rows = _rows("server_metrics", page(ok=10, bad=1, req_us=1e5, run_us=5e4, runs=5,
                                        queue_us=2e4, execs=5), 1.0)  # fmt: skip
    rows += _rows("server_metrics", page(ok=30, bad=2, req_us=1e5 + 20 * 3000,
                                         run_us=5e4 + 5 * 2000, runs=10,
                                         queue_us=2e4 + 20 * 500, execs=10), 2.0)  # fmt: skip
    summary = aggregate(rows, model="m")
    assert summary["server_requests"] == 20
    assert summary["server_failures"] == 1
    assert summary["server_executions"] == 5
    assert summary["server_avg_batch"] == pytest.approx(4.0)  # requests per batched run
    assert summary["server_request_s"] == pytest.approx(0.003)
    assert summary["server_compute_s"] == pytest.approx(0.002)
    assert summary["server_queue_s"] == pytest.approx(0.0005)
    assert summary["server_inferences"] is None
    assert client_minus_server_s(0.005, summary) == pytest.approx(0.002)
    assert client_minus_server_s(0.005, {"server_request_s": None}) is None


def test_parquet_round_trip_and_append_by_trial(tmp_path: Path) -> None:
    first = [TelemetryRow("a", 1.0, "gpu", "gpu_utilization", 0.5, {"gpu": "0"})]
    second = [TelemetryRow("b", 2.0, "host", "cpu_utilization", 0.25, {})]
    path = tmp_path / "telemetry.parquet"
    with TelemetryWriter(path) as writer:
        writer.write(first)
        writer.write([])
        writer.write(second)
    assert read_telemetry(path) == first + second
    assert read_telemetry(write_telemetry(second, tmp_path / "one.parquet")) == second


def test_no_nvml_is_one_note_not_an_error() -> None:
    try:
        NvmlSampler().close()
    except SamplerUnavailable as err:
        assert str(err).startswith(NO_GPU)
        recorder = TelemetryRecorder.for_server(gpu=True, host=True, interval_s=0.05)
        with recorder:  # several rounds, so a note repeated per round would show
            until(lambda: len(_sample_times(recorder, "host")) >= 3, what="3 host samples")
        assert [n for n in recorder.notes if n.startswith(NO_GPU)] == [str(err)]
        assert not [r for r in recorder.rows if r.source == "gpu"]
        assert recorder.summary()["gpu_util_mean"] is None
    else:  # a machine with a GPU: the sampler must read real values instead
        recorder = TelemetryRecorder.for_server(gpu=True, host=False, interval_s=0.05)
        with recorder:
            until(lambda: len(_sample_times(recorder, "gpu")) >= 3, what="3 GPU samples")
        assert recorder.summary()["gpu_source"] == "nvml"


BUSY_TREE = textwrap.dedent(
    """
    import multiprocessing, time
    def spin(seconds):
        end = time.time() + seconds
        while time.time() < end:
            pass
    if __name__ == "__main__":
        child = multiprocessing.Process(target=spin, args=(30,))
        child.start()
        spin(30)
    """
)


@pytest.fixture
def busy_tree():
    """A process that spins and has a spinning child: a server-shaped process tree."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_TREE])
    try:
        yield proc
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def test_process_tree_cpu_is_the_whole_trees(busy_tree) -> None:
    """The sampler reports what the leader and its child used together (each gets whatever
    share the busy machine leaves it); counting the leader alone would read about half.

    Checked against the tree's own CPU counters read inside the sampler's interval: the
    sampler's window holds ours, so its CPU is at least ours and at most ours plus what
    the two processes (a core each at most) can use in the moments between its reads and
    ours, plus a clock tick per process and reading (the kernel counts CPU time in ticks);
    its interval lies between the gaps of those reads.
    """
    leader = psutil.Process(busy_tree.pid)
    until(leader.children, what="the spinning child")
    tree = [leader, *leader.children()]
    sampler = ProcessTreeSampler(busy_tree.pid)
    t0 = time.monotonic()
    sampler.sample()
    t1 = time.monotonic()
    before = sum(_cpu_seconds(p) for p in tree)
    tb = time.monotonic()
    until(lambda: sum(_cpu_seconds(p) for p in tree) - before >= 0.5, what="0.5 s of CPU")
    ta = time.monotonic()
    used = sum(_cpu_seconds(p) for p in tree) - before
    t2 = time.monotonic()
    (cores,) = [r.value for r in sampler.sample() if r.metric == "cpu_cores"]
    t3 = time.monotonic()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    unseen = len(tree) * ((tb - t0) + (t3 - ta)) + 2 * 2 * len(tree) * tick
    assert used / (t3 - t0) <= cores <= (used + unseen) / (t2 - t1), (used, unseen, cores)


def test_recorder_summary_under_load(busy_tree) -> None:
    leader = psutil.Process(busy_tree.pid)
    until(leader.children, what="the spinning child")
    recorder = TelemetryRecorder(
        [ProcessTreeSampler(busy_tree.pid), HostSampler()], interval_s=0.1, trial_id="busy"
    )
    with recorder:
        until(lambda: len(_sample_times(recorder, "server_process")) >= 5, what="5 samples")
    summary = recorder.summary()
    cores = [r.value for r in recorder.rows if r.metric == "cpu_cores"]
    # The mean over the intervals sampled (not compared with the tree's counters: each
    # interval's figure carries a clock tick of error per process, which a short closing
    # interval magnifies; the sampler's own accuracy is the test above).
    assert summary["server_cpu_mean"] == pytest.approx(sum(cores) / len(cores))
    assert summary["server_cpu_mean"] > 0
    assert summary["server_rss_max"] > 1_000_000
    assert 0 < summary["host_cpu_mean"] <= 1
    processes = [r.value for r in recorder.rows if r.metric == "processes"]
    assert max(processes) >= 2
    assert all(r.trial_id == "busy" for r in recorder.rows)


def test_failing_scrape_is_noted_once_and_sampling_goes_on() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scraper = PrometheusSampler(f"http://127.0.0.1:{port}/metrics", timeout_s=0.5)
    recorder = TelemetryRecorder([scraper, HostSampler()], interval_s=0.05)
    with recorder:  # each round scrapes (and fails) again
        until(lambda: len(_sample_times(recorder, "host")) >= 3, what="3 host samples")
    scrape_notes = [n for n in recorder.notes if n.startswith("server_metrics")]
    assert len(scrape_notes) == 1 and str(port) in scrape_notes[0]


def test_gone_process_is_unavailable() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(SamplerUnavailable, match=f"pid {proc.pid}"):
        ProcessTreeSampler(proc.pid)
    with pytest.raises(ValueError, match="interval_s"):
        TelemetryRecorder([], interval_s=0)
