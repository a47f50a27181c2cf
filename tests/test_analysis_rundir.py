"""A realistic result directory, written file by file as the scenario runner writes it.

The numbers come from a small queueing simulation rather than constants, so the files
agree with each other the way a real run's do: trials.csv is computed from the records,
cost from throughput, the wifi trials from the direct ones plus the link.

The study: one conv model (1×28×28 input, 0.24 GFLOP/sample), two Triton settings
(batcher off × 1 instance, batcher on × 2 instances), batch sizes 1 and 16, links
`direct` and `wifi` (20 ms RTT, 15/30 Mbit/s), open-loop rates 4 and 8 req/s, plus a
trial that failed when its server crashed. Compute takes 1.5 ms + 4 ms per sample, the
wifi link 20 ms + 1.7 ms per sample, so the link dominates at batch 1 (≈80 %) and the
inference at batch 16 (≈58 %), as InferBench found.

Other analysis tests import `make_run_dir` from here; the tests at the bottom check the
builder itself keeps the contract.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from servebench.common.quantiles import percentile, percentiles
from servebench.results import RECORD_SCHEMA, TRIAL_COLUMNS, RunDirectory, TrialRow

SETTINGS = {
    "triton[dynamic_batching=off,instance_count=1]": {
        "dynamic_batching": False,
        "instance_count": 1,
    },
    "triton[dynamic_batching=on,instance_count=2]": {"dynamic_batching": True, "instance_count": 2},
}
MODEL = {
    "model": "conv-d3-w64-1a9df3",
    "layer_type": "conv",
    "depth": 3,
    "width": 64,
    "params": 2_500_000,
    "flops_per_sample": 0.24e9,
    "weight_bytes": 10_000_000,
    "activation_bytes": 600_000,
}
LINKS = {
    "direct": {"link_rtt_s": 0.0, "link_up_mbps": math.nan, "link_down_mbps": math.nan},
    "wifi": {"link_rtt_s": 0.020, "link_up_mbps": 15.0, "link_down_mbps": 30.0},
}
BATCHES = (1, 16)
RATES = (4.0, 8.0)
HOST_PEAK_FLOPS = 60e9
USD_PER_HOUR = 0.085
SAMPLE_BYTES = 28 * 28 * 4  # float32 input
REQUEST_OVERHEAD = 180  # JSON/HTTP framing per request
RESPONSE_BYTES_PER_SAMPLE = 10 * 4
COMPUTE_FIXED_S = 0.0015
COMPUTE_PER_SAMPLE_S = 0.004


def service_time(batch: int) -> float:
    return COMPUTE_FIXED_S + COMPUTE_PER_SAMPLE_S * batch


def simulate(
    rng: np.random.Generator,
    *,
    rate: float,
    duration: float,
    batch: int,
    instances: int,
    link: str,
    slow: float = 1.0,
) -> dict[str, np.ndarray]:
    """Poisson arrivals through the link into `instances` FIFO servers (Lindley's recursion).

    `slow` scales the service time only; the random draws do not depend on it.
    """
    gaps = rng.exponential(1 / rate, size=int(rate * duration * 1.2) + 10)
    intended = np.cumsum(gaps)
    intended = intended[intended < duration]
    n = intended.size
    send = intended + rng.uniform(0, 2e-4, n)  # the generator's schedule lag
    req_bytes = np.full(n, SAMPLE_BYTES * batch + REQUEST_OVERHEAD, dtype=np.int64)
    resp_bytes = np.full(n, RESPONSE_BYTES_PER_SAMPLE * batch + REQUEST_OVERHEAD, dtype=np.int64)
    profile = LINKS[link]
    if link == "direct":
        up = np.full(n, 1e-4)
        down = np.full(n, 1e-4)
    else:
        jitter = np.abs(rng.normal(0, 0.005 / math.sqrt(2), (2, n)))
        up = profile["link_rtt_s"] / 2 + req_bytes * 8 / (profile["link_up_mbps"] * 1e6) + jitter[0]
        down = (
            profile["link_rtt_s"] / 2
            + resp_bytes * 8 / (profile["link_down_mbps"] * 1e6)
            + jitter[1]
        )
    service = slow * service_time(batch) * rng.lognormal(0, 0.08, n)
    free = np.zeros(instances)
    start = np.empty(n)
    for i, arrival in enumerate(send + up):
        k = int(np.argmin(free))
        start[i] = max(arrival, free[k])
        free[k] = start[i] + service[i]
    completion = start + service + down
    # The client's own share, inside the first and last 0.1 ms of the direct link's
    # transfer times (so the figures above do not move): writing the request, reading
    # and decoding the answer. No random draw, so every other number stays as it was.
    client_send = 3e-5 + req_bytes / 1e10
    client_recv = 2e-5 + resp_bytes / 1e10
    return {
        "intended": intended,
        "send": send,
        "completion": completion,
        "service": service,
        "wait": start - (send + up),
        "request_bytes": req_bytes,
        "response_bytes": resp_bytes,
        "client_send": client_send,
        "client_recv": client_recv,
    }


def _trial_id(setting: str, batch: int, link: str, rate: float) -> str:
    import hashlib

    key = json.dumps([setting, MODEL["model"], batch, link, rate])
    return "t" + hashlib.sha256(key.encode()).hexdigest()[:10]


def make_run_dir(
    root: Path,
    *,
    run_id: str = "fixture-20261129T120000Z",
    duration: float = 150.0,
    seed: int = 7,
    status: str = "complete",
    reason: str | None = None,
    source: str = "servebench scenario runner",
    host_peak_bw: float | None = None,
    server_compute: bool = True,
    slow_factor: dict[str, float] | None = None,
) -> Path:
    """Write a full run directory under `root` and return its path.

    `slow_factor` maps a trial id to a factor that multiplies its service time (an
    injected regression); every random draw is the same whatever the factor, so two runs
    with one seed differ only where a factor says.
    """
    path = Path(root) / run_id
    (path / "records").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    epoch = 1_795_000_000.0
    t0 = epoch
    rows, tables = [], []
    index = 0
    for setting, values in SETTINGS.items():
        for batch in BATCHES:
            for link in LINKS:
                for rate in RATES:
                    trial_id = _trial_id(setting, batch, link, rate)
                    sim = simulate(
                        np.random.default_rng(rng.integers(2**63)),
                        rate=rate,
                        duration=duration,
                        batch=batch,
                        instances=values["instance_count"],
                        link=link,
                        slow=(slow_factor or {}).get(trial_id, 1.0),
                    )
                    table = _records(trial_id, sim, batch, t0, closed=False)
                    tables.append(table)
                    pq.write_table(table, path / "records" / f"{trial_id}.parquet")
                    rows.append(
                        _summary(
                            trial_id,
                            index,
                            setting,
                            values,
                            batch,
                            link,
                            rate,
                            sim,
                            duration,
                            server_compute,
                        )
                    )
                    index += 1
                    t0 += duration + 2
    # The server crashed during this one: 40 requests answered, then refused connections.
    failed_id = _trial_id("triton[dynamic_batching=off,instance_count=1]", 16, "direct", 12.0)
    sim = simulate(
        np.random.default_rng(99), rate=12.0, duration=10.0, batch=16, instances=1, link="direct"
    )
    n = sim["intended"].size
    codes = np.where(np.arange(n) < 40, None, "connection_refused")
    table = _records(failed_id, sim, 16, t0, closed=False, error_kinds=codes)
    tables.append(table)
    pq.write_table(table, path / "records" / f"{failed_id}.parquet")
    rows.append(
        {
            "trial_id": failed_id,
            "index": index,
            "status": "failed",
            "reason": "server crashed: tritonserver exited with code -9 during the trial",
            "verdict": "INVALID",
            "verdict_reasons": "server error",
            **_coordinates(
                "triton[dynamic_batching=off,instance_count=1]",
                SETTINGS["triton[dynamic_batching=off,instance_count=1]"],
                16,
                "direct",
                12.0,
            ),
            "count": n,
            "ok": 40,
            "errors": n - 40,
            "errors_by_kind": json.dumps({"connection_refused": int(n - 40)}),
            "host_peak_flops": HOST_PEAK_FLOPS,
        }
    )
    # As the runner writes it, schema checked.
    RunDirectory(path, rows=[TrialRow.from_record(r) for r in rows]).write_trials()
    pq.write_table(pa.concat_tables(tables), path / "records.parquet")

    cold = []
    for setting, values in SETTINGS.items():
        cold.append(
            {
                "server": "triton",
                "setting": setting,
                "model": None,
                "phase": "server_ready",
                "repeat": 0,
                "seconds": 0.07 + 0.01 * values["instance_count"],
            }
        )
        for repeat in range(3):
            cold.append(
                {
                    "server": "triton",
                    "setting": setting,
                    "model": MODEL["model"],
                    "phase": "model_load",
                    "repeat": repeat,
                    "seconds": 1.4 * values["instance_count"] ** 0.3 + 0.05 * repeat,
                }
            )
            cold.append(
                {
                    "server": "triton",
                    "setting": setting,
                    "model": MODEL["model"],
                    "phase": "first_inference",
                    "repeat": repeat,
                    "seconds": 0.045 + 0.004 * repeat,
                }
            )
        cold.append(
            {
                "server": "triton",
                "setting": setting,
                "model": MODEL["model"],
                "phase": "warm_median",
                "repeat": 0,
                "seconds": service_time(1),
            }
        )
    pd.DataFrame(cold).to_csv(path / "cold_start.csv", index=False)

    ts = epoch + np.arange(0, t0 - epoch, 1.0)
    pq.write_table(
        pa.table(
            {
                "timestamp": ts,
                "trial_id": pa.array([None] * ts.size, pa.string()),
                "source": ["host"] * ts.size,
                "metric": ["cpu_utilization"] * ts.size,
                "value": 0.5 + 0.2 * np.sin(ts / 30),
                "labels": ["{}"] * ts.size,
            }
        ),
        path / "telemetry.parquet",
    )
    (path / "scenario.yaml").write_text(
        "# fixture: conv model over direct and wifi\nname: fixture\nseed: 7\n"
        "workload:\n  rates: [4, 8]\n  batch_sizes: [1, 16]\nlinks: [direct, wifi]\n"
    )
    run = {
        "run_id": run_id,
        "scenario": "scenarios/fixture.yaml",
        "status": status,
        "reason": reason,
        "started_at": "2026-11-29T12:00:00+00:00",
        "ended_at": "2026-11-29T12:43:00+00:00",
        "machine": {
            "hostname": "bench-1",
            "platform": "Linux-6.1-x86_64",
            "python": "3.11.2",
            "cpus": 2,
            "memory_bytes": 24 * 2**30,
        },
        "versions": {"servebench": "0.1.0", "numpy": "1.26.4", "nvidia-pytriton": "0.7.0"},
        "source": source,
        "trials_planned": len(rows),
    }
    if host_peak_bw is not None:
        run["host_peak_bw"] = host_peak_bw  # where record_host_peaks keeps it
    (path / "run.json").write_text(json.dumps(run, indent=2))
    return path


def run_without_trials(root: Path, run_id: str, status: str, reason: str) -> Path:
    """A run directory holding only its run.json: a run that ended before any trial."""
    run = root / run_id
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps({"run_id": run_id, "status": status, "reason": reason})
    )
    return run


def _records(trial_id, sim, batch, t0, *, closed, error_kinds=None) -> pa.Table:
    n = sim["intended"].size
    kinds = error_kinds if error_kinds is not None else np.full(n, None, dtype=object)
    ok = np.array([k is None for k in kinds])
    origin = sim["send"] if closed else sim["intended"]
    return pa.table(
        {
            "trial_id": pa.array([trial_id] * n, pa.string()),
            "seq": pa.array(np.arange(n, dtype=np.int64)),
            "intended_time": pa.array(sim["intended"] + t0),
            "send_time": pa.array(sim["send"] + t0),
            "completion_time": pa.array(sim["completion"] + t0),
            "latency": pa.array(sim["completion"] - origin),
            "ok": pa.array(ok),
            "error_kind": pa.array(list(kinds), pa.string()),
            "batch_size": pa.array(np.full(n, batch, dtype=np.int32)),
            "request_bytes": pa.array(sim["request_bytes"]),
            "response_bytes": pa.array(sim["response_bytes"]),
            # A failed request has no split: null, as the load engine writes it.
            "client_send_s": pa.array(np.where(ok, sim["client_send"], np.nan), from_pandas=True),
            "client_recv_s": pa.array(np.where(ok, sim["client_recv"], np.nan), from_pandas=True),
            "model": pa.nulls(n, pa.string()),  # trials of one model, as the engine writes them
            "generator": pa.nulls(n, pa.int32()),  # one process, as the engine writes them
        }
    )


def _coordinates(setting: str, values: dict, batch: int, link: str, rate: float) -> dict:
    return {
        "server": "triton",
        "api": "triton",
        "launch": "local",
        "protocol": "http",
        "setting": setting,
        "settings_json": json.dumps(values),
        **MODEL,
        "batch_size": batch,
        "link": link,
        **LINKS[link],
        "load_kind": "rate",
        "load_level": rate,
        "mode": "open",
    }


def _summary(
    trial_id, index, setting, values, batch, link, rate, sim, duration, server_compute
) -> dict:
    latency = sim["completion"] - sim["intended"]
    n = latency.size
    q = percentiles(latency, [50, 90, 95, 99, 99.9])  # as the runner: nearest rank
    rps = n / duration
    ips = rps * batch
    profile = LINKS[link]
    analytic = 0.0
    if link != "direct":
        analytic = (
            profile["link_rtt_s"]
            + sim["request_bytes"].mean() * 8 / (profile["link_up_mbps"] * 1e6)
            + sim["response_bytes"].mean() * 8 / (profile["link_down_mbps"] * 1e6)
        )
    return {
        "trial_id": trial_id,
        "index": index,
        "status": "ok",
        "reason": None,
        "verdict": "VALID",
        "verdict_reasons": None,
        **_coordinates(setting, values, batch, link, rate),
        "count": n,
        "ok": n,
        "errors": 0,
        "errors_by_kind": "{}",
        "target_rate": rate,
        "achieved_rate": rps,
        "throughput_rps": rps,
        "throughput_ips": ips,
        "latency_mean": latency.mean(),
        "latency_p50": q[0],
        "latency_p90": q[1],
        "latency_p95": q[2],
        "latency_p99": q[3],
        "latency_p99_9": q[4],
        "latency_max": latency.max(),
        "schedule_lag_p99": percentile(sim["send"] - sim["intended"], 99),
        "late_share": 0.0,
        "duration": duration,
        "client_send_s": sim["client_send"].mean(),
        "client_recv_s": sim["client_recv"].mean(),
        "network_server_s": (
            sim["completion"] - sim["send"] - sim["client_send"] - sim["client_recv"]
        ).mean(),
        "request_bytes_mean": sim["request_bytes"].mean(),
        "response_bytes_mean": sim["response_bytes"].mean(),
        "link_time_analytic_s": analytic,
        "server_queue_s": sim["wait"].mean() if server_compute else None,
        "server_compute_s": sim["service"].mean() if server_compute else None,
        "client_minus_server_s": None,
        "server_avg_batch": float(batch),
        "gpu_util_mean": None,
        "gpu_util_max": None,
        "gpu_mem_max": None,
        # cores: the backend's busy share plus the front end's own work
        "server_cpu_mean": 0.05 + min(1.0, rate * service_time(batch)),
        "server_rss_max": 450e6,
        "host_cpu_mean": 0.55,
        "instance": "c6i.large",
        "usd_per_hour": USD_PER_HOUR,
        "cost_per_million": USD_PER_HOUR / (ips * 3600) * 1e6,
        "slo_percentile": 99.0,
        "slo_bound_s": 0.2,
        "slo_latency_s": q[3],
        "slo_met": "met" if q[3] <= 0.2 else "missed",
        "max_rate": None,
        "host_peak_flops": HOST_PEAK_FLOPS,
    }


# -- the builder keeps the contract ------------------------------------------------------


def test_fixture_matches_the_schemas(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=20)
    table = pq.read_table(run / "records.parquet")
    assert table.schema.names == list(RECORD_SCHEMA.names)
    for field in RECORD_SCHEMA:
        assert table.schema.field(field.name).type == field.type, field.name
    assert set(pd.read_csv(run / "trials.csv").columns) <= TRIAL_COLUMNS


def test_fixture_counts_agree_with_records(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=20)
    trials = pd.read_csv(run / "trials.csv")
    records = pq.read_table(run / "records.parquet").to_pandas()
    counts = records.groupby("trial_id").size()
    assert (
        trials.set_index("trial_id")["count"] == counts.reindex(trials["trial_id"]).to_numpy()
    ).all()
    assert len(trials) == 17 and (trials["status"] == "failed").sum() == 1
