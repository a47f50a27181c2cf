"""Cluster mode when processes die: a follower killed mid-job, and the leader SIGKILLed with
jobs queued and running, then restarted. Real processes throughout: `servebench cluster
follower` and `servebench cluster up` as children, real scenario runs with their Triton."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import psutil
from cluster_checks import CLI, child, free_port, local_scenario, remote_scenario
from conftest import EXPENSIVE_POLL_S, until, until_async

from servebench.cluster.api_client import LeaderApi
from servebench.cluster.job import JobState
from servebench.cluster.leader import Leader
from servebench.cluster.policy import make_policy
from servebench.cluster.store import JobStore


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every process working for the job: its scenario run and the Triton it started (both
    name the job's work folder on their command line)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(f"servebench-job-{job_id}-" in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


async def test_a_follower_killed_mid_job_gives_it_to_the_other(tmp_path: Path, triton_install):
    from distributed import Client, Scheduler

    store = JobStore(tmp_path / "jobs.sqlite")
    async with (
        Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as scheduler,
        Client(scheduler.address, asynchronous=True) as client,
    ):
        with ExitStack() as stack:
            followers = {
                name: stack.enter_context(
                    child([*CLI, "follower", "--leader", scheduler.address, "--name", name,
                           "--label", f"rack={name}"], tmp_path / f"follower-{name}.log")
                )
                for name in ("a", "b")
            }  # fmt: skip
            leader = Leader(
                store, make_policy("two-tier"), client, tmp_path / "results", tick_s=0.1
            )
            await leader.start()
            try:
                await until_async(
                    lambda: set(leader.followers) == {"a", "b"},
                    60,
                    "two followers",
                    every_s=EXPENSIVE_POLL_S,
                )
                assert {n: dict(f.info.labels) for n, f in leader.followers.items()} == {
                    "a": {"rack": "a"}, "b": {"rack": "b"},
                }  # fmt: skip
                job = await leader.submit(local_scenario("victim", duration=3.0), submitter="test")
                await until_async(
                    lambda: any(p.name() == "tritonserver" for p in job_processes(job.id)), 120,
                    "the job's own Triton to start on its follower", every_s=EXPENSIVE_POLL_S
                )  # fmt: skip
                first = store.get(job.id).follower
                doomed = job_processes(job.id)
                followers[first].kill()  # SIGKILL: no goodbye to the scheduler
                await until_async(
                    lambda: store.get(job.id).state is JobState.DONE,
                    300,
                    "the job's re-run",
                    every_s=EXPENSIVE_POLL_S,
                )
            finally:
                await leader.close()
    # The killed follower's run and its Triton went with it (parent-death signals).
    _until(lambda: not any(p.is_running() for p in doomed), 60, "the orphaned run to stop")
    done = store.get(job.id)
    assert done.follower == ({"a", "b"} - {first}).pop() and done.attempts == 2
    requeues = [t for t in store.history(job.id) if t.from_state is JobState.RUNNING]
    assert [t.to_state for t in requeues] == [JobState.QUEUED, JobState.DONE]
    assert requeues[0].reason == f"re-queued: follower {first} left"
    assert (tmp_path / "results" / job.id / "run.json").is_file()
    store.close()


def test_a_leader_killed_with_jobs_queued_and_running_resumes_without_losing_or_rerunning(
    tmp_path: Path, triton_dense_model
):
    from servebench.telemetry.host_peak import host_peaks

    host_peaks()  # the machine's roofs, measured once here rather than by two runs at once
    state, results, port = tmp_path / "state", tmp_path / "results", free_port()
    up = [*CLI, "up", "--followers", "2", "--state-dir", str(state), "--results", str(results),
          "--port", str(port)]  # fmt: skip
    api = LeaderApi(f"http://127.0.0.1:{port}")
    with child(up, tmp_path / "first.log") as first:
        _until(lambda: _followers(api) == 2, 120, "the first leader and its two followers")
        # One long job keeps a follower busy while the short ones pass through the other,
        # so "one done, one running, one waiting" lasts seconds, not a race's instant.
        ids = [
            api.submit(
                remote_scenario(f"j{i}", triton_dense_model, duration=duration), name=f"j{i}.yaml"
            )["id"]
            for i, duration in enumerate((0.5, 8.0, 0.5, 0.5))
        ]
        _until(lambda: _mix(api, ids), 300, "one job done, one running and one waiting")
        first.send_signal(signal.SIGKILL)
        first.wait()
        gone = [p for p in psutil.process_iter() if _in_group(p, first.pid)]
        _until(
            lambda: not any(p.is_running() for p in gone), 60, "the first cluster's processes to go"
        )
    before = _snapshot(state)
    assert sorted(before) == sorted(ids)  # nothing submitted was lost
    done_before = {i for i, (s, _, _) in before.items() if s == JobState.DONE}
    running_before = {i for i, (s, _, _) in before.items() if s == JobState.RUNNING}
    assert done_before and running_before and len(done_before | running_before) < len(ids)
    with child(up, tmp_path / "second.log") as second:
        _until(lambda: _followers(api) == 2, 120, "the restarted leader and its followers")
        _until(lambda: _states(api, ids) == {"done"}, 300, "every job to finish after the restart")
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=60) == 0
    after = _snapshot(state)
    assert sorted(after) == sorted(ids)
    store = JobStore(state / "jobs.sqlite")
    for job_id in ids:
        history = store.history(job_id)
        assert sum(t.to_state is JobState.DONE for t in history) == 1
        if job_id in done_before:  # its result had arrived: never run again
            assert history == before[job_id][2]
        if job_id in running_before:  # its run was lost with the leader: re-queued, re-run
            assert any("leader restart" in t.reason for t in history)
            assert after[job_id][1] == before[job_id][1] + 1
    assert sorted(p.name for p in results.iterdir()) == sorted(ids)
    store.close()


def _until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """`until` at the pace for what each wait here asks: the leader's API, the job store or
    the process table, each too dear to ask every 10 ms."""
    until(condition, timeout_s, what, every_s=EXPENSIVE_POLL_S)


def _followers(api: LeaderApi) -> int:
    try:
        return len(api.followers())
    except Exception:
        return 0


def _states(api: LeaderApi, ids: list[str]) -> set[str]:
    return {job["state"] for job in api.jobs() if job["id"] in ids}


def _mix(api: LeaderApi, ids: list[str]) -> bool:
    states = [job["state"] for job in api.jobs() if job["id"] in ids]
    return "done" in states and "running" in states and bool({"queued", "placed"} & set(states))


def _in_group(process: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, psutil.Error):
        return False


def _snapshot(state: Path) -> dict[str, tuple[JobState, int, list]]:
    """Each job's state, attempts and transitions, read from the store file."""
    store = JobStore(state / "jobs.sqlite")
    try:
        return {j.id: (j.state, j.attempts, store.history(j.id)) for j in store.list()}
    finally:
        store.close()
