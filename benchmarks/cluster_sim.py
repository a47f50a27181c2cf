"""Benchmark of the cluster scheduling policies, simulated, and of the simulator itself.

    .venv/bin/python benchmarks/cluster_sim.py            # about half a minute
    .venv/bin/python benchmarks/cluster_sim.py --quick    # one seed, one speed run

Prints Markdown tables (quoted in docs/benchmarks.md, "Cluster scheduling (simulated)"):
1. the policy table on the synthetic mix (servebench.cluster.trace: 5,000 jobs in
   Poisson batches on 100 heterogeneous followers at 90 % offered load, the same as
   `servebench cluster simulate --synthetic`), for seed 0, and the JCT ratios over
   several seeds; goal: two-tier's average JCT at least 1.6x better than FIFO
   (fifo-roundrobin);
2. two-tier-preemptive (issue 25) against fifo-leastloaded and two-tier over the same
   seeds, on that mix and on a small cluster (10 followers, one job per submission: the
   real benchmark's shape, where queues form): average and p95 JCT ratios, the long
   jobs' slowdown, pauses; a pause costs `PAUSE_COST_S` (measured); goal: average JCT
   at least 1.6x better than fifo-leastloaded;
3. the simulator's speed: 10,000 jobs on 1,000 followers, wall time per policy and for
   the whole comparison (trace generation included), median of 3; goal under 10 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from servebench.cluster.policy import PAUSE_COST_S, POLICIES, make_policy
from servebench.cluster.simulate import SimResult, compare
from servebench.cluster.trace import SyntheticMix, synthetic_followers, synthetic_jobs

NAMES = list(POLICIES)


def mix_results(
    jobs: int, followers: int, seed: int, names: list[str] = NAMES, small: bool = False
) -> list[SimResult]:
    """The policies on the synthetic mix; `small`: without GPU or label needs, one job
    per submission (a small team cluster, as the real benchmark's)."""
    if small:
        pool = synthetic_followers(followers, seed, gpu_share=0)
        mix = SyntheticMix(jobs=jobs, batch_mean=1, gpu_job_share=0, label_job_share=0)
    else:
        pool = synthetic_followers(followers, seed)
        mix = SyntheticMix(jobs=jobs)
    trace = synthetic_jobs(mix, pool, seed)
    return compare(names, make_policy, trace, pool, pause_cost_s=PAUSE_COST_S)


def policy_table(seeds: list[int]) -> None:
    results = mix_results(5000, 100, seeds[0])
    print(f"Synthetic mix, seed {seeds[0]}: 5,000 jobs on 100 followers, load 0.9\n")
    print("| policy | avg JCT s | p95 JCT s | mean queueing s | makespan s | utilization "
          "| avg JCT ratio to fifo-roundrobin | to fifo-leastloaded |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    leastloaded = next(r for r in results if r.policy == "fifo-leastloaded").avg_jct_s
    for r in results:
        print(
            f"| {r.policy} | {r.avg_jct_s:,.1f} | {r.p95_jct_s:,.1f} | {r.mean_queueing_s:,.1f} "
            f"| {r.makespan_s:,.0f} | {r.utilization:.1%} | {r.jct_ratio:.2f} "
            f"| {leastloaded / r.avg_jct_s:.2f} |"
        )
    if len(seeds) < 2:
        return
    print(f"\nTwo-tier's average JCT ratio over seeds {seeds[0]}–{seeds[-1]}:\n")
    print("| seed | to fifo-roundrobin | to fifo-leastloaded | p95 JCT ratio to fifo-roundrobin |")
    print("|---|---|---|---|")
    ratios = []
    for seed in seeds:
        by_name = {r.policy: r for r in mix_results(5000, 100, seed)}
        tt, rr, ll = by_name["two-tier"], by_name["fifo-roundrobin"], by_name["fifo-leastloaded"]
        ratios.append(tt.jct_ratio or 0.0)
        print(
            f"| {seed} | {tt.jct_ratio:.2f} | {ll.avg_jct_s / tt.avg_jct_s:.2f} "
            f"| {rr.p95_jct_s / tt.p95_jct_s:.2f} |"
        )
    print(f"\nmin {min(ratios):.2f}, median {statistics.median(ratios):.2f} (goal ≥ 1.6)")


def preemption_table(seeds: list[int]) -> None:
    names = ["two-tier-preemptive", "two-tier", "fifo-leastloaded"]
    shapes = [
        ("100 followers, batches (the mix above)", 5000, 100, False),
        ("10 followers, one job per submission", 3000, 10, True),
    ]
    print(f"\ntwo-tier-preemptive (pause cost {PAUSE_COST_S:g} s) over seeds "
          f"{seeds[0]}–{seeds[-1]}:\n")  # fmt: skip
    print("| cluster | seed | avg JCT s | avg JCT ratio to fifo-leastloaded | to two-tier "
          "| p95 JCT s | p95 ratio to fifo-leastloaded | long jobs' slowdown "
          "(fifo-leastloaded, two-tier) | pauses |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for label, jobs, followers, small in shapes:
        ratios = []
        for seed in seeds:
            pre, tt, ll = mix_results(jobs, followers, seed, names, small)
            ratios.append(ll.avg_jct_s / pre.avg_jct_s)
            print(
                f"| {label} | {seed} | {pre.avg_jct_s:,.1f} | {ratios[-1]:.2f} "
                f"| {tt.avg_jct_s / pre.avg_jct_s:.2f} | {pre.p95_jct_s:,.1f} "
                f"| {ll.p95_jct_s / pre.p95_jct_s:.2f} | {pre.long_slowdown:.2f} "
                f"({ll.long_slowdown:.2f}, {tt.long_slowdown:.2f}) | {pre.preemptions:,} |"
            )
        print(f"| {label} | mean | | {statistics.fmean(ratios):.2f} | | | | | |")


def speed(repeats: int) -> None:
    print("\nSimulator speed: 10,000 jobs on 1,000 followers (median of "
          f"{repeats}; seconds)\n")  # fmt: skip
    per_policy: dict[str, list[float]] = {name: [] for name in NAMES}
    whole: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        for r in mix_results(10_000, 1_000, seed=0):
            per_policy[r.policy].append(r.wall_s)
        whole.append(time.perf_counter() - started)
    print("| policy | simulate() s |")
    print("|---|---|")
    for name, walls in per_policy.items():
        print(f"| {name} | {statistics.median(walls):.2f} |")
    print(f"| all {len(NAMES)}, with trace generation | {statistics.median(whole):.2f} |")
    print(f"\ngoal: under 10 s per policy; {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {platform.machine()}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, one speed run")
    args = parser.parse_args()
    policy_table([0] if args.quick else list(range(5)))
    preemption_table([0] if args.quick else list(range(5)))
    speed(1 if args.quick else 3)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
