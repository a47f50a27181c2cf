"""Per-trial aggregates from telemetry rows, and the perf_analyzer-style latency breakdown.

Gauges (GPU utilization, memory, CPU, RSS) become mean/max over the trial's samples.
Server counters become the trial's increase (last minus first sample, with counter resets
handled as Prometheus' `increase()` does), and from those come what perf_analyzer calls
the server side of a request: queue time and compute time per request, and the average
batch the server formed. What was not measured is None, never 0.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping

from servebench.telemetry.rows import TelemetryRow

SERVER_METRICS = "server_metrics"
_US = 1e-6

# The keys read from the server's own metrics page (`triton_stats`, `tfs_stats`).
SERVER_METRIC_KEYS = (
    "server_requests", "server_failures", "server_inferences", "server_executions",
    "server_avg_batch", "server_queue_s", "server_compute_input_s", "server_compute_infer_s",
    "server_compute_output_s", "server_compute_s", "server_request_s",
)  # fmt: skip
# Keys every summary has, in this order (None where not measured).
SUMMARY_KEYS = (
    "gpu_util_mean", "gpu_util_max", "gpu_mem_max", "gpu_power_mean", "gpu_source",
    "server_cpu_mean", "server_cpu_max", "server_rss_max", "server_mem_max", "host_cpu_mean",
    *SERVER_METRIC_KEYS,
)  # fmt: skip


def _matches(labels: Mapping[str, str], match: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in match.items())


def _series(
    rows: Iterable[TelemetryRow], source: str, metric: str, match: Mapping[str, str] | None = None
) -> dict[str, list[tuple[float, float]]]:
    """label-key → [(timestamp, value)] in time order, for one metric of one source."""
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row.source == source and row.metric == metric and _matches(row.labels, match or {}):
            found[row.series[2]].append((row.timestamp, row.value))
    for points in found.values():
        points.sort()
    return found


def counter_increase(values: list[float]) -> float:
    """Increase of a counter over time-ordered values; a drop means the counter restarted
    from zero (server restart), so the value after the drop counts whole."""
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


def counter_delta(
    rows: Iterable[TelemetryRow], metric: str, match: Mapping[str, str] | None = None,
    source: str = SERVER_METRICS,
) -> float | None:  # fmt: skip
    """The trial's increase of `metric`, summed over every series whose labels match."""
    series = _series(rows, source, metric, match)
    if not series:
        return None
    return sum(counter_increase([v for _, v in points]) for points in series.values())


def _per_timestamp(rows: Iterable[TelemetryRow], source: str, metric: str, how: str) -> list[float]:
    """One value per sample time, across series (GPUs): their mean or their sum."""
    by_time: dict[float, list[float]] = defaultdict(list)
    for points in _series(rows, source, metric).values():
        for stamp, value in points:
            by_time[stamp].append(value)
    if how == "sum":
        return [sum(v) for _, v in sorted(by_time.items())]
    return [sum(v) / len(v) for _, v in sorted(by_time.items())]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _max(values: list[float]) -> float | None:
    return max(values) if values else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def triton_stats(rows: list[TelemetryRow], model: str | None = None) -> dict[str, float | None]:
    """Triton's `nv_inference_*` counters over the trial, for `model` or all models."""
    match = {"model": model} if model else {}

    def delta(metric: str) -> float | None:
        return counter_delta(rows, metric, match)

    requests = delta("nv_inference_request_success")
    inferences = delta("nv_inference_count")
    executions = delta("nv_inference_exec_count")
    parts = {
        name: _ratio(_scaled(delta(f"nv_inference_{name}_duration_us")), requests)
        for name in ("queue", "compute_input", "compute_infer", "compute_output", "request")
    }
    compute = [parts["compute_input"], parts["compute_infer"], parts["compute_output"]]
    return {
        "server_requests": requests,
        "server_failures": delta("nv_inference_request_failure"),
        "server_inferences": inferences,
        "server_executions": executions,
        "server_avg_batch": _ratio(inferences, executions),
        "server_queue_s": parts["queue"],
        "server_compute_input_s": parts["compute_input"],
        "server_compute_infer_s": parts["compute_infer"],
        "server_compute_output_s": parts["compute_output"],
        "server_compute_s": sum(compute) if all(p is not None for p in compute) else None,
        "server_request_s": parts["request"],
    }


def tfs_stats(rows: list[TelemetryRow], model: str | None = None) -> dict[str, float | None]:
    """TF Serving's monitoring metrics over the trial.

    Its request counter counts requests, not samples, so `server_avg_batch` is requests
    merged per batched run (`batching_session:wrapped_run_count`, batching on only).
    Queue time comes from the batching session and is not per model.
    """
    prefix = ":tensorflow:serving:"
    match = {"model_name": model} if model else {}
    count = prefix + "request_count"
    ok = counter_delta(rows, count, {**match, "status": "OK"})
    everything = counter_delta(rows, count, match)
    executions = counter_delta(rows, prefix + "batching_session:wrapped_run_count")

    def mean_s(histogram: str, match: Mapping[str, str]) -> float | None:
        total = counter_delta(rows, f"{prefix}{histogram}_sum", match)
        n = counter_delta(rows, f"{prefix}{histogram}_count", match)
        return _ratio(_scaled(total), n)

    return {
        "server_requests": ok,
        "server_failures": everything - ok if everything is not None and ok is not None else None,
        "server_inferences": None,
        "server_executions": executions,
        "server_avg_batch": _ratio(ok, executions),
        "server_queue_s": mean_s("batching_session:queuing_latency", {}),
        "server_compute_input_s": None,
        "server_compute_infer_s": None,
        "server_compute_output_s": None,
        "server_compute_s": mean_s("runtime_latency", match),
        "server_request_s": mean_s("request_latency", match),
    }


def _scaled(microseconds: float | None) -> float | None:
    return microseconds * _US if microseconds is not None else None


def aggregate(
    rows: Iterable[TelemetryRow], model: str | None = None, since: float | None = None
) -> dict:
    """The trial-summary fields telemetry contributes (`SUMMARY_KEYS`), from samples taken
    at or after `since` (the end of the warm-up; None: all of them).

    GPU figures come from NVML when it ran, else from the server's own GPU metrics
    (`gpu_source` says which). GPU memory is the peak of the sum over GPUs.
    """
    rows = [row for row in rows if since is None or row.timestamp >= since]
    summary: dict = dict.fromkeys(SUMMARY_KEYS)
    util = _per_timestamp(rows, "gpu", "gpu_utilization", "mean")
    if util:
        summary["gpu_source"] = "nvml"
        memory = _per_timestamp(rows, "gpu", "gpu_memory_used_bytes", "sum")
        power = _per_timestamp(rows, "gpu", "gpu_power_watts", "sum")
    else:
        util = _per_timestamp(rows, SERVER_METRICS, "nv_gpu_utilization", "mean")
        memory = _per_timestamp(rows, SERVER_METRICS, "nv_gpu_memory_used_bytes", "sum")
        power = _per_timestamp(rows, SERVER_METRICS, "nv_gpu_power_usage", "sum")
        summary["gpu_source"] = SERVER_METRICS if util else None
    summary.update(
        gpu_util_mean=_mean(util),
        gpu_util_max=_max(util),
        gpu_mem_max=_max(memory),
        gpu_power_mean=_mean(power),
    )
    cpu = _per_timestamp(rows, "server_process", "cpu_cores", "sum")
    summary.update(
        server_cpu_mean=_mean(cpu),
        server_cpu_max=_max(cpu),
        server_rss_max=_max(_per_timestamp(rows, "server_process", "rss_bytes", "sum")),
        server_mem_max=_max(_per_timestamp(rows, "server_process", "memory_bytes", "sum")),
        host_cpu_mean=_mean(_per_timestamp(rows, "host", "cpu_utilization", "mean")),
    )
    metrics = {row.metric for row in rows if row.source == SERVER_METRICS}
    if any(m.startswith("nv_inference_") for m in metrics):
        summary.update(triton_stats(rows, model))
    elif any(m.startswith(":tensorflow:serving:") for m in metrics):
        summary.update(tfs_stats(rows, model))
    return summary


def client_minus_server_s(client_latency_s: float, summary: Mapping) -> float | None:
    """Client latency minus the server's share of it: network plus client overhead.

    The server's share is its whole request time where it reports one (Triton's request
    duration, TF Serving's request latency), else queue plus compute; None if neither is
    known. Pass mean client latency: the server figures are means per request.
    """
    server = summary.get("server_request_s")
    if server is None:
        queue, compute = summary.get("server_queue_s"), summary.get("server_compute_s")
        if compute is None:
            return None
        server = compute + (queue or 0.0)
    return client_latency_s - server
