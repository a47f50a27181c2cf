"""Calibrates the interference limits of `servebench/telemetry/disturbance.py`.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/interference.py       # about 2 minutes
    PYTHONPATH=$PWD .venv/bin/python benchmarks/interference.py --cycles 5 --window 8

A small dense model is served by the local tritonserver (`benchmarks/cluster.py`'s
`served_triton`) and loaded by servebench's own engine (`load.run`, open loop,
Poisson at `--rate`, over triton-http) in windows of `--window` seconds after a 1 s
warm-up, as a replicate is measured. Around each measured window an `InterferenceSampler`
runs, excluding the server's process tree and this process (the generator; alone, not
with its children, which are the burners).
Windows come in two conditions, alternated A B B A in each of `--cycles` cycles, so a
drift of the machine over the run falls on both alike:

- A, as the machine is: only the load (and whatever else the machine runs),
- B, with a known disturbance: `--burners` busy-looping processes (tests/cpu_burner.py, as
  `stress-ng --cpu N` would), started half a second before the window, stopped after it.

For each figure (CPU pressure, other processes' CPU, steal, and the load's schedule lag
p99 and latency p99 for what the disturbance did to the measurement) it prints each
condition's median and range; the burner's effect, paired (B minus the A beside it in its
cycle: on a machine whose load drifts, or that other work keeps busy, this still shows what
one known disturbance adds); and a limit: the A windows' 99th percentile (nearest rank:
with fewer than 100 windows, their largest) times `--margin`, with whether it separates
the conditions (it is below every B window). Steal is made by the hypervisor, not by a
burner in the guest: its limit can only come from the A windows.

Run it on the machine the limits are for, as quiet as it will be when it measures: what
runs beside it (other jobs, a browser) is part of condition A.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cluster import served_triton  # benchmarks/cluster.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cpu_burner import cpu_burners  # noqa: E402

from model_zoo.spec import ModelSpec  # noqa: E402
from servebench.clients.factory import create_client  # noqa: E402
from servebench.common.quantiles import percentile  # noqa: E402
from servebench.load import LoadPlan, Measuring, OneClient  # noqa: E402
from servebench.load import run as run_plan  # noqa: E402
from servebench.load.arrivals import poisson  # noqa: E402
from servebench.load.settings import LoadSettings  # noqa: E402
from servebench.telemetry.interference import InterferenceSampler  # noqa: E402

SPEC = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
WARMUP_S = 1.0
BURNER_HEAD_START_S = 0.5  # burners busy before the window opens
# The figures, each with the unit it is printed in and its scale from the record's unit.
FIGURES = {
    "cpu_pressure": ("%", 100.0),
    "other_cpu": ("% of cores", 100.0),
    "steal": ("% of cores", 100.0),
    "schedule_lag_p99": ("ms", 1e3),
    "latency_p99": ("ms", 1e3),
}


@dataclass(frozen=True)
class Window:
    condition: str  # "A" (as the machine is) or "B" (burners)
    cpu_pressure: float | None
    other_cpu: float
    steal: float | None
    schedule_lag_p99: float
    latency_p99: float
    verdict: str


def measure(
    client,
    args: argparse.Namespace,
    sampler: InterferenceSampler,
    server_pid: int,
    seed: int,
    condition: str,
) -> Window:
    settings = LoadSettings(
        arrivals=poisson(args.rate, seed=seed), duration=args.window, warmup=WARMUP_S, seed=seed
    )

    def opened(event) -> None:
        if isinstance(event, Measuring):
            # This process alone, not its tree: the burners are its children.
            sampler.start(exclude_trees=[server_pid], exclude_processes=[os.getpid()])

    plan = LoadPlan(settings, OneClient(client))
    summary = run_plan(plan, subscribers=(opened,), handle_signals=False)
    record = sampler.stop()
    return Window(
        condition, record.cpu_pressure, record.other_cpu, record.steal,
        summary.schedule_lag_p99, summary.latency_p99, summary.verdict,
    )  # fmt: skip


async def run(args: argparse.Namespace, server_pid: int, http: str, model: str) -> list[Window]:
    client = functools.partial(create_client, "triton-http", http, model)
    sampler = InterferenceSampler()
    for note in sampler.notes:
        print(f"note: {note}")
    windows: list[Window] = []
    for cycle in range(args.cycles):
        for position, condition in enumerate("ABBA"):
            seed = cycle * 4 + position
            with cpu_burners(args.burners if condition == "B" else 0):
                if condition == "B":
                    await asyncio.sleep(BURNER_HEAD_START_S)
                window = await asyncio.to_thread(
                    measure, client, args, sampler, server_pid, seed, condition
                )
            windows.append(window)
            print(_line(cycle, window), flush=True)
    return windows


def _line(cycle: int, w: Window) -> str:
    pressure = "n/a" if w.cpu_pressure is None else f"{w.cpu_pressure:6.1%}"
    steal = "n/a" if w.steal is None else f"{w.steal:5.1%}"
    return (
        f"cycle {cycle} {w.condition}: pressure {pressure}  other {w.other_cpu:6.1%}  "
        f"steal {steal}  lag p99 {w.schedule_lag_p99 * 1e3:7.2f} ms  "
        f"p99 {w.latency_p99 * 1e3:7.2f} ms  {w.verdict}  load {os.getloadavg()[0]:.2f}"
    )


def report(windows: list[Window], margin: float) -> dict[str, dict[str, float | bool]]:
    """Per figure: each condition's median and range, the burner's effect (the median of
    B minus its neighbouring A within a cycle: A1 B1 B2 A2 pairs B1-A1 and B2-A2, so a
    machine whose load drifts, or stays busy, still shows what one more disturbance adds),
    the limit and whether it separates the conditions."""
    out: dict[str, dict[str, float | bool]] = {}
    print(
        f"\n{'figure':17} {'A median [min-max]':>22} {'B median [min-max]':>22} "
        f"{'B-A paired':>10} {'limit':>8}  separates"
    )
    for name, (unit, scale) in FIGURES.items():
        values = [getattr(w, name) for w in windows]
        if None in values:
            print(f"{name:17} not measured here")
            continue
        quiet = [v for v, w in zip(values, windows, strict=True) if w.condition == "A"]
        burned = [v for v, w in zip(values, windows, strict=True) if w.condition == "B"]
        # windows come as A B B A per cycle: B at 1 beside A at 0, B at 2 beside A at 3
        effect = statistics.median(
            values[start + b] - values[start + a]
            for start in range(0, len(values) - 3, 4)
            for a, b in ((0, 1), (3, 2))
        )
        limit = percentile(quiet, 99.0) * margin
        separates = limit < min(burned)
        out[name] = {
            "a_median": statistics.median(quiet), "a_min": min(quiet), "a_max": max(quiet),
            "b_median": statistics.median(burned), "b_min": min(burned), "b_max": max(burned),
            "paired_effect": effect, "limit": limit, "separates": separates,
        }  # fmt: skip
        print(
            f"{name:17} {_spread(quiet, scale):>22} {_spread(burned, scale):>22} "
            f"{effect * scale:10.2f} {limit * scale:8.2f}  {'yes' if separates else 'no'}  ({unit})"
        )
    return out


def _spread(values: list[float], scale: float) -> str:
    low, mid, high = (v * scale for v in (min(values), statistics.median(values), max(values)))
    return f"{mid:.1f} [{low:.1f}-{high:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3, help="A B B A cycles (default 3)")
    parser.add_argument("--window", type=float, default=8.0, help="measured seconds per window")
    parser.add_argument("--rate", type=float, default=500.0, help="Poisson requests per second")
    parser.add_argument("--burners", type=int, default=1, help="busy processes in condition B")
    parser.add_argument("--margin", type=float, default=1.5, help="limit = A's p99 x margin")
    parser.add_argument("--json", type=Path, help="write the windows and the figures here")
    args = parser.parse_args()

    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.cycles} cycles of "
        f"A B B A, {args.window:g} s windows at {args.rate:g} req/s, {args.burners} burner(s) in B"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="servebench-interference-") as tmp:
        server = served_triton(SPEC, Path(tmp))
        try:
            # served_triton exports the model under its spec's id
            windows = asyncio.run(run(args, server.pid, server.endpoints.http_url, SPEC.id))
        finally:
            server.stop()
    figures = report(windows, args.margin)
    print(f"\nwall time {time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.2f}")
    if args.json:
        windows_json = [asdict(w) for w in windows]
        out = {"args": {k: str(v) for k, v in vars(args).items()}, "windows": windows_json}
        args.json.write_text(json.dumps({**out, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
