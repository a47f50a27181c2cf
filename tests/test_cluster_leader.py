"""The leader end to end on a real Dask LocalCluster with two followers, running real
scenarios against the local Triton (one served for the test, so six jobs stay short); and the pieces it relies on, checked alone: the
result archive, what a follower's result means for its job, adopting results a killed
leader left in place, and a stop that reaches a follower before its run starts."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path, PurePosixPath

import psutil
import pytest
from cluster_checks import local_scenario, remote_scenario
from conftest import EXPENSIVE_POLL_S, until_async
from typer.testing import CliRunner

from servebench.analysis.loader import load_run
from servebench.cli import app as cli
from servebench.cluster import execute
from servebench.cluster.archive import ArchiveError, pack, travels, unpack
from servebench.cluster.follower import PRELOAD, preload_argv
from servebench.cluster.job import TERMINAL, JobState, new_job
from servebench.cluster.leader import Leader, adopt_results, judge
from servebench.cluster.policy import make_policy
from servebench.cluster.store import JobStore
from servebench.common.dask_cluster import worker_resources


@asynccontextmanager
async def running_leader(
    tmp_path: Path, followers: int, labels: dict[str, str] | None = None
) -> AsyncIterator[Leader]:
    """A two-tier leader on a LocalCluster of `followers` follower processes; closed (and
    its jobs settled in the store) on the way out, whatever the test did."""
    from distributed import Client, LocalCluster

    async with (
        LocalCluster(
            n_workers=followers, processes=True, threads_per_worker=1, resources=worker_resources(0),
            host="127.0.0.1", dashboard_address="127.0.0.1:0", preload=[PRELOAD],
            preload_argv=preload_argv(labels or {}), asynchronous=True,
        ) as cluster,
        Client(cluster, asynchronous=True) as client,
    ):  # fmt: skip
        store = JobStore(tmp_path / "state" / "jobs.sqlite")
        leader = Leader(store, make_policy("two-tier"), client, tmp_path / "results", tick_s=0.1)
        await leader.start()
        try:
            yield leader
        finally:
            await leader.close()


async def test_six_jobs_on_two_followers_land_in_results_and_open_with_report(
    tmp_path: Path, triton_dense_model
):
    from servebench.telemetry.host_peak import host_peaks

    host_peaks()  # the machine's roofs, measured once here rather than by two runs at once
    results = tmp_path / "results"
    async with running_leader(tmp_path, 2, {"site": "lab"}) as leader:
        store = leader.store
        assert sorted(leader.followers) == ["0", "1"]
        for follower in leader.followers.values():  # the preload published the labels
            assert follower.info.labels == {"site": "lab"} and follower.info.gpus == 0
        jobs = [  # mixed lengths, as a team's sweeps are
            await leader.submit(
                remote_scenario(f"tiny{i}", triton_dense_model, duration=0.3 + 0.2 * (i % 3)),
                submitter="test",
            )
            for i in range(6)
        ]
        await until_async(
            lambda: all(store.get(j.id).state in TERMINAL for j in jobs),
            timeout_s=600, what="six jobs to finish", every_s=EXPENSIVE_POLL_S
        )  # fmt: skip
    finished = [store.get(j.id) for j in jobs]
    assert [j.state for j in finished] == [JobState.DONE] * 6, [j.reason for j in finished]
    assert {j.follower for j in finished} == {"0", "1"}
    assert all(j.attempts == 1 for j in finished)
    for job in finished:
        assert job.result_path == str(results / job.id)
        run = json.loads((results / job.id / "run.json").read_text())
        assert run["status"] == "complete" and run["trials_planned"] == 1
        assert not (results / job.id / "export").exists()  # models stay on the follower
    _one_run_at_a_time(store, finished)
    assert sorted(p.name for p in results.iterdir()) == sorted(j.id for j in jobs)
    # Each follower wrote its job's report; what arrived also opens here on its own: every
    # result through the report's reader, one rendered again (seconds of plotting each).
    for job in finished:
        assert (results / job.id / "report.html").is_file()
        assert len(load_run(results / job.id).trials) == 1
    (results / finished[0].id / "report.html").unlink()
    result = CliRunner().invoke(cli, ["report", str(results / finished[0].id)])
    assert result.exit_code == 0, result.output
    assert (results / finished[0].id / "report.html").is_file()


def _one_run_at_a_time(store: JobStore, jobs: list) -> None:
    """On each follower, every run ended before the next started (the store's own
    transitions, in the order they were committed)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for job in jobs:
        history = store.history(job.id)
        start = next(t.at for t in history if t.to_state is JobState.RUNNING)
        end = next(t.at for t in history if t.to_state is JobState.DONE)
        spans.setdefault(job.follower, []).append((start, end))
    for runs in spans.values():
        runs.sort()
        for (_, end), (start, _) in pairwise(runs):
            assert end <= start


# -- the pieces, alone ---------------------------------------------------------------------


def _run_dir(root: Path) -> Path:
    run = root / "tiny-20260101T000000Z"
    (run / "records").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "complete", "reason": None}))
    (run / "trials.csv").write_text("trial_id\nt1\n")
    (run / "records" / "t1.parquet").write_bytes(b"PAR1")
    (run / "export" / "triton" / "m" / "1").mkdir(parents=True)
    (run / "export" / "triton" / "m" / "1" / "model.onnx").write_bytes(b"weights")
    backend = run / "repos" / "00" / "backends" / "python"
    backend.mkdir(parents=True)
    (backend / "libtriton_python.so").write_bytes(b"\x7fELF")
    model = run / "repos" / "00" / "models" / "m" / "1"
    model.mkdir(parents=True)
    (model / "model.onnx").write_bytes(b"weights")
    (model.parent / "config.pbtxt").write_text("name: 'm'")
    (run / "repos" / "00" / "tritonserver.log").write_text("started")
    return run


def test_archive_carries_the_measurements_not_the_models(tmp_path: Path):
    run = _run_dir(tmp_path / "follower")
    target = unpack(pack(run), tmp_path / "leader" / "j1")
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == [
        "records/t1.parquet",
        "repos/00/models/m/config.pbtxt",
        "repos/00/tritonserver.log",
        "run.json",
        "trials.csv",
    ]
    assert not list((tmp_path / "leader").glob(".incoming-*"))
    with pytest.raises(FileExistsError):
        unpack(pack(run), target)
    assert travels(PurePosixPath("report.html"))
    assert not travels(PurePosixPath("export/tfs/m/1/saved_model.pb"))


def test_archive_refuses_members_outside_the_run(tmp_path: Path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo("run/../../escape.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArchiveError):
        unpack(buffer.getvalue(), tmp_path / "results" / "j1")
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "results" / "j1").exists()
    assert not list((tmp_path / "results").glob(".incoming-*"))


def _result(status: str, reason: str | None = None) -> execute.JobRun:
    return execute.JobRun("j1", 1, "f0", 0, status, reason, "run", b"", 1.0, "")


def test_what_a_result_means_for_its_job():
    assert judge(_result("complete"), cancelled=False).state is JobState.DONE
    partial = judge(_result("partial", "1 of 2 trials failed"), cancelled=False)
    assert partial.state is JobState.DONE and "1 of 2 trials failed" in partial.reason
    assert judge(_result("failed", "all failed"), cancelled=False).state is JobState.FAILED
    assert judge(_result(execute.NO_RUN, "bad input"), cancelled=False).state is JobState.FAILED
    stopped = judge(_result("interrupted", "the follower was stopped"), cancelled=False)
    assert stopped.state is None and not stopped.keep_result  # back to the queue
    cancelled = judge(_result("interrupted", "cancelled by ada"), cancelled=True)
    assert cancelled.state is JobState.CANCELLED and cancelled.keep_result


def test_a_job_whose_trials_were_invalid_is_shown_as_invalid(tmp_path: Path):
    """Issue 33: a run that ran its only trial is `complete`, but the trial was INVALID
    (generator lag): the job's line leads with INVALID and why, in `cluster status`'s
    first 60 characters of a reason, not `done · complete`."""
    from rich.console import Console

    from servebench.cluster.status_table import status_tables

    run = tmp_path / "run"
    run.mkdir()
    lag = "generator fell behind: schedule lag p99 3.71 ms is 53% of latency p99 6.97 ms"
    (run / "trials.csv").write_text(
        f"trial_id,status,verdict,verdict_reasons\nt1,ok,INVALID,{lag}\n"
    )
    note = execute.invalid_note(run)
    assert note == f"INVALID: its only trial was INVALID ({lag})"
    result = execute.JobRun("j1", 1, "f0", 0, "complete", None, "run", b"", 1.0, "", note)
    outcome = judge(result, cancelled=False)
    assert outcome.state is JobState.DONE
    assert outcome.reason == f"{note}; run complete (on f0)"
    job = {"id": "j1", "scenario_name": "tiny", "state": "done", "follower": "f0",
           "attempts": 1, "submitted_at": 0.0, "started_at": 1.0, "finished_at": 2.0,
           "estimate_s": 1.0, "reason": outcome.reason}  # fmt: skip
    console = Console(record=True, width=200)
    console.print(status_tables([job], [], now=3.0))
    assert "INVALID: its only trial was INVALID (generator fell" in console.export_text()
    (run / "trials.csv").write_text(
        f"trial_id,status,verdict,verdict_reasons\nt1,ok,INVALID,{lag}\nt2,ok,VALID,\n"
        "t3,failed,INVALID,server crashed\n"
    )
    assert execute.invalid_note(run) == f"1 of 2 trials INVALID (first: {lag})"
    (run / "trials.csv").write_text("trial_id,status,verdict\nt1,ok,VALID\n")
    assert execute.invalid_note(run) is None
    assert judge(_result("complete"), cancelled=False).reason == "complete (on f0)"


def test_a_result_in_place_after_a_kill_is_adopted_not_rerun(tmp_path: Path):
    store = JobStore(tmp_path / "jobs.sqlite")
    results = tmp_path / "results"
    jobs = [new_job(local_scenario(f"t{i}"), submitter="test") for i in range(2)]
    for job in jobs:
        store.add(job)
        store.transition(job.id, JobState.PLACED, reason="placed", follower="f0")
        store.transition(job.id, JobState.RUNNING, reason="started", attempts=1)
    # The old leader renamed the first job's result into place, then was killed.
    unpack(pack(_run_dir(tmp_path / "follower")), results / jobs[0].id)
    adopted = adopt_results(store, results)
    assert [j.id for j in adopted] == [jobs[0].id]
    requeued = store.recover({"f0"}, lost=[j.id for j in store.list([JobState.RUNNING])])
    assert [j.id for j in requeued] == [jobs[1].id]
    done = store.get(jobs[0].id)
    assert done.state is JobState.DONE and done.result_path == str(results / jobs[0].id)
    assert store.get(jobs[1].id).attempts == 1  # kept for the next attempt
    store.close()


def test_a_stop_before_the_run_starts_means_it_never_starts(tmp_path: Path):
    assert execute.stop("jearly", "cancelled by ada") is False  # not running here yet
    run = execute.execute("jearly", local_scenario("never"), 1)
    assert run.status == "interrupted" and run.reason == "cancelled by ada"
    assert run.archive is None and run.measured_s == 0.0
    assert execute.running() == []


@pytest.mark.slow  # ~15-30 s; not an acceptance point of issue 14
async def test_cancel_interrupts_a_running_job_keeps_its_records_and_skips_a_waiting_one(
    tmp_path: Path, triton_dense_model
):
    results = tmp_path / "results"
    async with running_leader(tmp_path, 1) as leader:
        store = leader.store
        long = await leader.submit(
            remote_scenario("long", triton_dense_model, duration=120), submitter="test"
        )
        await until_async(
            lambda: _records_written(long.id),
            120,
            "the long job's trial to run",
            every_s=EXPENSIVE_POLL_S,
        )
        waiting = await leader.submit(remote_scenario("waiting", triton_dense_model), submitter="t")
        last = await leader.submit(remote_scenario("last", triton_dense_model), submitter="t")
        await until_async(
            lambda: store.get(last.id).state is JobState.PLACED,
            30,
            "placement",
            every_s=EXPENSIVE_POLL_S,
        )
        await leader.cancel(waiting.id, by="ada")
        await leader.cancel(long.id, by="ada")
        assert store.get(long.id).state is JobState.CANCELLED  # at once, before the run ends
        await until_async(
            lambda: store.get(last.id).state in TERMINAL,
            120,
            "the last job",
            every_s=EXPENSIVE_POLL_S,
        )
    assert store.get(last.id).state is JobState.DONE  # the slot came free
    assert [t.to_state for t in store.history(waiting.id)][-1] is JobState.CANCELLED
    assert JobState.RUNNING not in [t.to_state for t in store.history(waiting.id)]
    run = json.loads((results / long.id / "run.json").read_text())
    assert run["status"] == "interrupted"
    assert store.get(long.id).reason == "cancelled by ada"
    assert (results / long.id / "records.parquet").is_file()  # what it measured stayed
    assert not (results / waiting.id).exists()


def _records_written(job_id: str) -> bool:
    """Whether the job's run has started streaming records (its work folder, on the
    follower, is named after the job and is on the run's command line)."""
    for process in psutil.process_iter(["cmdline"]):
        for part in process.info["cmdline"] or ():
            if f"servebench-job-{job_id}-" in part and part.endswith("scenario.yaml"):
                return any(Path(part).parent.glob("results/*/records/*.parquet"))
    return False
