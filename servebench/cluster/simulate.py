"""A discrete-event simulation of the leader's scheduling, driving the very policy objects
the leader uses, so a policy can be measured on 10,000 jobs before a team trusts it.

Two kinds of event, in a heap by time: a job arrives (the policy places it on a
follower's queue, `FollowerPool.enqueue`) and a job ends (its slot frees, the policy
learns its measured/estimate ratio, and the follower asks the policy for its next job).
A job runs for its trace duration divided by its follower's speed; the scheduler knows
only the estimate. Jobs that fit no follower are counted, not run.

Per policy: average and p95 job completion time (JCT: end − submission), mean queueing
delay (start − submission), makespan (last end − first submission), utilization (busy
slot-seconds over slots × makespan), and average JCT relative to `FIFO_REFERENCE`
(fifo-roundrobin): FIFO's average JCT over the policy's, so 1.6 means 1.6× faster.
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

_FINISH, _ARRIVE = 0, 1  # at equal times a slot frees before a new job is placed


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
    jct_ratio: float | None = None  # FIFO_REFERENCE's average JCT over this one's

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def simulate(
    policy: Policy, trace: Sequence[TraceJob], followers: Iterable[FollowerInfo]
) -> SimResult:
    """Run `trace` (with estimates, see `trace.with_estimates`) on `followers` under
    `policy`; the policy object keeps what it learned."""
    started_wall = time.perf_counter()
    followers = list(followers)
    pool = FollowerPool(followers)
    speed = {f.name: f.speed for f in followers}
    origin = min((t.submit_s for t in trace), default=0.0)
    events: list[tuple[float, int, int, str]] = []
    for i, t in enumerate(trace):
        events.append((t.submit_s - origin, _ARRIVE, i, ""))
    heapq.heapify(events)
    jobs: dict[str, Job] = {}
    start_at: dict[str, float] = {}
    jct: list[float] = []
    queueing: list[float] = []
    busy = 0.0
    unplaced = 0
    last_end = 0.0

    def run_next(name: str, now: float) -> None:
        state = pool[name]
        while state.free_slots > 0:
            job = policy.next_job(state, now)
            if job is None:
                return
            pool.start(name, job.id, now)
            start_at[job.id] = now
            duration = trace[int(job.id)].duration_s / speed[name]
            heapq.heappush(events, (now + duration, _FINISH, int(job.id), name))

    while events:
        now, kind, index, name = heapq.heappop(events)
        job_id = str(index)
        if kind == _ARRIVE:
            job = _job(job_id, trace[index], now)
            target = policy.place(job, pool, now)
            if target is None:
                unplaced += 1
                continue
            jobs[job_id] = job
            pool.enqueue(target, job, policy.estimate(job, target), now)
            run_next(target, now)
        else:
            job = pool.finish(name, job_id, now)
            measured = now - start_at[job_id]
            policy.observe(job, name, measured)
            busy += measured
            jct.append(now - job.submitted_at)
            queueing.append(start_at[job_id] - job.submitted_at)
            last_end = now
            run_next(name, now)
    slots = sum(f.slots for f in followers)
    return SimResult(
        policy=policy.name,
        jobs=len(jct),
        unplaced=unplaced,
        avg_jct_s=_mean(jct),
        p95_jct_s=percentile(jct, 95),
        mean_queueing_s=_mean(queueing),
        makespan_s=last_end,
        utilization=busy / (slots * last_end) if last_end > 0 and slots else 0.0,
        wall_s=time.perf_counter() - started_wall,
    )


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
) -> list[SimResult]:
    """Each named policy on the same trace and followers, with JCT ratios to FIFO.

    The FIFO reference is simulated too when not asked for, so every ratio has one; it is
    listed only if asked for."""
    names = list(dict.fromkeys(policies))
    runs = {name: simulate(make(name), trace, followers) for name in names}
    if FIFO_REFERENCE not in runs:
        reference = simulate(make(FIFO_REFERENCE), trace, followers)
    else:
        reference = runs[FIFO_REFERENCE]
    return [_with_ratio(runs[name], reference.avg_jct_s) for name in names]


def _with_ratio(result: SimResult, fifo_avg_jct_s: float) -> SimResult:
    ratio = fifo_avg_jct_s / result.avg_jct_s if result.avg_jct_s > 0 else None
    return replace(result, jct_ratio=ratio)
