"""Benchmark of the link emulator: accuracy per built-in profile and its own cost.

    .venv/bin/python benchmarks/netem.py            # about 2 minutes
    .venv/bin/python benchmarks/netem.py --quick    # shorter transfers, fewer pings

Prints Markdown tables (quoted in docs/benchmarks.md):
1. accuracy: configured vs measured RTT (median of ping-pongs) and throughput (bulk
   transfer, first to last byte) for every built-in profile; goal ±5 %;
2. pass-through cost of the `direct` profile: added p50 round-trip latency against the
   same ping-pong without the emulator (goal < 100 µs), and the most it forwards
   (goal ≥ 1 Gbit/s on one core), with the CPU the emulator's process used.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import psutil

from servebench.netem import BUILTIN_PROFILES, LinkEmulator
from servebench.netem.check import check_profile
from servebench.netem.probe import measure_download, measure_rtts, measure_upload, probe_server


def _pct(row) -> str:  # type: ignore[no-untyped-def]
    return "" if row.error is None else f"{row.error:+.1%}"


def accuracy(duration_s: float, ping_seconds: float) -> None:
    print(
        "| profile | RTT ms (set → p50) | err | link's share: p50 − no-emulator p50 | err "
        "| jitter ms (set → IQR/1.349) | down Mbit/s (set → got) | err "
        "| up Mbit/s (set → got) | err | lost segments |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, profile in BUILTIN_PROFILES.items():
        if name == "direct":
            continue
        # A jittered RTT needs many samples for a stable median (its standard error is
        # about 1.25 sd / sqrt(n)); a steady one needs few.
        budget = ping_seconds * (2.5 if profile.jitter_s else 1.0)
        pings = int(max(30, min(600, budget / profile.rtt_s)))
        report = check_profile(profile, duration_s=duration_s, pings=pings)
        rtt, jit = report.row("RTT p50"), report.row("RTT jitter (IQR/1.349)")
        share = rtt.measured - report.row("RTT without emulator p50").measured
        share_err = (share - rtt.configured) / rtt.configured
        down, up = report.row("throughput down"), report.row("throughput up")
        stats = report.stats
        lost = f"{stats.up.lost_segments + stats.down.lost_segments}" if stats else "?"
        print(
            f"| {name} | {rtt.configured:.1f} → {rtt.measured:.2f} | {_pct(rtt)} "
            f"| {share:.2f} | {share_err:+.1%} "
            f"| {jit.configured:.1f} → {jit.measured:.2f} "
            f"| {down.configured:g} → {down.measured:.3f} | {_pct(down)} "
            f"| {up.configured:g} → {up.measured:.3f} | {_pct(up)} | {lost} |",
            flush=True,
        )


def passthrough(rounds: int, pings: int, transfer_bytes: int) -> None:
    with probe_server() as server:
        emulator = LinkEmulator(BUILTIN_PROFILES["direct"], server)
        with emulator as address:
            # Interleave batches so both paths see the same machine load.
            direct_p50, via_p50 = [], []
            for _ in range(rounds):
                direct_p50.append(statistics.median(measure_rtts(server, pings, size=64)))
                via_p50.append(statistics.median(measure_rtts(address, pings, size=64)))
            added = [v - d for v, d in zip(via_p50, direct_p50, strict=True)]
            worker = psutil.Process(emulator._proc.pid)  # type: ignore[union-attr]
            results = []
            for label, fn in (("down", measure_download), ("up", measure_upload)):
                base = fn(server, transfer_bytes)
                cpu0, t0 = worker.cpu_times(), time.perf_counter()
                rate = fn(address, transfer_bytes)
                cpu1, wall = worker.cpu_times(), time.perf_counter() - t0
                busy = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall
                results.append((label, base, rate, busy))
        realtime = emulator.realtime
    print(f"Round-trip of a 64-byte ping-pong, median of {pings} per batch, {rounds} batches:")
    print()
    print("| path | p50 per batch µs (median of batches) |")
    print("|---|---|")
    print(f"| no emulator | {statistics.median(direct_p50) * 1e6:.0f} |")
    print(f"| through `direct` emulator | {statistics.median(via_p50) * 1e6:.0f} |")
    print(
        f"| **added by the emulator** | **{statistics.median(added) * 1e6:.0f}** "
        f"(batches: {', '.join(f'{a * 1e6:.0f}' for a in added)}) |"
    )
    print()
    print(f"Bulk transfer of {transfer_bytes / 2**20:.0f} MiB (real-time class: {realtime}):")
    print()
    print(
        "| direction | no emulator Gbit/s | through emulator Gbit/s | emulator CPU (1.0 = one core) |"
    )
    print("|---|---|---|---|")
    for label, base, rate, busy in results:
        print(f"| {label} | {base * 8 / 1e9:.2f} | {rate * 8 / 1e9:.2f} | {busy:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter run, looser figures")
    args = parser.parse_args()
    duration, ping_seconds = (1.5, 3.0) if args.quick else (4.0, 6.0)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.2f}"
    )
    print()
    print("### Accuracy per built-in profile")
    print()
    accuracy(duration, ping_seconds)
    print()
    print("### Cost of the emulator itself (`direct` pass-through)")
    print()
    passthrough(rounds=3 if args.quick else 7, pings=300, transfer_bytes=1 << 30)
    print()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
