"""The leader: the durable store, a scheduling policy and a Dask client, tied by one
dispatch loop.

Each pass of the loop (every `tick_s`, or at once when a job arrives or ends):
1. reads the followers from the Dask scheduler (workers with the `slot` resource; labels
   from the scheduler metadata `follower.py` publishes); a follower that left or came
   back as a new process (same name, new address) gives its jobs back to the queue;
2. places every queued job on a follower's queue (tier 1: `policy.place`);
3. for every follower with a free slot, picks its next job (tier 2: `policy.next_job`)
   and submits `execute.execute` to exactly that Dask worker, with `slot=1`;
4. for every follower without one, asks the policy whether a running job should make
   room (`policy.preempt`: two-tier-preemptive) and, if so, asks its run to pause after
   its current trial (`execute.pause`).

A paused run comes back `interrupted` with the trials it finished. Its archive is kept
under `results/.paused/<job id>.tar.gz` (written whole, then renamed) before the job goes
back to the queue, with its run time so far (`run_s`) and one more `preemptions`; its
next attempt, on any follower, gets the archive and resumes it (`scenario run --resume`),
so every trial is measured once. The archive goes when the job ends; a paused job that is
cancelled gets it as its result.

Every state change is committed to the store before it is acted on: a job is `running`
in the store before Dask sees it, so a leader killed at any instant never has a run the
store does not know about. A result is written in one careful order: unpacked into a
hidden folder, renamed to `results/<job id>` in one step, then the job marked done; a
restarted leader that finds `results/<job id>` for a job still `running` marks it done
from that folder instead of running it again (`adopt_results`), re-queues the other
running jobs (their runs belonged to the old leader's Dask client), and interrupts any
run the old leader left on the followers.

Everything runs on one asyncio loop (the API's too); the store's calls are short
SQLite transactions, and unpacking a result runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from servebench.cluster import archive, execute
from servebench.cluster.errors import ClusterError
from servebench.cluster.follower import META_KEY
from servebench.cluster.job import (
    TERMINAL,
    FollowerInfo,
    Job,
    JobState,
    Needs,
    new_job,
    why_unschedulable,
)
from servebench.cluster.policy import FollowerPool, Policy
from servebench.cluster.store import JobStore
from servebench.common.dask_cluster import GPU, SLOT
from servebench.results import RUN_FILE, ResultDirError, RunStatus, read_run_json

log = logging.getLogger("servebench.cluster")

STORE_FILE = "jobs.sqlite"
# Under the results folder: the partial results of paused jobs, `<job id>.tar.gz`.
PAUSED_DIR = ".paused"
LOCK_FILE = "leader.lock"
TICK_S = 0.25
# Dask worker states in which a follower takes jobs (a closing one is leaving).
_SERVING = {"running", "paused"}
# The run statuses of a run that went through: its job is done (else failed or requeued).
_WENT_THROUGH = (RunStatus.COMPLETE, RunStatus.PARTIAL)


class LeaderError(ClusterError, RuntimeError):
    """The leader cannot start (its state directory is in use, the store is unusable)."""


@dataclass(frozen=True)
class Follower:
    address: str
    info: FollowerInfo


@dataclass(eq=False)
class _Run:
    """One attempt in flight: the Dask future and where it runs."""

    job_id: str
    follower: str
    address: str
    attempt: int
    future: Any  # distributed.Future
    task: asyncio.Task[None] | None = None
    cancelled: bool = False
    pausing: bool = False  # asked to pause after its current trial


@dataclass(frozen=True)
class Outcome:
    """How a finished attempt moves its job: to `state` (None: back to the queue);
    `keep_result`: its result directory lands in results/; `learn`: its duration
    teaches the policy's estimates."""

    state: JobState | None
    reason: str
    keep_result: bool = True
    learn: bool = False
    paused: bool = False  # back to the queue with its partial result, to resume


def judge(run: execute.JobRun, cancelled: bool, pausing: bool = False) -> Outcome:
    """What a follower's result means for its job.

    complete and partial runs are done (a partial run measured most trials; its reason
    says which failed); a failed run, or one that wrote nothing, failed; an interrupted
    run is the job's end only if the job was cancelled; one that was asked to pause
    (`pausing`) goes back to the queue with its partial result, which its next attempt
    resumes; otherwise its follower was stopped under it and the job goes back to the
    queue (the partial result is dropped: the next attempt runs what it would have)."""
    if cancelled:
        return Outcome(JobState.CANCELLED, run.reason or "cancelled")
    where = f"on {run.follower}"
    if run.status in _WENT_THROUGH:
        reason = run.status if not run.reason else f"{run.status}: {run.reason}"
        if run.invalid:  # first: `cluster status` shows a reason's first 60 characters
            reason = f"{run.invalid}; run {reason}"
        return Outcome(JobState.DONE, f"{reason} ({where})", learn=True)
    if run.status == RunStatus.INTERRUPTED and pausing and run.archive is not None:
        why = f"paused {where} after a trial ({run.reason or 'for a shorter job'})"
        return Outcome(None, why, keep_result=False, paused=True)
    if run.status == RunStatus.INTERRUPTED:
        why = run.reason or "interrupted"
        return Outcome(None, f"its run {where} was interrupted ({why})", keep_result=False)
    why = run.reason or f"exit status {run.exit_code}"
    return Outcome(JobState.FAILED, f"{run.status}: {why} ({where})")


def adopt_results(store: JobStore, results_dir: Path, now: float | None = None) -> list[Job]:
    """After a restart: every `running` job whose result directory is already in place
    (the old leader was killed between the rename and the store's commit) is finished
    from that directory's run.json, so it never runs twice. Returns the jobs finished."""
    adopted = []
    for job in store.list([JobState.RUNNING]):
        path = results_dir / job.id
        meta = _run_json(path)
        if meta is None:
            continue
        status = meta["status"]
        state = JobState.DONE if status in _WENT_THROUGH else JobState.FAILED
        reason = f"{status} (its result was in place when the leader restarted)"
        invalid = execute.invalid_note(path) if state == JobState.DONE else None
        reason = f"{invalid}; run {reason}" if invalid else reason
        adopted.append(
            store.transition(
                job.id, state, reason=reason, now=now, result_path=str(path),
                finished_at=time.time() if now is None else now,
            )
        )  # fmt: skip
    return adopted


class StateLock:
    """An exclusive lock on a state directory: two leaders on one store would each think
    the other's runs were lost. The kernel drops it when the holder dies, even by SIGKILL."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / LOCK_FILE
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise LeaderError(
                f"{self.path.parent} is in use by a running leader ({holder})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class Leader:
    """Queues jobs in `store`, places and orders them with `policy`, runs them on the
    Dask workers of `client` (an asynchronous `distributed.Client`), and puts their
    results under `results_dir/<job id>`."""

    def __init__(
        self,
        store: JobStore,
        policy: Policy,
        client: Any,
        results_dir: Path,
        *,
        tick_s: float = TICK_S,
        grace_s: float = execute.STOP_GRACE_S,
    ) -> None:
        self.store = store
        self.policy = policy
        self.client = client
        self.results_dir = Path(results_dir)
        self.tick_s = tick_s
        self.grace_s = grace_s
        self.pool = FollowerPool()
        self.followers: dict[str, Follower] = {}
        self._runs: dict[str, _Run] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False

    # -- life ----------------------------------------------------------------------------

    async def start(self) -> list[Job]:
        """Recover from the store (see the module doc) and start dispatching; returns the
        jobs recovery re-queued."""
        self.results_dir.mkdir(parents=True, exist_ok=True)
        for path in archive.remove_incoming(self.results_dir):
            log.info("removed %s, an unpack the previous leader did not finish", path)
        for job in adopt_results(self.store, self.results_dir):
            log.info("job %s: %s", job.id, job.reason)
        for ratio in self.store.ratios():
            self.policy.learner.observe(
                ratio.follower, ratio.key, ratio.measured_s, ratio.estimate_s
            )
        followers = await self._read_followers()
        lost = [job.id for job in self.store.list([JobState.RUNNING])]
        requeued = self.store.recover(set(followers), lost=lost)
        for job in requeued:
            log.info("job %s: %s", job.id, job.reason)
        if followers:
            await self._stop_on(
                [f.address for f in followers.values()],
                execute.stop_all,
                "the leader restarted and cannot collect this run",
            )
        now = time.time()
        for follower in followers.values():
            self._join(follower, now)
        for job in self.store.list([JobState.PLACED]):
            self.pool.enqueue(job.follower, job, self.policy.estimate(job, job.follower), now)
        self._loop_task = asyncio.create_task(self._loop(), name="servebench-leader")
        return requeued

    async def close(self) -> None:
        """Stop dispatching; put the jobs in flight back in the queue (their runs are
        interrupted and keep nothing), so the store says what a restart should do."""
        self._closing = True
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
        runs = list(self._runs.values())
        self._runs.clear()
        for run in runs:
            with contextlib.suppress(KeyError, ValueError):
                job = self.store.get(run.job_id)
                if job.state is JobState.RUNNING:
                    self.store.transition(
                        run.job_id, JobState.QUEUED, reason="the leader stopped during its run",
                        follower=None, started_at=None,
                    )  # fmt: skip
            if run.task is not None:
                run.task.cancel()
        for run in runs:
            await self._stop_on([run.address], execute.stop, run.job_id, "the leader stopped")
        with contextlib.suppress(Exception):
            await self.client.cancel([run.future for run in runs])

    # -- what the API calls ------------------------------------------------------------------

    async def submit(
        self,
        scenario_text: str,
        *,
        submitter: str,
        priority: int = 0,
        source: str = "<submitted>",
        needs: Needs | None = None,
    ) -> Job:
        """Validate and queue a job (ScenarioError with `file:line field` problems if the
        scenario is bad). The validation runs in a thread: it builds the plan."""
        job = await asyncio.to_thread(
            new_job, scenario_text, submitter=submitter, priority=priority, source=source,
            needs=needs,
        )  # fmt: skip
        self.add(job)
        return job

    def add(self, job: Job) -> None:
        """Queue a job `new_job` made (validated). Dispatching happens on the loop's next
        pass, so jobs added one after another without awaiting arrive together. A job no
        follower can run is queued flagged (its reason says what it needs), at once, so the
        submitter hears it in the answer."""
        self.store.add(job)
        log.info("job %s: queued (%s from %s)", job.id, job.scenario_name, job.submitter)
        self._flag(self.store.get(job.id))
        self._wake.set()

    def unschedulable(self, job: Job) -> str | None:
        """Why no follower that has joined can run a waiting job (None: one can, or the
        job is not waiting)."""
        if job.state is not JobState.QUEUED:
            return None
        return why_unschedulable(job.needs, (f.info for f in self.followers.values()))

    def _flag(self, job: Job) -> None:
        """Say in a queued job's reason when no follower can run it (and stop saying it
        once one that can has joined: placing it then gives it a new reason)."""
        why = self.unschedulable(job)
        if why is not None and why != job.reason:
            self.store.note(job.id, why)
            log.warning("job %s: %s", job.id, why)

    async def cancel(self, job_id: str, by: str = "a user") -> Job:
        """Cancel a job (KeyError if unknown). A queued or placed job is cancelled at once
        (one that was paused keeps what it measured before: its partial result lands in
        the results); a running one is marked cancelled first, then its run is
        interrupted: it keeps what it measured, which lands in the results as for any run."""
        job = self.store.get(job_id)
        if job.state in TERMINAL:
            return job
        reason = f"cancelled by {by}"
        run = self._runs.get(job_id)
        kept: dict[str, Any] = {}
        partial = self._partial(job_id) if run is None else None
        if partial is not None:  # paused: what it measured before its pause is its result
            data = await asyncio.to_thread(partial.read_bytes)
            kept["result_path"] = str(await asyncio.to_thread(self._unpack, job_id, data))
        job = self.store.transition(
            job_id, JobState.CANCELLED, reason=reason, finished_at=time.time(), **kept
        )
        if partial is not None:
            self._drop_partial(job_id)
        holder = self.pool.holder(job_id)
        if run is not None:
            run.cancelled = True
            await self._stop_on([run.address], execute.stop, job_id, reason)
        elif holder is not None:
            self.pool.dequeue(holder, job_id, time.time())
        log.info("job %s: %s", job_id, reason)
        self._wake.set()
        return job

    def result_dir(self, job_id: str) -> Path | None:
        """The job's result directory if it has one (KeyError if the job is unknown)."""
        self.store.get(job_id)
        path = self.results_dir / job_id
        return path if (path / "run.json").is_file() else None

    def follower_rows(self) -> list[dict[str, Any]]:
        """Each follower: name, address, GPUs, labels, running and queued job ids."""
        rows = []
        for name, follower in self.followers.items():
            state = self.pool[name]  # a known follower is always in the pool
            rows.append(
                {
                    "name": name,
                    "address": follower.address,
                    "gpus": follower.info.gpus,
                    "labels": dict(follower.info.labels),
                    "slots": follower.info.slots,
                    "running": [j.id for j in state.running],
                    "queued": [j.id for j in state.queue],
                }
            )
        return rows

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while not self._closing:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a scheduler hiccup must not end the leader
                log.warning("dispatch pass failed, retrying: %s: %s", type(err).__name__, err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick_s)
            self._wake.clear()

    async def _tick(self) -> None:
        await self._sync_followers()
        if self._closing:
            return
        now = time.time()
        for job in self.store.list([JobState.QUEUED]):
            self._place(job, now)
        for state in list(self.pool):
            while state.free_slots > 0 and state.queue and not self._closing:
                job = self.policy.next_job(state, now)
                if job is None:
                    break
                await self._start(state.name, job, now)
            if state.free_slots == 0 and state.queue and not self._closing:
                await self._preempt(state, now)

    def _place(self, job: Job, now: float) -> None:
        name = self.policy.place(job, self.pool, now)
        if name is None:
            self._flag(job)  # no follower fits now: it stays queued, tried every pass
            return
        job = self.store.transition(
            job.id, JobState.PLACED, reason=f"placed on {name} ({self.policy.name})", follower=name
        )
        self.pool.enqueue(name, job, self.policy.estimate(job, name), now)

    async def _start(self, name: str, job: Job, now: float) -> None:
        follower = self.followers[name]
        attempt = job.attempts + 1
        job = self.store.transition(
            job.id, JobState.RUNNING, reason=f"started on {name} (attempt {attempt})",
            attempts=attempt, started_at=now,
        )  # fmt: skip
        self.pool.start(name, job.id, now)
        try:
            partial = self._partial(job.id)
            # Off the loop, as the archive is written and unpacked: it may be large.
            archive = None if partial is None else await asyncio.to_thread(partial.read_bytes)
            future = self.client.submit(
                execute.execute, job.id, job.scenario_text, attempt, grace_s=self.grace_s,
                partial=archive,
                key=f"servebench-{job.id}-{attempt}", resources={SLOT: 1},
                workers=[follower.address], allow_other_workers=False, pure=False, retries=0,
            )  # fmt: skip
        except Exception as err:  # the client is closing: the job waits for the next leader
            self.pool.finish(name, job.id, now)
            reason = f"re-queued: it could not be handed to {name} ({err})"
            self.store.transition(
                job.id, JobState.QUEUED, reason=reason, follower=None, started_at=None
            )
            return
        run = _Run(job.id, name, follower.address, attempt, future)
        self._runs[job.id] = run
        run.task = asyncio.create_task(self._watch(run), name=f"servebench-{job.id}")
        log.info("job %s: started on %s (attempt %d)", job.id, name, attempt)

    async def _preempt(self, state: Any, now: float) -> None:
        """Ask the policy whether a running job on this full follower should make room;
        if so, ask its run to pause after its current trial."""
        victim = self.policy.preempt(state, now)
        run = None if victim is None else self._runs.get(victim.id)
        if victim is None or run is None or run.pausing or run.cancelled:
            return
        waiting = self.policy.next_job(state, now)
        run.pausing = True
        self.pool.pausing(state.name, victim.id)
        reason = f"paused for the shorter job {waiting.id if waiting else '?'}"
        log.info("job %s: asked to pause on %s (%s)", victim.id, state.name, reason)
        await self._stop_on([run.address], execute.pause, victim.id, reason)

    def _partial(self, job_id: str) -> Path | None:
        """The partial result a paused job resumes from, if it has one."""
        path = self.results_dir / PAUSED_DIR / f"{job_id}.tar.gz"
        return path if path.is_file() else None

    def _keep_partial(self, job_id: str, data: bytes) -> None:
        """Keep a paused run's archive, whole or not at all (written, synced, renamed)."""
        folder = self.results_dir / PAUSED_DIR
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{job_id}.tmp"
        with temporary.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, folder / f"{job_id}.tar.gz")

    def _drop_partial(self, job_id: str) -> None:
        (self.results_dir / PAUSED_DIR / f"{job_id}.tar.gz").unlink(missing_ok=True)

    async def _watch(self, run: _Run) -> None:
        """Wait for one attempt's result and act on it, unless the attempt was
        superseded meanwhile (its follower left and the job was re-queued)."""
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        try:
            result: execute.JobRun | Outcome = await run.future
        except (FutureCancelledError, KilledWorker) as err:
            why = f"{type(err).__name__}: {err}"
            result = Outcome(None, f"its run on {run.follower} was lost ({why})")
        except asyncio.CancelledError:
            raise  # the leader is closing
        except Exception as err:  # execute itself raised on the follower
            why = f"{type(err).__name__}: {err}"
            result = Outcome(JobState.FAILED, f"the run on {run.follower} raised {why}")
        if self._runs.get(run.job_id) is not run:
            return
        try:
            await self._finish(run, result)
        except Exception:
            log.exception("job %s: handling its result failed", run.job_id)
        finally:
            self._wake.set()

    async def _finish(self, run: _Run, result: execute.JobRun | Outcome) -> None:
        """Land the result (unpack, rename), free the slot, then commit the job's move."""
        run_s = 0.0
        if isinstance(result, execute.JobRun):
            outcome = judge(result, run.cancelled, run.pausing)
            data = result.archive if outcome.keep_result else None
            run_s = result.measured_s
            if outcome.paused and result.archive is not None:
                await asyncio.to_thread(self._keep_partial, run.job_id, result.archive)
        else:
            outcome, data = result, None
        path = None if data is None else await asyncio.to_thread(self._unpack, run.job_id, data)
        now = time.time()
        self._runs.pop(run.job_id, None)
        if self.pool.holder(run.job_id) == run.follower:
            self.pool.finish(run.follower, run.job_id, now)
        job = self.store.get(run.job_id)
        run_s += job.run_s  # the actual: every segment of a paused job
        if job.state is not JobState.RUNNING:  # cancelled while it ran
            self._drop_partial(job.id)
            log.info("job %s: its run ended (%s); the job is %s", job.id, outcome.reason, job.state)
            return
        if outcome.state is None:
            counted: dict[str, Any] = {}
            if outcome.paused:
                counted = {"run_s": run_s, "preemptions": job.preemptions + 1}
            reason = f"re-queued: {outcome.reason}"
            self.store.transition(
                job.id, JobState.QUEUED, reason=reason, follower=None, started_at=None,
                **counted,
            )  # fmt: skip
            log.info("job %s: %s", job.id, reason)
            return
        fields: dict[str, Any] = {"finished_at": now, "run_s": run_s}
        if path is not None:
            fields["result_path"] = str(path)
        self.store.transition(job.id, outcome.state, reason=outcome.reason, now=now, **fields)
        self._drop_partial(job.id)
        if outcome.learn and isinstance(result, execute.JobRun):
            self.policy.observe(job, run.follower, run_s)
            self.store.record_ratio(run.follower, job.key, run_s, job.estimate_s)
        log.info("job %s: %s: %s", job.id, outcome.state, outcome.reason)

    def _unpack(self, job_id: str, data: bytes) -> Path:
        target = self.results_dir / job_id
        if (target / "run.json").is_file():
            return target  # placed by an earlier attempt whose end the store missed
        return archive.unpack(data, target)

    # -- followers ---------------------------------------------------------------------------

    async def _read_followers(self) -> dict[str, Follower]:
        """The Dask workers that are servebench followers, by name."""
        identity = await self.client.scheduler.identity()
        meta = await self.client.get_metadata([META_KEY], default={})
        found: dict[str, Follower] = {}
        for address, worker in identity.get("workers", {}).items():
            resources = worker.get("resources") or {}
            if SLOT not in resources or worker.get("status", "running") not in _SERVING:
                continue
            name = str(worker.get("name", address))
            labels = (meta.get(name) or {}).get("labels") or {}
            info = FollowerInfo(
                name, gpus=int(resources.get(GPU, 0)), labels=dict(labels),
                slots=max(1, int(resources[SLOT])),
            )  # fmt: skip
            found[name] = Follower(address, info)
        return found

    async def _sync_followers(self) -> None:
        found = await self._read_followers()
        now = time.time()
        for name, known in list(self.followers.items()):
            current = found.get(name)
            if current == known:
                continue
            why = "left" if current is None else "came back as a new process"
            await self._leave(name, why, now)
        for name, follower in found.items():
            if name not in self.followers:
                self._join(follower, now)

    def _join(self, follower: Follower, now: float) -> None:
        self.followers[follower.info.name] = follower
        self.pool.add(follower.info, now)
        log.info("follower %s joined (%s)", follower.info.name, follower.address)
        self._wake.set()

    async def _leave(self, name: str, why: str, now: float) -> None:
        """A follower left: its queued and running jobs go back to the queue (attempts
        kept), except a run whose result already arrived (its watcher finishes it)."""
        del self.followers[name]
        jobs = self.pool.remove(name)
        log.info("follower %s %s; %d job(s) back to the queue", name, why, len(jobs))
        for job in jobs:
            run = self._runs.get(job.id)
            if run is not None:
                if run.future.done():
                    continue
                del self._runs[job.id]
                with contextlib.suppress(Exception):
                    await run.future.cancel()
            with contextlib.suppress(KeyError, ValueError):
                current = self.store.get(job.id)
                if current.state in (JobState.PLACED, JobState.RUNNING):
                    self.store.transition(
                        job.id, JobState.QUEUED, reason=f"re-queued: follower {name} {why}",
                        follower=None, started_at=None,
                    )  # fmt: skip

    async def _stop_on(self, addresses: Iterable[str], function: Any, *args: Any) -> None:
        """Call `execute.stop`/`stop_all` on followers; one that is gone is skipped."""
        try:
            await self.client.run(function, *args, workers=list(addresses), on_error="return")
        except Exception as err:
            log.warning("could not reach %s to stop a run: %s", ", ".join(addresses), err)


def _run_json(path: Path) -> dict[str, Any] | None:
    """The run's run.json through its one reader (None: none, or not readable as one)."""
    try:
        return read_run_json(path / RUN_FILE)
    except (OSError, ResultDirError):
        return None
