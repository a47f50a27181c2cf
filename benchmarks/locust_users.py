"""Locust users: load-generator CPU per request and what one Locust process sustains.

Usage: .venv/bin/python benchmarks/locust_users.py [--seconds 5] [--repeats 3]

Serves the same small dense model as `clients_cpu.py` (8 -> 4, batch <= 64) on the local
Triton and runs headless Locust (`servebench.locust`, ServebenchUser) with 8 users for
each protocol and batch size. The figure is the Locust process's own CPU time during the
swarm (`client_cpu_s` in trials.csv, from `time.process_time`) per request: what a request
costs the generator, for comparison with the asyncio clients (`clients_cpu.py`), and
1 / that is about the most one Locust process can send on one core. Medians of `repeats`
runs. Loopback only; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from dense_triton import served_dense_model

from servebench.servers.base import Server

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = ROOT / "servebench" / "locust" / "locustfile.py"
USERS = 8


def swarm(server: Server, model: str, protocol: str, batch: int, seconds: int, out: Path):
    run_id = f"{protocol}-b{batch}-{len(list(out.glob('*')))}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [
            sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
            "-u", str(USERS), "-r", str(USERS), "-t", f"{seconds}s", "--only-summary",
            "--host", server.endpoints.http_url, "--grpc-host", server.endpoints.grpc_address,
            "--model", model, "--protocol", protocol, "--batch-size", str(batch),
            "--results-dir", str(out), "--run-id", run_id,
        ],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    row = pd.read_csv(out / run_id / "trials.csv").iloc[0]
    assert row["errors"] == 0, f"{protocol} b{batch}: {row['errors']} failed requests"
    return row["client_cpu_s"] / row["count"] * 1e6, row["throughput_rps"], row["latency_p50"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5, help="swarm time per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the median is shown")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, served_dense_model() as (server, name):
        out = Path(tmp)
        print(f"{'protocol':<12} batch  CPU us/req   req/s  p50 ms  (median of {args.repeats})")
        for protocol in ("triton-http", "triton-grpc"):
            for batch in (1, 16):
                runs = [
                    swarm(server, name, protocol, batch, args.seconds, out / "runs")
                    for _ in range(args.repeats)
                ]
                cpu, rps, p50 = (statistics.median(r[i] for r in runs) for i in range(3))
                print(f"{protocol:<12} {batch:5d} {cpu:11.0f} {rps:7.0f} {p50 * 1e3:7.2f}")


if __name__ == "__main__":
    main()
