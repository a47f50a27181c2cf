"""Cluster scheduling on a real Dask LocalCluster: FIFO against two-tier, measured.

    .venv/bin/python benchmarks/cluster.py              # 20 jobs, 4 runs: about 15-20 min
    .venv/bin/python benchmarks/cluster.py --rounds 2   # A B then B A per pattern: twice that
    .venv/bin/python benchmarks/cluster.py --jobs 8 --long 2 --long-s 6   # a quick look
    # issue 25: preemption, with the current mix and with long jobs >= 15x the short ones
    .venv/bin/python benchmarks/cluster.py --rounds 2 \
        --policies fifo-roundrobin,fifo-leastloaded,two-tier-preemptive --long-trials 9
    .venv/bin/python benchmarks/cluster.py --rounds 2 \
        --policies fifo-roundrobin,fifo-leastloaded,two-tier-preemptive \
        --long-s 120 --long-trials 12
    # the same stream through the simulator: what each policy can reach on it (seconds)
    .venv/bin/python benchmarks/cluster.py --long-trials 9 --mean-run-s 20 --simulate 52 7.5 \
        --policies fifo-roundrobin,fifo-leastloaded,two-tier,two-tier-preemptive

Every job is a real `servebench scenario run` (one trial of a one-model scenario against a
local Triton this script serves, `launch: remote`) on a follower of a LocalCluster
(processes, `slot=1`), dispatched by the leader exactly as `servebench cluster up` does;
JCT is the store's finished_at − submitted_at. The mix: `--jobs` jobs, `--long` of them
measuring for `--long-s` seconds (a search's worth) in `--long-trials` equal trials
(where two-tier-preemptive may pause one: with 1, a long job cannot be paused), the rest
for `--short-s` (a sweep point). The same job list, in the same seeded order, goes to every policy, in two arrival
patterns:
- at once: all in the queue together (validated first, then queued in one go; the
  shuffled order is what FIFO runs them in);
- Poisson: exponential gaps whose mean offers the followers `--load` of their capacity,
  from the mean job duration the at-once runs measured (or `--mean-run-s`, which skips
  the at-once runs: the Poisson stream alone is what issue 25's acceptance asks for).

On a shared machine the other load drifts while the runs take turns, so `--rounds 2` runs
each pattern's policies in order and then in reverse, and the summary averages them.

Prints Markdown tables (quoted in docs/benchmarks.md, "Cluster (real LocalCluster)"): per
pattern, policy and round, then averaged over the rounds: average and p95 JCT, makespan,
the mean run time of a job (how loaded the machine was), the pauses, and FIFO's average
JCT over the policy's (the paper's two-tier cut average JCT 1.43×) and fifo-leastloaded's.
A run of each job alone takes about 7 s more than its measuring time (the child's start,
report and exit), so `--long-s 120` makes long jobs more than 15× the short ones.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from model_zoo.export import TritonSettings, export_triton
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.cluster.follower import PRELOAD, resources
from servebench.cluster.job import TERMINAL, FollowerInfo, JobState, new_job
from servebench.cluster.leader import Leader
from servebench.cluster.policy import FIFO_REFERENCE, Policy, make_policy, options_of
from servebench.cluster.simulate import simulate
from servebench.cluster.store import JobStore
from servebench.cluster.trace import TraceJob
from servebench.servers.base import Server
from servebench.servers.kinds import create_server
from servebench.telemetry.host_peak import host_peaks

SPEC = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
SCENARIO = """\
name: {name}
models:
  specs:
    - {{layer_type: dense, depth: 2, width: 16, input_shape: [8], num_outputs: 4}}
servers:
  - name: served
    api: triton
    launch: remote
    url: {url}
workload:
  rates: {rates}
  batch_sizes: [1]
  duration_s: {duration}
  warmup_s: 0.2
links: [direct]
"""


@dataclass(frozen=True)
class Figures:
    pattern: str
    policy: str
    avg_jct_s: float
    p95_jct_s: float
    makespan_s: float
    mean_run_s: float
    failed: int
    round: int  # -1: the mean over the rounds
    pauses: float = 0.0


def job_kinds(args: argparse.Namespace) -> list[str]:
    """ "long" or "short" per job, in the seeded order every policy gets."""
    kinds = ["long"] * args.long + ["short"] * (args.jobs - args.long)
    random.Random(args.seed).shuffle(kinds)
    return kinds


def mean_gap_s(args: argparse.Namespace, mean_run_s: float) -> float:
    """The Poisson stream's mean gap: what offers the followers `--load` of their capacity
    at `mean_run_s` a job."""
    return mean_run_s / (args.followers * args.load)


def poisson_gaps(args: argparse.Namespace, mean_run_s: float) -> list[float]:
    """The seconds before each job of the Poisson stream (exponential, seeded)."""
    rng = random.Random(args.seed + 1)
    return [0.0] + [rng.expovariate(1 / mean_gap_s(args, mean_run_s)) for _ in range(args.jobs - 1)]


def policy_of(name: str, args: argparse.Namespace, pause_cost_s: float) -> Policy:
    """The policy `name` with the options it takes of --max-wait-s and the pause cost."""
    given = {"max_wait_s": args.max_wait_s, "pause_cost_s": pause_cost_s}
    return make_policy(name, **{k: v for k, v in given.items() if k in options_of(name)})


def job_list(args: argparse.Namespace, url: str) -> list[str]:
    """The scenario texts, long and short mixed in a seeded order."""
    kinds = job_kinds(args)
    long_rates = [50 + i for i in range(args.long_trials)]  # one trial per rate
    return [
        SCENARIO.format(
            name=f"{kind}{i}", url=url, rates=long_rates if kind == "long" else [50],
            duration=args.long_s / args.long_trials if kind == "long" else args.short_s,
        )
        for i, kind in enumerate(kinds)
    ]  # fmt: skip


async def run_policy(
    client, policy: str, texts: list[str], gaps: list[float], root: Path, args: argparse.Namespace
) -> tuple[list, JobStore]:
    """Submit `texts` with `gaps` seconds before each, under `policy`; wait for all."""
    store = JobStore(root / "jobs.sqlite")
    made = policy_of(policy, args, args.pause_cost_s)
    leader = Leader(store, made, client, root / "results", tick_s=0.1)
    await leader.start()
    if any(gaps):  # a stream: each job validated and queued when it arrives
        ids = []
        for gap, text in zip(gaps, texts, strict=True):
            await asyncio.sleep(gap)
            ids.append((await leader.submit(text, submitter="benchmark")).id)
    else:  # at once: all validated, then queued together
        # A microsecond apart, so that first come, first served keeps the list's order.
        now = time.time()
        jobs = [
            new_job(text, submitter="benchmark", now=now + i * 1e-6) for i, text in enumerate(texts)
        ]
        for job in jobs:
            leader.add(job)
        ids = [job.id for job in jobs]
    while not all(store.get(i).state in TERMINAL for i in ids):
        await asyncio.sleep(0.2)
    await leader.close()
    return [store.get(i) for i in ids], store


def figures(pattern: str, policy: str, jobs: list, store: JobStore, round_: int) -> Figures:
    done = [j for j in jobs if j.state is JobState.DONE]
    jcts = sorted(j.finished_at - j.submitted_at for j in done)
    p95 = jcts[min(len(jcts) - 1, round(0.95 * (len(jcts) - 1)))] if jcts else float("nan")
    first = min(j.submitted_at for j in jobs)
    runs = [r.measured_s for r in store.ratios()]  # a paused job's: all its segments
    return Figures(
        pattern, policy, statistics.fmean(jcts) if jcts else float("nan"), p95,
        max(j.finished_at for j in done) - first if done else float("nan"),
        statistics.fmean(runs) if runs else float("nan"), len(jobs) - len(done), round_,
        sum(j.preemptions for j in jobs),
    )  # fmt: skip


def simulated(args: argparse.Namespace) -> None:
    """`--simulate LONG SHORT`: the same Poisson stream (the jobs' seeded order, the gaps of
    `--mean-run-s`) through the simulator (servebench.cluster.simulate: the leader's own
    policy objects), each long job LONG seconds of run in `--long-trials` trials and each
    short one SHORT, estimates exact, pauses costing `--pause-cost-s` and nothing: what
    each policy can reach on exactly this stream, beside what the real runs measured."""
    long_s, short_s = args.simulate
    followers = [FollowerInfo(name=f"follower-{i}") for i in range(args.followers)]
    trace, submitted = [], 0.0
    for kind, gap in zip(job_kinds(args), poisson_gaps(args, args.mean_run_s), strict=True):
        submitted += gap
        run_s, trials = (long_s, args.long_trials) if kind == "long" else (short_s, 1)
        trace.append(TraceJob(submitted, run_s, estimate_s=run_s, trials=trials, name=kind))
    print(
        f"{args.jobs} jobs ({args.long} of {long_s:g} s in {args.long_trials} trial(s), the "
        f"rest {short_s:g} s), Poisson at {args.load:.0%} of {args.followers} followers "
        f"(mean gap {mean_gap_s(args, args.mean_run_s):.1f} s), seed {args.seed}\n"
    )
    print("| pause cost s | policy | avg JCT s | p95 JCT s | pauses | "
          f"{FIFO_REFERENCE} / policy | fifo-leastloaded / policy |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for cost in sorted({args.pause_cost_s, 0.0}, reverse=True):
        results = {}
        for policy in args.policies.split(","):
            made = policy_of(policy, args, cost)
            results[policy] = simulate(made, trace, followers, pause_cost_s=cost)
        for policy, result in results.items():
            ratios = [
                f"{results[r].avg_jct_s / result.avg_jct_s:.2f}" if r in results else "—"
                for r in (FIFO_REFERENCE, "fifo-leastloaded")
            ]
            print(
                f"| {cost:g} | {policy} | {result.avg_jct_s:.1f} | {result.p95_jct_s:.1f} "
                f"| {result.preemptions} | {' | '.join(ratios)} |"
            )


def served_triton(spec: ModelSpec, work: Path) -> Server:
    """A started local Triton serving `spec` (exported under `work`): what the jobs of a
    `launch: remote` scenario measure."""
    export = export_triton(
        build_torch(spec, seed=0), spec, work / "export", TritonSettings(max_batch_size=8)
    )
    server = create_server(
        "triton-local", model_repository=work / "export" / "triton-python",
        load_models=[export.name], run_dir=work / "triton",
    )  # fmt: skip
    server.start()
    return server


async def main(args: argparse.Namespace) -> None:
    from distributed import Client, LocalCluster

    work = Path(tempfile.mkdtemp(prefix="servebench-cluster-bench-"))
    host_peaks()  # measured once per machine, before any job would measure it
    server = served_triton(SPEC, work)
    try:
        texts = job_list(args, server.endpoints.http_url)
        new_job(texts[0], submitter="warm-up")  # the validator's imports, before any clock runs
        policies = args.policies.split(",")
        rows: list[Figures] = []
        async with (
            LocalCluster(
                n_workers=args.followers, processes=True, threads_per_worker=1,
                resources=resources(0), host="127.0.0.1", dashboard_address="127.0.0.1:0",
                preload=[PRELOAD], asynchronous=True,
            ) as cluster,
            Client(cluster, asynchronous=True) as client,
        ):  # fmt: skip
            if args.mean_run_s is None:
                at_once = [0.0] * len(texts)
                rows += await pattern(client, "at once", policies, texts, at_once, work, args)
            mean_run = args.mean_run_s or statistics.fmean(r.mean_run_s for r in rows)
            gaps = poisson_gaps(args, mean_run)
            name = f"Poisson, mean gap {mean_gap_s(args, mean_run):.1f} s"
            rows += await pattern(client, name, policies, texts, gaps, work, args)
    finally:
        server.stop()
    print()
    print(
        f"{args.jobs} jobs ({args.long} of {args.long_s:g} s measured in {args.long_trials} "
        f"trial(s), the rest {args.short_s:g} s) "
        f"on {args.followers} followers, {args.rounds} round(s); {platform.node()}, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}\n"
    )
    print(_HEADER)
    for row in rows:
        print(_row(row, rows))
    print("\nMeans over the rounds:\n")
    print(_HEADER)
    for row in _means(rows):
        print(_row(row, _means(rows)))


async def pattern(
    client, name: str, policies: list[str], texts: list[str], gaps: list[float], work: Path,
    args: argparse.Namespace,
) -> list[Figures]:  # fmt: skip
    """Every policy on one arrival pattern, `--rounds` times, the order reversed each
    round (A B, B A, ...) so a drift in the machine's other load favours no policy."""
    rows: list[Figures] = []
    for round_ in range(args.rounds):
        order = policies if round_ % 2 == 0 else policies[::-1]
        for policy in order:
            root = work / f"{name.split(',')[0].replace(' ', '-')}-{policy}-{round_ + 1}"
            jobs, store = await run_policy(client, policy, texts, gaps, root, args)
            rows.append(figures(name, policy, jobs, store, round_))
            print(_row(rows[-1], rows), flush=True)
    return rows


def _means(rows: list[Figures]) -> list[Figures]:
    out = []
    for key in dict.fromkeys((r.pattern, r.policy) for r in rows):
        group = [r for r in rows if (r.pattern, r.policy) == key]
        out.append(
            Figures(
                *key, *(statistics.fmean(getattr(r, f) for r in group)
                        for f in ("avg_jct_s", "p95_jct_s", "makespan_s", "mean_run_s")),
                sum(r.failed for r in group), -1, statistics.fmean(r.pauses for r in group),
            )
        )  # fmt: skip
    return out


_HEADER = (
    f"| arrivals | policy | round | avg JCT s | p95 JCT s | makespan s | mean run s | failed "
    f"| pauses | avg JCT ratio ({FIFO_REFERENCE} / policy) | (fifo-leastloaded / policy) |"
    "\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def _row(row: Figures, rows: list[Figures]) -> str:
    def ratio(reference: str) -> str:
        base = next(
            (r for r in rows
             if (r.pattern, r.round, r.policy) == (row.pattern, row.round, reference)),
            None,
        )  # fmt: skip
        return f"{base.avg_jct_s / row.avg_jct_s:.2f}" if base else "—"

    round_ = "mean" if row.round < 0 else str(row.round + 1)
    return (
        f"| {row.pattern} | {row.policy} | {round_} | {row.avg_jct_s:.1f} | {row.p95_jct_s:.1f} "
        f"| {row.makespan_s:.1f} | {row.mean_run_s:.1f} | {row.failed} | {row.pauses:g} "
        f"| {ratio(FIFO_REFERENCE)} | {ratio('fifo-leastloaded')} |"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--followers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--long", type=int, default=5, help="how many of the jobs are long")
    parser.add_argument("--short-s", type=float, default=0.5, help="a short job's measuring time")
    parser.add_argument("--long-s", type=float, default=45.0, help="a long job's measuring time")
    parser.add_argument(
        "--long-trials", type=int, default=1, help="a long job's trials (its measuring time split)"
    )
    parser.add_argument("--load", type=float, default=0.9, help="Poisson: offered load")
    parser.add_argument("--policies", default=f"{FIFO_REFERENCE},two-tier")
    parser.add_argument("--max-wait-s", type=float, default=3600.0, help="two-tier's aging bound")
    parser.add_argument(
        "--pause-cost-s", type=float, default=6.0,
        help="two-tier-preemptive's pause cost (measured for these jobs: cluster_pause.py)",
    )  # fmt: skip
    parser.add_argument(
        "--mean-run-s", type=float,
        help="a job's mean run time (s) for the Poisson gaps: skips the at-once runs that "
        "otherwise measure it",
    )  # fmt: skip
    parser.add_argument(
        "--simulate", type=float, nargs=2, metavar=("LONG_RUN_S", "SHORT_RUN_S"),
        help="no real runs: the same Poisson stream through the simulator, each long job "
        "LONG_RUN_S of run and each short one SHORT_RUN_S (needs --mean-run-s)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat each pattern, policy order reversed each time"
    )
    args = parser.parse_args()
    if not 0 <= args.long <= args.jobs:
        parser.error("--long must be between 0 and --jobs")
    if args.long_trials < 1:
        parser.error("--long-trials must be at least 1")
    if args.simulate and args.mean_run_s is None:
        parser.error("--simulate needs --mean-run-s (the gaps of the stream it replays)")
    return args


if __name__ == "__main__":
    started = time.perf_counter()
    arguments = parse()
    if arguments.simulate:
        simulated(arguments)
        raise SystemExit(0)
    asyncio.run(main(arguments))
    print(f"\n(took {time.perf_counter() - started:.0f} s)")
