"""A discrete-event simulation of the leader's scheduling, driving the very policy objects
the leader uses, so a policy can be measured on 10,000 jobs before a team trusts it.

Three kinds of event, in a heap by time: a job arrives (the policy places it on a
follower's queue, `FollowerPool.enqueue`), a job ends (its slot frees, the policy learns
its measured/estimate ratio, and the follower asks the policy for its next job), and a job
pauses. A job runs for its trace duration divided by its follower's speed; the scheduler
knows only the estimate. Jobs that fit no follower are counted, not run.

Preemption (`policy.preempt`, asked whenever a job joins a follower's queue): the job
picked runs on to its next trial boundary (its duration is `trials` equal trials; one in
its last trial just finishes), then pauses: its slot frees and it is placed again with
what remains of its work plus `pause_cost_s` (the stop, the result's trip, the new run's
start: measured, see docs/benchmarks.md), which it pays when it resumes, on any follower.

Per policy: average and p95 job completion time (JCT: end − submission), mean queueing
delay (start − submission), makespan (last end − first submission), utilization (busy
slot-seconds over slots × makespan), and average JCT relative to `FIFO_REFERENCE`
(fifo-roundrobin): FIFO's average JCT over the policy's, so 1.6 means 1.6× faster; the
long jobs' mean slowdown (JCT over the job's duration on its follower, for the longest
`LONG_SHARE` of the trace) and how many pauses there were.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace

from servebench.cluster.job import FollowerInfo, Job, JobState, Needs
from servebench.cluster.policy import FIFO_REFERENCE, FollowerPool, Policy
from servebench.cluster.trace import TraceJob
from servebench.common.quantiles import percentile

# At equal times a slot frees (a job ends or pauses) before a new job is placed.
_FINISH, _PAUSE, _ARRIVE = 0, 1, 2
#: The share of a trace's jobs, longest first, whose slowdown `long_slowdown` averages (the
#: synthetic mix's SLO searches are 15 % of its jobs).
LONG_SHARE = 0.15


@dataclass(frozen=True)
class SimResult:
    policy: str
    jobs: int  # run to the end
    unplaced: int  # fitted no follower
    avg_jct_s: float
    p95_jct_s: float
    mean_queueing_s: float
    makespan_s: float
    utilization: float
    wall_s: float  # how long the simulation itself took
    long_slowdown: float = math.nan  # the longest LONG_SHARE's mean JCT / own run time
    preemptions: int = 0  # pauses at a trial boundary
    jct_ratio: float | None = None  # FIFO_REFERENCE's average JCT over this one's

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def simulate(
    policy: Policy,
    trace: Sequence[TraceJob],
    followers: Iterable[FollowerInfo],
    *,
    pause_cost_s: float = 0.0,
) -> SimResult:
    """Run `trace` (with estimates, see `trace.with_estimates`) on `followers` under
    `policy`, a pause costing `pause_cost_s` (work seconds on a speed-1.0 follower); the
    policy object keeps what it learned."""
    started_wall = time.perf_counter()
    sim = _Simulation(policy, trace, list(followers), pause_cost_s)
    while sim.events:
        now, kind, index, name, seg = heapq.heappop(sim.events)
        if kind == _ARRIVE:
            sim.arrive(index, now)
        elif seg == sim.segment[str(index)]:  # else superseded by a pause
            sim.end(kind, index, name, now)
    return sim.result(time.perf_counter() - started_wall)


class _Simulation:
    """One `simulate` call's state and its moves: a job arrives and is placed, a follower
    starts what its queue holds next, a running job is paused at a trial boundary for a
    job the policy prefers, and a job ends or pauses."""

    def __init__(
        self,
        policy: Policy,
        trace: Sequence[TraceJob],
        followers: list[FollowerInfo],
        pause_cost_s: float,
    ) -> None:
        self.policy, self.trace, self.followers = policy, trace, followers
        self.pause_cost_s = pause_cost_s
        self.pool = FollowerPool(followers)
        self.speed = {f.name: f.speed for f in followers}
        origin = min((t.submit_s for t in trace), default=0.0)
        # (time, kind, job index, follower, segment): a job's end or pause is stale once
        # its segment number has moved on (it was paused before that end).
        self.events = [(t.submit_s - origin, _ARRIVE, i, "", 0) for i, t in enumerate(trace)]
        heapq.heapify(self.events)
        self.segment: dict[str, int] = {}  # job id → its current segment (bumped by a pause)
        self.done: dict[str, float] = {}  # job id → its work done (speed-1 s) at segment start
        self.overhead: dict[str, float] = {}  # job id → a resume's cost owed at segment start
        self.start_at: dict[str, float] = {}  # job id → start of its current segment
        self.first_start: dict[str, float] = {}
        self.pause_at: dict[str, float] = {}  # job id → the work done at its coming pause
        self.jct: list[float] = []
        self.slowdown: dict[int, float] = {}
        self.queueing: list[float] = []
        self.busy = 0.0
        self.unplaced = 0
        self.pauses = 0
        self.last_end = 0.0

    def arrive(self, index: int, now: float) -> None:
        job_id = str(index)
        job = _job(job_id, self.trace[index], now)
        self.segment[job_id], self.done[job_id], self.overhead[job_id] = 0, 0.0, 0.0
        if self.place(job, now) is None:
            self.unplaced += 1

    def end(self, kind: int, index: int, name: str, now: float) -> None:
        """The job `index` on follower `name` finishes, or pauses (`_PAUSE`)."""
        job_id = str(index)
        job = self.pool.finish(name, job_id, now)
        ran = now - self.start_at[job_id]
        self.busy += ran
        job.run_s += ran
        if kind == _PAUSE:
            self.pauses += 1
            job.preemptions += 1
            self.done[job_id], self.overhead[job_id] = self.pause_at.pop(job_id), self.pause_cost_s
            self.run_next(name, now)
            self.place(job, now)
            return
        self.policy.observe(job, name, job.run_s)
        self.jct.append(now - job.submitted_at)
        self.slowdown[index] = (now - job.submitted_at) / job.run_s if job.run_s > 0 else 1.0
        self.queueing.append(self.first_start[job_id] - job.submitted_at)
        self.last_end = now
        self.run_next(name, now)

    def run_next(self, name: str, now: float) -> None:
        state = self.pool[name]
        while state.free_slots > 0:
            job = self.policy.next_job(state, now)
            if job is None:
                return
            self.pool.start(name, job.id, now)
            self.start_at[job.id] = now
            self.first_start.setdefault(job.id, now)
            left = self.overhead[job.id] + self.trace[int(job.id)].duration_s - self.done[job.id]
            end = now + left / self.speed[name]
            heapq.heappush(self.events, (end, _FINISH, int(job.id), name, self.segment[job.id]))

    def place(self, job: Job, now: float) -> str | None:
        target = self.policy.place(job, self.pool, now)
        if target is not None:
            self.pool.enqueue(target, job, self.policy.estimate(job, target), now)
            self.run_next(target, now)
            self.preempt(target, now)
        return target

    def preempt(self, name: str, now: float) -> None:
        victim = self.policy.preempt(self.pool[name], now)
        if victim is None:
            return
        t = self.trace[int(victim.id)]
        trial = t.duration_s / t.trials
        ran = (now - self.start_at[victim.id]) * self.speed[name]
        progress = self.done[victim.id] + max(0.0, ran - self.overhead[victim.id])
        boundary = (math.floor(progress / trial + 1e-9) + 1) * trial
        if boundary >= t.duration_s * (1 - 1e-9):
            return  # in its last trial: it ends as soon as a pause would
        self.pool.pausing(name, victim.id)
        self.pause_at[victim.id] = boundary
        self.segment[victim.id] += 1
        work = self.overhead[victim.id] + boundary - self.done[victim.id]
        at = self.start_at[victim.id] + work / self.speed[name]
        heapq.heappush(self.events, (at, _PAUSE, int(victim.id), name, self.segment[victim.id]))

    def result(self, wall_s: float) -> SimResult:
        slots = sum(f.slots for f in self.followers)
        last_end = self.last_end
        return SimResult(
            policy=self.policy.name,
            jobs=len(self.jct),
            unplaced=self.unplaced,
            avg_jct_s=_mean(self.jct),
            p95_jct_s=percentile(self.jct, 95),
            mean_queueing_s=_mean(self.queueing),
            makespan_s=last_end,
            utilization=self.busy / (slots * last_end) if last_end > 0 and slots else 0.0,
            wall_s=wall_s,
            long_slowdown=_mean(
                [self.slowdown[i] for i in _longest(self.trace) if i in self.slowdown]
            ),
            preemptions=self.pauses,
        )


def _longest(trace: Sequence[TraceJob]) -> list[int]:
    """The indexes of the longest `LONG_SHARE` of the trace's jobs (at least one)."""
    count = max(1, round(LONG_SHARE * len(trace)))
    return sorted(range(len(trace)), key=lambda i: -trace[i].duration_s)[:count]


def _job(job_id: str, t: TraceJob, now: float) -> Job:
    assert t.estimate_s is not None, "the trace needs estimates (trace.with_estimates)"
    return Job(
        id=job_id, scenario_name=t.name, scenario_text="", submitter="trace",
        priority=t.priority, needs=Needs(t.gpus, t.labels), estimate_s=t.estimate_s,
        state=JobState.QUEUED, submitted_at=now,
    )  # fmt: skip


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def compare(
    policies: Sequence[str],
    make: Callable[[str], Policy],
    trace: Sequence[TraceJob],
    followers: Sequence[FollowerInfo],
    *,
    pause_cost_s: float = 0.0,
) -> list[SimResult]:
    """Each named policy on the same trace and followers, with JCT ratios to FIFO.

    The FIFO reference is simulated too when not asked for, so every ratio has one; it is
    listed only if asked for."""
    names = list(dict.fromkeys(policies))
    runs = {
        name: simulate(make(name), trace, followers, pause_cost_s=pause_cost_s) for name in names
    }
    if FIFO_REFERENCE not in runs:
        reference = simulate(make(FIFO_REFERENCE), trace, followers)
    else:
        reference = runs[FIFO_REFERENCE]
    return [_with_ratio(runs[name], reference.avg_jct_s) for name in names]


def _with_ratio(result: SimResult, fifo_avg_jct_s: float) -> SimResult:
    ratio = fifo_avg_jct_s / result.avg_jct_s if result.avg_jct_s > 0 else None
    return replace(result, jct_ratio=ratio)
