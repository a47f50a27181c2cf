"""Cluster jobs and their durable store: validation of a submitted scenario, legal
transitions only, history, recovery after a leader restart, and a writer killed with
SIGKILL losing nothing it committed."""

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from servebench.cluster.job import (
    IllegalTransition,
    Job,
    JobState,
    Needs,
    new_job,
)
from servebench.cluster.store import JobStore, StoreError
from servebench.scenario.plan import expand
from servebench.scenario.validate import ScenarioError, load_scenario

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def job(i: int, **changes) -> Job:
    fields = dict(
        id=f"j{i}", scenario_name="sweep", scenario_text=f"name: s{i}\n", submitter="ann",
        priority=0, needs=Needs(1, {"zone": "a"}), estimate_s=12.5, state=JobState.QUEUED,
        submitted_at=100.0 + i,
    )  # fmt: skip
    return Job(**{**fields, **changes})


# ----------------------------------------------------------------------------- new_job


def test_new_job_takes_the_plan_estimate_and_the_servers_gpus():
    path = SCENARIOS / "quickstart.yaml"
    made = new_job(path.read_text(), submitter="ann", priority=2, source=str(path))
    assert made.state is JobState.QUEUED and made.attempts == 0
    assert made.scenario_name == "quickstart" and made.submitter == "ann"
    assert made.priority == 2
    assert made.estimate_s == pytest.approx(expand(load_scenario(path), path.parent).estimated_s)
    assert made.needs == Needs(0, {})
    gpu = path.read_text().replace("launch: local", "launch: docker\n    gpus: 2")
    assert new_job(gpu, submitter="ann").needs.gpus == 2
    explicit = Needs(1, {"zone": "b"})
    assert new_job(path.read_text(), submitter="ann", needs=explicit).needs == explicit
    assert new_job(path.read_text(), submitter="ann").id != made.id


def problems(text: str, source: str = "<submitted>") -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        new_job(text, submitter="ann", source=source)
    return caught.value.problems


def test_new_job_errors_name_source_line_and_field():
    text = (SCENARIOS / "quickstart.yaml").read_text()
    bad = text.replace("duration_s: 10.0", "duration_s: -1")
    line = text.splitlines().index("  duration_s: 10.0") + 1
    assert problems(bad) == [f"<submitted>:{line} workload.duration_s: -1 — must be > 0"]
    assert problems(bad, "mine.yaml")[0].startswith(f"mine.yaml:{line} workload.duration_s")
    assert problems("name: [")[0].startswith("<submitted>:1: not valid YAML")
    assert problems("- 1\n") == [
        "<submitted>:1 (top level): a scenario must be a mapping of sections"
    ]


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("links: [direct, wifi, lte]", "links: [direct, profiles/mine.yaml]", "links[1]"),
        (
            "links: [direct, wifi, lte]",
            "links: [{name: l, rtt_s: 0.01, down_trace: /tmp/t.down}]",
            "links[0].down_trace",
        ),
        ("  duration_s: 10.0", "  trace: /etc/intervals.txt", "workload.trace"),
        ("  grid:", "  repository: exported\n  grid:", "models.repository"),
    ],
)
def test_a_job_scenario_must_not_name_files(old, new, field):
    """A follower has none of the submitter's files, and the leader must not read them."""
    text = (SCENARIOS / "quickstart.yaml").read_text().replace(old, new)
    found = problems(text)
    assert len(found) == 1
    assert f" {field}: " in found[0]
    assert "a cluster job's scenario must be self-contained" in found[0]


def test_an_oversized_scenario_is_refused_in_one_line():
    found = problems("name: x\n" + "#" * (1 << 20))
    assert found[0].startswith("<submitted>:1 (top level): 1,048,584 bytes")


# ----------------------------------------------------------------------------- store


def test_jobs_survive_closing_and_reopening(tmp_path):
    path = tmp_path / "state" / "jobs.sqlite"
    with JobStore(path) as store:
        store.add(job(1))
        store.add(job(2, needs=Needs(), priority=-3))
        store.transition("j1", JobState.PLACED, reason="least work", now=200, follower="f1")
        store.record_ratio("f1", "sweep", 30.0, 12.5, now=300)
    with JobStore(path) as store:
        assert [j.id for j in store.list()] == ["j1", "j2"]
        assert store.get("j2") == job(2, needs=Needs(), priority=-3)
        assert store.get("j1") == job(1, state=JobState.PLACED, follower="f1", reason="least work")
        assert [j.id for j in store.list([JobState.QUEUED])] == ["j2"]
        assert store.list([]) == []
        assert store.counts()[JobState.PLACED] == 1
        assert [(r.follower, r.key, r.measured_s, r.estimate_s) for r in store.ratios()] == [
            ("f1", "sweep", 30.0, 12.5)
        ]
        with pytest.raises(KeyError):
            store.get("nope")


def test_a_store_of_schema_1_gains_the_actual_and_the_preemption_count(tmp_path):
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.add(job(1))
    db = sqlite3.connect(path)  # back to schema 1: the jobs table without the new columns
    db.executescript(
        "ALTER TABLE jobs DROP COLUMN run_s; ALTER TABLE jobs DROP COLUMN preemptions; "
        "PRAGMA user_version=1;"
    )
    db.close()
    with JobStore(path) as store:
        assert store.get("j1") == job(1)  # run_s 0, preemptions 0
        store.transition("j1", JobState.PLACED, reason="x", follower="f")
        store.transition("j1", JobState.RUNNING, reason="x")
        done = store.transition("j1", JobState.DONE, reason="x", run_s=12.5, preemptions=2)
        assert (done.run_s, done.preemptions, done.estimate_s) == (12.5, 2, 12.5)
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_the_store_is_sqlite_in_wal_mode_with_full_sync(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    db = sqlite3.connect(tmp_path / "jobs.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # kept in the file


def test_illegal_transitions_are_refused_and_change_nothing(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.add(job(1))
        with pytest.raises(IllegalTransition, match="queued → running is not allowed"):
            store.transition("j1", JobState.RUNNING, reason="skip placing")
        with pytest.raises(IllegalTransition):
            store.transition("j1", JobState.DONE, reason="never ran")
        store.transition("j1", JobState.PLACED, reason="p", follower="f1")
        store.transition("j1", JobState.RUNNING, reason="r", started_at=1.0, attempts=1)
        store.transition("j1", JobState.DONE, reason="ok", finished_at=2.0, result_path="r/j1")
        for target in JobState:
            with pytest.raises(IllegalTransition, match="none: it is finished"):
                store.transition("j1", target, reason="again")
        assert store.get("j1").state is JobState.DONE
        assert len(store.history("j1")) == 4
        with pytest.raises(KeyError):
            store.transition("nope", JobState.PLACED, reason="x")
        with pytest.raises(TypeError, match="cannot set state"):
            store.transition("j1", JobState.DONE, reason="x", state="queued")


@pytest.mark.parametrize("start", [JobState.QUEUED, JobState.PLACED, JobState.RUNNING])
def test_a_job_can_be_cancelled_until_it_ends(tmp_path, start):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.add(job(1))
        path = [JobState.PLACED, JobState.RUNNING]
        for state in path[: path.index(start) + 1] if start is not JobState.QUEUED else []:
            store.transition("j1", state, reason="on", follower="f1")
        assert store.transition("j1", JobState.CANCELLED, reason="by ann").state == "cancelled"


def test_history_keeps_every_transition_with_time_reason_and_follower(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.add(job(1))
        store.transition("j1", JobState.PLACED, reason="least work", now=1, follower="f1")
        store.transition("j1", JobState.RUNNING, reason="slot free", now=2, attempts=1)
        store.transition("j1", JobState.QUEUED, reason="f1 vanished", now=3, follower=None)
        store.transition("j1", JobState.PLACED, reason="least work", now=4, follower="f2")
        steps = [
            (t.from_state, t.to_state, t.at, t.reason, t.follower) for t in store.history("j1")
        ]
        assert steps == [
            (None, "queued", 101.0, "submitted", None),
            ("queued", "placed", 1, "least work", "f1"),
            ("placed", "running", 2, "slot free", "f1"),
            ("running", "queued", 3, "f1 vanished", "f1"),
            ("queued", "placed", 4, "least work", "f2"),
        ]
        assert store.get("j1").attempts == 1  # kept through the re-queue
        with pytest.raises(KeyError):
            store.history("nope")


def test_recover_requeues_what_was_lost_and_never_reruns_a_stored_result(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        for i in range(1, 7):
            store.add(job(i))
        store.transition("j2", JobState.PLACED, reason="p", follower="alive")
        store.transition("j3", JobState.PLACED, reason="p", follower="gone")
        for i, follower in ((4, "alive"), (5, "gone"), (6, "alive")):
            store.transition(f"j{i}", JobState.PLACED, reason="p", follower=follower)
            store.transition(f"j{i}", JobState.RUNNING, reason="r", attempts=2, started_at=5.0)
        # j6's result reached the leader's disk and was recorded, but not yet marked done
        store.record_result("j6", "results/j6")
        with pytest.raises(IllegalTransition, match="not running"):
            store.record_result("j2", "results/j2")

        requeued = store.recover({"alive"}, now=50.0, lost={"j4"})
        assert sorted(j.id for j in requeued) == ["j3", "j4", "j5"]
        states = {j.id: j.state for j in store.list()}
        assert states == {
            "j1": "queued", "j2": "placed", "j3": "queued", "j4": "queued", "j5": "queued",
            "j6": "done",
        }  # fmt: skip
        assert store.get("j5").attempts == 2 and store.get("j5").follower is None
        assert "follower gone is gone" in store.get("j5").reason
        assert "its run on alive was lost" in store.get("j4").reason
        assert store.get("j6").finished_at == 50.0
        assert store.recover({"alive"}, now=60.0) == []  # nothing more to do


def test_threads_sharing_one_store_lose_no_transition(tmp_path):
    with JobStore(tmp_path / "jobs.sqlite") as store:
        for i in range(40):
            store.add(job(i))

        def walk(ids: range) -> None:
            for i in ids:
                store.transition(f"j{i}", JobState.PLACED, reason="p", follower="f")
                store.transition(f"j{i}", JobState.RUNNING, reason="r")
                store.transition(f"j{i}", JobState.DONE, reason="d")

        threads = [threading.Thread(target=walk, args=(range(k, 40, 4),)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.counts()[JobState.DONE] == 40
        assert all(len(store.history(f"j{i}")) == 4 for i in range(40))


WRITER = textwrap.dedent(
    """
    import sys
    from servebench.cluster.job import Job, JobState, Needs
    from servebench.cluster.store import JobStore

    store = JobStore(sys.argv[1])
    i = 0
    while True:  # until killed: add a job and walk it, saying so after each commit
        jid = f"j{i}"
        store.add(Job(jid, "s", "name: s", "w", 0, Needs(), 1.0, JobState.QUEUED, float(i)))
        print(jid, "queued", flush=True)
        store.transition(jid, JobState.PLACED, reason="p", follower="f")
        print(jid, "placed", flush=True)
        if i % 2:
            store.transition(jid, JobState.RUNNING, reason="r")
            print(jid, "running", flush=True)
        i += 1
    """
)


def test_a_writer_killed_with_sigkill_loses_nothing_it_committed(tmp_path):
    path = tmp_path / "jobs.sqlite"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    committed: dict[str, str] = {}
    try:
        assert writer.stdout is not None
        while len(committed) < 60:
            line = writer.stdout.readline()
            assert line, "the writer stopped on its own"
            jid, state = line.split()
            committed[jid] = state
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    with JobStore(path) as store:
        found = {j.id: j.state for j in store.list()}
        order = ["queued", "placed", "running"]
        for jid, state in committed.items():
            # there, in the state it reported or a later one (it ran on until the kill)
            assert order.index(found[jid]) >= order.index(state), jid
        for j in store.list():  # and no transition half-written: each history is whole
            steps = [t.to_state for t in store.history(j.id)]
            assert steps == order[: order.index(j.state) + 1]


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    path = tmp_path / "jobs.sqlite"
    path.write_text("not sqlite at all, just text" * 100)
    with pytest.raises(StoreError, match="not a servebench job store"):
        JobStore(path)
