"""What pausing a cluster job at a trial boundary and resuming it costs, measured.

    .venv/bin/python benchmarks/cluster_pause.py              # about 3-4 min
    .venv/bin/python benchmarks/cluster_pause.py --repeats 1 --trials 4

Each job is what a follower runs (`servebench.cluster.execute.execute`: `scenario run` in
a child process, its result packed): once straight through, and once paused
(`execute.pause`, SIGUSR1) after its first trial, then resumed from the packed partial
result (`partial=`, `scenario run --resume`), as two-tier-preemptive does on a follower.
The pause's cost is (paused attempt + resumed attempt) − straight run, wall time of each
`execute` call (the child's start and imports, the export and server start a resumed run
redoes, the stop, packing and unpacking; a paused run writes no report, its resumed run
does, as the straight run does). Two jobs: a
scenario that starts its own Triton (launch: local, which exports its model and starts
the server again on resume, its cold start not re-measured) and one against a Triton this
script serves (launch: remote). The policy's `PAUSE_COST_S` and the simulator's cost
(docs/benchmarks.md, "Cluster scheduling (simulated)") are these figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from cluster import served_triton  # benchmarks/cluster.py

from model_zoo.spec import ModelSpec
from servebench.cluster import execute
from servebench.telemetry.host_peak import host_peaks

SPEC = ModelSpec(layer_type="dense", depth=1, width=8, input_shape=(4,), num_outputs=3)
MODEL = "{layer_type: dense, depth: 1, width: 8, input_shape: [4], num_outputs: 3}"
SERVERS = {
    "local": """\
  - name: triton
    api: triton
    settings: {max_batch_size: 4, dynamic_batching: false}
""",
    "remote": """\
  - name: served
    api: triton
    launch: remote
    url: {url}
""",
}
SCENARIO = """\
name: pause-{kind}
models:
  specs:
    - {model}
servers:
{server}workload:
  rates: {rates}
  batch_sizes: [1]
  duration_s: 0.5
  warmup_s: 0.1
  timeout_s: 2
links: [direct]
"""


def scenario(kind: str, trials: int, url: str) -> str:
    server = SERVERS[kind].replace("{url}", url)
    rates = list(range(20, 20 + trials))
    return SCENARIO.format(kind=kind, model=MODEL, server=server, rates=rates)


def records(job_id: str, attempt: int) -> int:
    base = Path(tempfile.gettempdir())
    return len(list(base.glob(f"servebench-job-{job_id}-{attempt}-*/results/*/records/*.parquet")))


def timed(job_id: str, text: str, attempt: int, **kwargs) -> tuple[float, execute.JobRun]:
    started = time.perf_counter()
    run = execute.execute(job_id, text, attempt, **kwargs)
    return time.perf_counter() - started, run


def once(kind: str, text: str, index: int) -> tuple[float, float, float, int]:
    """Straight run, paused attempt, resumed attempt (seconds) and the archive's bytes."""
    straight, run = timed(f"straight{kind}{index}", text, 1)
    assert run.status == "complete", (run.status, run.reason, run.output_tail)
    job = f"paused{kind}{index}"

    def pause_after_first_trial() -> None:
        while records(job, 1) < 1:
            time.sleep(0.05)
        execute.pause(job, "benchmark")

    watcher = threading.Thread(target=pause_after_first_trial, daemon=True)
    watcher.start()
    paused, first = timed(job, text, 1)
    watcher.join()
    assert first.status == "interrupted" and first.archive, (first.status, first.output_tail)
    resumed, second = timed(job, text, 2, partial=first.archive)
    assert second.status == "complete", (second.status, second.reason, second.output_tail)
    return straight, paused, resumed, len(first.archive)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()
    host_peaks()  # measured once per machine, before any run would measure it
    server = served_triton(SPEC, Path(tempfile.mkdtemp(prefix="servebench-pause-bench-")))
    rows = []
    try:
        for kind in ("local", "remote"):
            text = scenario(kind, args.trials, server.endpoints.http_url)
            for index in range(args.repeats):
                straight, paused, resumed, size = once(kind, text, index)
                cost = paused + resumed - straight
                rows.append((kind, straight, paused, resumed, cost, size))
                print(f"{kind}: straight {straight:.1f} s, paused {paused:.1f} s + resumed "
                      f"{resumed:.1f} s: cost {cost:.1f} s, archive {size / 1024:.0f} KiB",
                      flush=True)  # fmt: skip
    finally:
        server.stop()
    print(f"\n{args.trials} trials of 0.5 s (+0.1 s warm-up), paused after the first; "
          f"{args.repeats} repeat(s); {os.cpu_count()} CPUs, Python {platform.python_version()}"
          "\n")  # fmt: skip
    print("| launch | straight run s | paused attempt s | resumed attempt s "
          "| pause/resume cost s | partial archive KiB |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for kind in ("local", "remote"):
        mine = [r for r in rows if r[0] == kind]
        means = [statistics.fmean(r[i] for r in mine) for i in range(1, 6)]
        print(f"| {kind} | {means[0]:.1f} | {means[1]:.1f} | {means[2]:.1f} | **{means[3]:.1f}** "
              f"| {means[4] / 1024:.0f} |")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"\n(took {time.perf_counter() - started:.0f} s)")
