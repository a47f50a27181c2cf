"""The M/D/c check of a generator gang (issue 24): does one Poisson load sent by two
generators measure the same tail as the same load sent by one?

A server with a known service time and c instances — an aiohttp handler that holds one of
c slots for exactly `--service-ms` (asyncio.sleep), first come first served — is driven by
`servebench load --poisson` at the same total rate and the same seed, so both runs send
the very same schedule, once from one process and once from a gang of two (`--generators
2`, a LocalCluster). The merged p99 of the gang and the single process's p99 are printed
with their 95 % intervals (the records' order statistics, `common.quantiles`), and whether
the intervals overlap. As a reference, the same arrivals are put through an exact M/D/c
queue offline (FIFO, c servers, service D): the p99 a perfect server and a perfect clock
would give; the measured ones sit above it by the HTTP round trip and the sleep's overshoot.

Usage: .venv/bin/python benchmarks/gang_mdc.py [--rate 140] [--service-ms 10]
[--instances 2] [--duration 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from loadgen_peers import free_port, wait_for_port  # benchmarks/: the peers' port helpers

from servebench.common.quantiles import percentile
from servebench.load.arrivals import poisson

SERVER = """
import asyncio, sys
from aiohttp import web

slots = asyncio.Semaphore(int(sys.argv[2]))
service = float(sys.argv[3])

async def answer(request):
    await request.read()
    async with slots:  # c instances, each busy for exactly the service time
        await asyncio.sleep(service)
    return web.Response(text="ok")

app = web.Application()
app.router.add_route("*", "/", answer)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def mdc_p99(rate: float, seed: int, warmup: float, duration: float, c: int, service: float):
    """The p99 of the sojourn times of an exact FIFO M/D/c queue fed the run's arrivals
    (servebench's own seeded schedule), over the measured window."""
    offsets = poisson(rate, seed).offsets()
    arrivals = list(itertools.takewhile(lambda t: t < warmup + duration, offsets))
    free = [0.0] * c  # when each server is next free
    sojourns = []
    for t in arrivals:
        start = max(t, heapq.heappop(free))
        heapq.heappush(free, start + service)
        if t >= warmup:
            sojourns.append(start + service - t)
    return percentile(np.asarray(sojourns), 99), len(sojourns)


def run_load(url: str, args, generators: int, seed: int, out: Path) -> dict:
    summary = out / f"g{generators}-s{seed}.json"
    command = [
        str(Path(sys.executable).with_name("servebench")), "load", "--url", url,
        "--rate", str(args.rate), "--poisson", "--seed", str(seed),
        "--duration", str(args.duration), "--warmup", str(args.warmup),
        "--generators", str(generators), "--json", str(summary),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 3) or not summary.exists():
        raise SystemExit(f"servebench load failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(summary.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=140.0)
    parser.add_argument("--service-ms", type=float, default=10.0)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    service = args.service_ms / 1e3
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(args.instances), str(service)]
    )
    try:
        wait_for_port(port, timeout=20.0)
        url = f"http://127.0.0.1:{port}/"
        print(
            f"M/D/c: c={args.instances}, D={args.service_ms:g} ms, Poisson {args.rate:g} req/s "
            f"(utilization {args.rate * service / args.instances:.0%}), {args.duration:g} s "
            f"after {args.warmup:g} s warm-up; load average {os.getloadavg()[0]:.1f}"
        )
        print("seed  order   exact M/D/c p99  1 generator p99 (95 %)   2 generators p99 (95 %)"
              "   overlap  requests 1/2   lag p99 ms 1/2")  # fmt: skip
        with tempfile.TemporaryDirectory() as folder:
            for seed in range(args.repeats):
                order = (1, 2) if seed % 2 == 0 else (2, 1)
                runs = {n: run_load(url, args, n, seed, Path(folder)) for n in order}
                exact, _ = mdc_p99(
                    args.rate, seed, args.warmup, args.duration, args.instances, service
                )
                one, two = runs[1], runs[2]
                bounds = {n: runs[n]["confidence"]["latency_p99"] for n in (1, 2)}
                overlap = bounds[1][0] <= bounds[2][1] and bounds[2][0] <= bounds[1][1]
                print(
                    f"{seed:<5} {order[0]}-{order[1]}     {exact * 1e3:8.2f} ms      "
                    f"{one['latency_p99'] * 1e3:6.2f} ({bounds[1][0] * 1e3:.2f}–"
                    f"{bounds[1][1] * 1e3:.2f})      {two['latency_p99'] * 1e3:6.2f} "
                    f"({bounds[2][0] * 1e3:.2f}–{bounds[2][1] * 1e3:.2f})      "
                    f"{'yes' if overlap else 'NO':<7}  {one['count']}/{two['count']}"
                    f"      {one['schedule_lag_p99'] * 1e3:.2f}/{two['schedule_lag_p99'] * 1e3:.2f}"
                )
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
