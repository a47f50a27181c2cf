"""Preemption on real followers (issue 25): a long job paused at a trial boundary for
shorter ones and resumed, twice, ends with exactly the trials of an unpreempted run; a
job paused on a follower that is then killed resumes on another one, its server's cold
start measured once. Real scenario runs throughout (sub-second trials); the policy is
two-tier-preemptive with `preempt_ratio` 1 and no pause cost, so that every short job
here is short enough to pause the long one whatever this machine's speed (the long
job's remaining estimate never falls under a third of its plan's: see OVERRUN_SHARE)."""

from __future__ import annotations

import csv
import json
from contextlib import ExitStack
from pathlib import Path

import psutil
from cluster_checks import CLI, child, local_scenario, remote_scenario
from conftest import EXPENSIVE_POLL_S, until_async
from typer.testing import CliRunner

from servebench.analysis.loader import load_run
from servebench.cli import app as cli
from servebench.cluster.follower import PRELOAD
from servebench.cluster.job import TERMINAL, JobState, validate_text
from servebench.cluster.leader import PAUSED_DIR, Leader
from servebench.cluster.policy import make_policy
from servebench.cluster.store import JobStore
from servebench.common.dask_cluster import worker_resources

LONG_TRIALS = 12


def preemptive() -> object:
    return make_policy("two-tier-preemptive", preempt_ratio=1.0, pause_cost_s=0.0)


def attempt_trials(job_id: str, attempt: int) -> int | None:
    """How many trial records the job's attempt has on its follower now (the resumed
    ones included), or None while that attempt's run is not running."""
    for process in psutil.process_iter(["cmdline"]):
        for part in process.info["cmdline"] or ():
            if f"servebench-job-{job_id}-{attempt}-" in part and part.endswith("scenario.yaml"):
                return len(list(Path(part).parent.glob("results/*/records/*.parquet")))
    return None


async def wait_for_new_trial(job_id: str, attempt: int) -> None:
    """Until the attempt has run a trial of its own (beyond those it resumed with)."""
    first: list[int] = []

    def ran_one() -> bool:
        count = attempt_trials(job_id, attempt)
        if count is None:
            return False
        first[:] = first or [count]
        return count > first[0]

    await until_async(
        ran_one,
        180,
        f"attempt {attempt} of job {job_id} to finish a trial",
        every_s=EXPENSIVE_POLL_S,
    )


def assert_exactly_the_plan(result: Path, scenario_text: str) -> None:
    """The result holds each trial of the plan once, measured (what an unpreempted run of
    the scenario holds), and opens with `servebench report`."""
    _, plan = validate_text(scenario_text)
    planned = sorted(t.id for t in plan.trials)
    with (result / "trials.csv").open() as rows:
        trials = list(csv.DictReader(rows))
    assert sorted(r["trial_id"] for r in trials) == planned  # none missing, none twice
    assert {r["status"] for r in trials} == {"ok"}
    assert sorted(p.stem for p in (result / "records").glob("*.parquet")) == planned
    assert sorted(load_run(result).trials["trial_id"]) == planned
    run = json.loads((result / "run.json").read_text())
    assert run["status"] == "complete" and run["trials_planned"] == len(planned)
    (result / "report.html").unlink()
    opened = CliRunner().invoke(cli, ["report", str(result)])
    assert opened.exit_code == 0, opened.output
    assert (result / "report.html").is_file()


async def test_a_long_job_paused_twice_for_short_ones_ends_with_exactly_its_trials(
    tmp_path: Path, triton_dense_model
):
    from distributed import Client, LocalCluster

    results = tmp_path / "results"
    long_text = remote_scenario("long", triton_dense_model, duration=0.3, trials=LONG_TRIALS)
    async with (
        LocalCluster(
            n_workers=1, processes=True, threads_per_worker=1, resources=worker_resources(0),
            host="127.0.0.1", dashboard_address="127.0.0.1:0", preload=[PRELOAD],
            asynchronous=True,
        ) as cluster,
        Client(cluster, asynchronous=True) as client,
    ):  # fmt: skip
        store = JobStore(tmp_path / "jobs.sqlite")
        leader = Leader(store, preemptive(), client, results, tick_s=0.1)
        await leader.start()
        try:
            long = await leader.submit(long_text, submitter="test")
            shorts = []
            for attempt in (1, 2):
                await wait_for_new_trial(long.id, attempt)
                shorts.append(
                    await leader.submit(
                        remote_scenario(f"short{attempt}", triton_dense_model, duration=0.3),
                        submitter="test",
                    )
                )
                await until_async(
                    lambda a=attempt: store.get(long.id).preemptions == a, 180,
                    f"the long job's pause number {attempt}", every_s=EXPENSIVE_POLL_S
                )  # fmt: skip
            await until_async(
                lambda: store.get(long.id).state in TERMINAL,
                300,
                "the long job to end",
                every_s=EXPENSIVE_POLL_S,
            )
        finally:
            await leader.close()
    done = store.get(long.id)
    assert done.state is JobState.DONE, done.reason
    assert (done.preemptions, done.attempts) == (2, 3)
    for short in shorts:  # each went ahead of the long job's rest
        assert store.get(short.id).state is JobState.DONE
        assert store.get(short.id).finished_at < done.finished_at
    pauses = [t for t in store.history(long.id) if t.from_state is JobState.RUNNING]
    assert [t.to_state for t in pauses] == [JobState.QUEUED, JobState.QUEUED, JobState.DONE]
    assert all("paused on" in t.reason for t in pauses[:2])
    # The actual is every segment's run time; the estimate is the plan's.
    _, plan = validate_text(long_text)
    assert done.estimate_s == plan.estimated_s and done.run_s > 0
    assert store.ratios()[-1].measured_s == done.run_s
    assert_exactly_the_plan(results / long.id, long_text)
    run = json.loads((results / long.id / "run.json").read_text())
    assert len(run["resumed_at"]) == 2
    assert not list((results / PAUSED_DIR).iterdir())  # the partial results are gone
    store.close()


async def test_a_job_paused_on_a_follower_that_is_then_killed_resumes_on_another(
    tmp_path: Path, triton_install, triton_dense_model
):
    from distributed import Client, Scheduler

    results = tmp_path / "results"
    long_text = local_scenario("long", duration=0.3, trials=6)
    store = JobStore(tmp_path / "jobs.sqlite")
    async with (
        Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as scheduler,
        Client(scheduler.address, asynchronous=True) as client,
    ):
        with ExitStack() as stack:

            def follower(name: str) -> object:
                args = [*CLI, "follower", "--leader", scheduler.address, "--name", name]
                return stack.enter_context(child(args, tmp_path / f"follower-{name}.log"))

            first = follower("a")
            leader = Leader(store, preemptive(), client, results, tick_s=0.1)
            await leader.start()
            try:
                await until_async(
                    lambda: set(leader.followers) == {"a"},
                    60,
                    "follower a",
                    every_s=EXPENSIVE_POLL_S,
                )
                long = await leader.submit(long_text, submitter="test")
                await wait_for_new_trial(long.id, 1)
                short = await leader.submit(
                    remote_scenario("short", triton_dense_model), submitter="test"
                )
                await until_async(
                    lambda: store.get(long.id).preemptions == 1,
                    180,
                    "the long job's pause",
                    every_s=EXPENSIVE_POLL_S,
                )
                # Paused: back in the queue, its partial result on the leader; the short
                # job starts on a, the long one waits behind it. Now a dies.
                assert store.get(long.id).state in (JobState.QUEUED, JobState.PLACED)
                first.kill()
                await until_async(
                    lambda: "a" not in leader.followers,
                    60,
                    "a to be gone",
                    every_s=EXPENSIVE_POLL_S,
                )
                follower("b")
                await until_async(
                    lambda: all(store.get(j.id).state in TERMINAL for j in (long, short)), 300,
                    "both jobs to end on b", every_s=EXPENSIVE_POLL_S
                )  # fmt: skip
            finally:
                await leader.close()
    done = store.get(long.id)
    assert done.state is JobState.DONE and done.follower == "b", done.reason
    assert store.get(short.id).state is JobState.DONE
    assert done.preemptions == 1
    assert_exactly_the_plan(results / long.id, long_text)
    # The server's cold start was measured on a, before the pause; the resumed run on b
    # started the server without measuring it again: one start's phases, once each.
    with (results / long.id / "cold_start.csv").open() as rows:
        cold = list(csv.DictReader(rows))
    assert cold and {r["repeat"] for r in cold} == {"0"}
    phases = [(r["setting"], r["model"], r["phase"]) for r in cold]
    assert len(phases) == len(set(phases))
    store.close()
