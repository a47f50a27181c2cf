"""Scheduling policies: where a job waits (tier 1) and which waiting job runs next (tier 2).

A policy is a pure object: no I/O and no clock (`now` is passed in), so the leader and
the simulator drive the very same objects, and a test can replay any situation.

The leader (and the simulator) keeps one queue per follower in a `FollowerPool`: when a
job arrives or is re-queued, `policy.place` picks a follower and the job joins that
follower's queue (`pool.enqueue`); when one of the follower's slots is free,
`policy.next_job` picks which of its queued jobs runs (`pool.start`); when it ends,
`pool.finish` and `policy.observe` (learning). Every change to a follower goes through
the pool, which keeps per-resource-class indexes so that placing a job costs
O(classes × log followers), not a scan of every follower: 10,000 jobs on 1,000 followers
simulate in well under a second per policy.

Policies (`POLICIES`, `make_policy`):
- `two-tier` (InferBench's): tier 1 places a job, among the followers whose GPUs and
  labels fit, on the one with the least queued estimated work (its queue's corrected
  estimates plus what remains of its running jobs, `remaining_s`, per slot); tier 2 runs
  the shortest job first, with aging: a job's key is its corrected estimate minus
  `aging_rate` × the time it has waited, and a job that has waited `max_wait_s` goes
  ahead of every job that has not (oldest first). So no job waits longer than
  `max_wait_s` behind shorter ones that came after it (among jobs of one priority: a
  higher `priority` always goes first).
- `two-tier-preemptive`: two-tier whose tier 2 is shortest *remaining* time first: when
  a follower has no free slot and the job its queue would run next is much shorter than
  what remains of a running one (`preempt`: remaining > `preempt_ratio` × the waiting
  job's estimate + `pause_cost_s`), the running job is paused at its next trial boundary
  and goes back to the queue with its partial result, to resume later (on any follower)
  where it stopped. The aging bound holds for pauses too: a job that has waited
  `max_wait_s` since its submission is never paused again, and goes first.
- `fifo-roundrobin`: the next fitting follower in turn; first come, first served.
- `fifo-leastloaded`: the fitting follower with the fewest jobs (queued and running, per
  slot); first come, first served.

Every policy learns: after a job, log(measured / estimate) joins an exponentially
weighted average per follower and per (follower, scenario name); a later estimate for
that follower is the plan's estimate times the learned factor (the scenario's own if that
follower has run it, else the follower's). Only two-tier acts on estimates. The leader
keeps the samples in its store (`JobStore.record_ratio`) and a restarted one replays them
(`policy.learner.observe(r.follower, r.key, r.measured_s, r.estimate_s)` for each of
`store.ratios()`), so what was learned survives a restart. A job that has already run
part of its work (`Job.run_s`: paused and re-queued) is estimated by what remains of it
(`remaining_s` of the corrected estimate and its run time so far).
"""

from __future__ import annotations

import heapq
import inspect
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from servebench.cluster.job import FollowerInfo, Job, Needs

_ClassKey = tuple[int, frozenset[tuple[str, str]]]


#: A running job past this share of its estimate is assumed to need at least this share
#: of the time it has run so far again: job durations are heavy-tailed, so one that has
#: overrun its estimate tends to run on, not to be "almost done". Without it a follower
#: stuck in a long overrun looks idle to tier 1 and collects new jobs.
OVERRUN_SHARE = 0.5


def remaining_s(estimate_s: float, elapsed_s: float) -> float:
    """Expected seconds left of a running job: its estimate minus what has run, but never
    less than OVERRUN_SHARE of what has run (see OVERRUN_SHARE)."""
    return max(estimate_s - elapsed_s, OVERRUN_SHARE * elapsed_s)


@dataclass
class FollowerState:
    """One follower's queue and running jobs, as the scheduler sees them.

    `queued_work` is the sum of the corrected estimates of `queue`; `busy_until_estimate`
    is when its running jobs should end, spread over its slots, as of the last change.
    Change it only through `FollowerPool`.
    """

    info: FollowerInfo
    queue: list[Job] = field(default_factory=list)
    running: list[Job] = field(default_factory=list)
    busy_until_estimate: float = 0.0
    queued_work: float = 0.0
    order: int = 0  # when it joined the pool: the tie-break between equal followers
    version: int = 0  # bumped on each change; index entries of older versions are stale
    estimates: dict[str, float] = field(default_factory=dict)  # job id → counted estimate
    starts: dict[str, float] = field(default_factory=dict)  # running job id → start time
    pausing: set[str] = field(default_factory=set)  # running jobs asked to pause

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def free_slots(self) -> int:
        return self.info.slots - len(self.running)

    def load(self, now: float) -> float:
        """Estimated seconds of work ahead of a job placed here now, per slot: its queue
        plus what remains of its running jobs (`remaining_s`)."""
        running = sum(
            remaining_s(self.estimates[job_id], now - start)
            for job_id, start in self.starts.items()
        )
        return (self.queued_work + running) / self.info.slots

    def jobs_per_slot(self) -> float:
        return (len(self.queue) + len(self.running)) / self.info.slots


class _ClassIndex:
    """The followers of one resource class (same GPUs and labels), indexed two ways.

    By work: followers running nothing (`idle`, keyed by their queued work per slot, which
    stays put) and the others (`busy`, keyed by `now + load(now)` as of their last
    change: when they should be through their work). A busy follower's key only grows
    with time (an overrun adds to it), so a stored key is a lower bound: the top is
    re-keyed until its stored key is its true one. By jobs: (queued + running) per slot.
    Entries are never updated in place: a change pushes new ones, and older ones (lower
    version) are dropped when met.
    """

    def __init__(self) -> None:
        self.members: dict[str, FollowerState] = {}
        self.idle: list[tuple[float, int, int, str]] = []
        self.busy: list[tuple[float, int, int, str]] = []
        self.jobs: list[tuple[float, int, int, str]] = []

    def push(self, state: FollowerState, now: float) -> None:
        entry = (state.order, state.version, state.name)
        if state.running:
            heapq.heappush(self.busy, (now + state.load(now), *entry))
        else:
            heapq.heappush(self.idle, (state.queued_work / state.info.slots, *entry))
        heapq.heappush(self.jobs, (state.jobs_per_slot(), *entry))
        if len(self.jobs) > 4 * len(self.members) + 64:
            self._compact(now)

    def _current(self, version: int, name: str) -> FollowerState | None:
        state = self.members.get(name)
        return state if state is not None and state.version == version else None

    def _compact(self, now: float) -> None:
        """Rebuild the heaps from the members (stale entries would otherwise pile up in a
        leader that runs for weeks)."""
        members = list(self.members.values())
        self.idle, self.busy, self.jobs = [], [], []
        for state in members:
            self.push(state, now)

    def least_work(self, now: float) -> tuple[float, int, str] | None:
        """(load, order, name) of the member with the least work ahead, or None."""
        while self.idle and self._current(self.idle[0][2], self.idle[0][3]) is None:
            heapq.heappop(self.idle)
        while self.busy:
            key, order, version, name = self.busy[0]
            state = self._current(version, name)
            if state is None:
                heapq.heappop(self.busy)
                continue
            true = now + state.load(now)
            if true <= key * (1 + 1e-12) + 1e-9:
                break
            heapq.heapreplace(self.busy, (true, order, version, name))
        best = None
        if self.idle:
            best = (self.idle[0][0], self.idle[0][1], self.idle[0][3])
        if self.busy:
            key, order, _, name = self.busy[0]
            candidate = (key - now, order, name)
            if best is None or candidate[0] < best[0]:  # equal work: the idle one
                best = candidate
        return best

    def fewest_jobs(self) -> tuple[float, int, str] | None:
        while self.jobs and self._current(self.jobs[0][2], self.jobs[0][3]) is None:
            heapq.heappop(self.jobs)
        if not self.jobs:
            return None
        count, order, _, name = self.jobs[0]
        return count, order, name


def _class_key(gpus: int, labels: Iterable[tuple[str, str]]) -> _ClassKey:
    return gpus, frozenset(labels)


class FollowerPool:
    """The followers, their queues and running jobs; what policies place jobs into.

    Iterating yields FollowerStates in the order they joined; `pool[name]` is one.
    """

    def __init__(self, followers: Iterable[FollowerInfo] = ()) -> None:
        self._states: dict[str, FollowerState] = {}
        self._classes: dict[_ClassKey, _ClassIndex] = {}
        self._fitting: dict[_ClassKey, list[_ClassIndex]] = {}
        self._holder: dict[str, str] = {}  # job id → follower name
        self._joined = 0
        self.order: list[str] = []  # names in joining order (round robin walks it)
        for info in followers:
            self.add(info)

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[FollowerState]:
        return iter(self._states.values())

    def __contains__(self, name: object) -> bool:
        return name in self._states

    def __getitem__(self, name: str) -> FollowerState:
        return self._states[name]

    def add(self, info: FollowerInfo, now: float = 0.0) -> FollowerState:
        if info.name in self._states:
            raise ValueError(f"follower {info.name!r} is already in the pool")
        if info.slots < 1:
            raise ValueError(f"follower {info.name!r}: slots must be >= 1, got {info.slots}")
        state = FollowerState(info, busy_until_estimate=now, order=self._joined)
        self._joined += 1
        self._states[info.name] = state
        self.order.append(info.name)
        key = _class_key(info.gpus, info.labels.items())
        if key not in self._classes:
            self._classes[key] = _ClassIndex()
            self._fitting.clear()  # a new class may fit needs seen before
        self._classes[key].members[info.name] = state
        self._classes[key].push(state, now)
        return state

    def remove(self, name: str) -> list[Job]:
        """Take a follower out (it left or died); returns its queued and running jobs,
        which the caller re-queues."""
        state = self._states.pop(name)
        self.order.remove(name)
        key = _class_key(state.info.gpus, state.info.labels.items())
        del self._classes[key].members[name]
        jobs = [*state.running, *state.queue]
        for job in jobs:
            del self._holder[job.id]
        return jobs

    def holder(self, job_id: str) -> str | None:
        """The follower whose queue or slot holds the job, if any."""
        return self._holder.get(job_id)

    def enqueue(self, name: str, job: Job, estimate_s: float, now: float) -> None:
        """Put a job on a follower's queue, counting `estimate_s` as its queued work."""
        if job.id in self._holder:
            raise ValueError(f"job {job.id} is already held by {self._holder[job.id]}")
        state = self._states[name]
        state.queue.append(job)
        state.estimates[job.id] = estimate_s
        state.queued_work += estimate_s
        self._holder[job.id] = name
        self._changed(state, now)

    def dequeue(self, name: str, job_id: str, now: float) -> Job:
        """Take a job off a follower's queue (cancelled, or placed again elsewhere)."""
        state = self._states[name]
        job = self._take(state.queue, job_id)
        state.queued_work = max(0.0, state.queued_work - state.estimates.pop(job_id))
        del self._holder[job_id]
        self._changed(state, now)
        return job

    def start(self, name: str, job_id: str, now: float) -> Job:
        """Move a queued job to one of the follower's slots."""
        state = self._states[name]
        if state.free_slots < 1:
            raise ValueError(f"follower {name} has no free slot for job {job_id}")
        job = self._take(state.queue, job_id)
        estimate = state.estimates[job_id]
        state.queued_work = max(0.0, state.queued_work - estimate)
        state.running.append(job)
        state.starts[job_id] = now
        self._changed(state, now)
        return job

    def finish(self, name: str, job_id: str, now: float) -> Job:
        """A running job ended (done, failed, cancelled or lost): free its slot."""
        state = self._states[name]
        job = self._take(state.running, job_id)
        del state.starts[job_id], state.estimates[job_id]
        state.pausing.discard(job_id)
        del self._holder[job_id]
        self._changed(state, now)
        return job

    def pausing(self, name: str, job_id: str) -> None:
        """Note that a running job was asked to pause (it runs on until its trial ends;
        no other job on that follower is paused meanwhile)."""
        state = self._states[name]
        if job_id not in state.starts:
            raise KeyError(job_id)
        state.pausing.add(job_id)

    @staticmethod
    def _take(jobs: list[Job], job_id: str) -> Job:
        for i, job in enumerate(jobs):
            if job.id == job_id:
                return jobs.pop(i)
        raise KeyError(job_id)

    def _changed(self, state: FollowerState, now: float) -> None:
        state.busy_until_estimate = now + state.load(now) - state.queued_work / state.info.slots
        if not state.queue and not state.running:
            state.queued_work = 0.0  # no float crumbs from many += and -=
        state.version += 1
        key = _class_key(state.info.gpus, state.info.labels.items())
        self._classes[key].push(state, now)

    def fitting(self, needs: Needs) -> list[_ClassIndex]:
        """The resource classes whose followers meet `needs`."""
        key = _class_key(needs.gpus, needs.labels.items())
        found = self._fitting.get(key)
        if found is None:
            found = [
                index
                for (gpus, labels), index in self._classes.items()
                if needs.fits(FollowerInfo("", gpus, dict(labels)))
            ]
            self._fitting[key] = found
        return found

    def least_work(self, needs: Needs, now: float) -> str | None:
        """The fitting follower with the least estimated work ahead (ties: earliest joined)."""
        found = [c.least_work(now) for c in self.fitting(needs)]
        best = min((f for f in found if f is not None), default=None)
        return best[2] if best else None

    def fewest_jobs(self, needs: Needs) -> str | None:
        """The fitting follower with the fewest jobs per slot (ties: earliest joined)."""
        found = [c.fewest_jobs() for c in self.fitting(needs)]
        best = min((f for f in found if f is not None), default=None)
        return best[2] if best else None


class Learner:
    """Measured/estimate ratios per follower and per (follower, scenario name).

    An exponentially weighted average of the log ratio: a follower twice as slow as the
    plan assumes converges to a factor of 2 in a few jobs, and one wild run (a stalled
    server) moves it by `alpha` of its log, not all the way.
    """

    def __init__(self, alpha: float = 0.3) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._follower: dict[str, float] = {}
        self._scenario: dict[tuple[str, str], float] = {}

    def observe(self, follower: str, key: str, measured_s: float, estimate_s: float) -> None:
        if measured_s <= 0 or estimate_s <= 0 or not math.isfinite(measured_s / estimate_s):
            return  # nothing to learn from a zero or unknown duration
        ratio = math.log(measured_s / estimate_s)
        self._follower[follower] = self._blend(self._follower.get(follower), ratio)
        pair = (follower, key)
        self._scenario[pair] = self._blend(self._scenario.get(pair), ratio)

    def _blend(self, old: float | None, ratio: float) -> float:
        return ratio if old is None else old + self.alpha * (ratio - old)

    def factor(self, follower: str, key: str) -> float:
        log = self._scenario.get((follower, key), self._follower.get(follower, 0.0))
        return math.exp(log)


class Policy(Protocol):
    name: str
    learner: Learner

    def place(self, job: Job, pool: FollowerPool, now: float) -> str | None:
        """Tier 1: the follower whose queue the job joins, or None if none fits."""
        ...

    def next_job(self, follower: FollowerState, now: float) -> Job | None:
        """Tier 2: which of the follower's queued jobs runs next (None: its queue is empty)."""
        ...

    def observe(self, job: Job, follower: str, measured_s: float) -> None:
        """Learn from a finished job (its plan estimate against what it took)."""
        ...

    def estimate(self, job: Job, follower: str) -> float:
        """The job's estimate corrected by what this follower has taught (what remains
        of it, for a job that ran part of its work)."""
        ...

    def preempt(self, follower: FollowerState, now: float) -> Job | None:
        """Which running job of this follower to pause at its next trial boundary for the
        job its queue would run next, or None (the non-preemptive policies: always)."""
        ...


class _Learning:
    """What every policy shares: the learned estimates."""

    name = ""

    def __init__(self, alpha: float = 0.3) -> None:
        self.learner = Learner(alpha)

    def observe(self, job: Job, follower: str, measured_s: float) -> None:
        self.learner.observe(follower, job.key, measured_s, job.estimate_s)

    def estimate(self, job: Job, follower: str) -> float:
        corrected = job.estimate_s * self.learner.factor(follower, job.key)
        return remaining_s(corrected, job.run_s) if job.run_s > 0 else corrected

    def preempt(self, follower: FollowerState, now: float) -> Job | None:
        return None


def _fifo_key(job: Job) -> tuple[int, float, str]:
    return -job.priority, job.submitted_at, job.id


class TwoTier(_Learning):
    """Least queued work across followers, shortest job first within one (with aging)."""

    name = "two-tier"

    def __init__(
        self, max_wait_s: float = 3600.0, aging_rate: float = 0.1, alpha: float = 0.3
    ) -> None:
        super().__init__(alpha)
        if not max_wait_s > 0:
            raise ValueError(f"max_wait_s must be > 0, got {max_wait_s}")
        if not aging_rate >= 0:
            raise ValueError(f"aging_rate must be >= 0, got {aging_rate}")
        self.max_wait_s = max_wait_s
        self.aging_rate = aging_rate

    def place(self, job: Job, pool: FollowerPool, now: float) -> str | None:
        return pool.least_work(job.needs, now)

    def next_job(self, follower: FollowerState, now: float) -> Job | None:
        if not follower.queue:
            return None
        return min(follower.queue, key=lambda job: self._key(job, follower, now))

    def _key(self, job: Job, follower: FollowerState, now: float) -> tuple[Any, ...]:
        waited = now - job.submitted_at
        if waited >= self.max_wait_s:
            return -job.priority, 0, job.submitted_at, job.id  # overdue: oldest first
        aged = follower.estimates.get(job.id, job.estimate_s) - self.aging_rate * waited
        return -job.priority, 1, aged, job.submitted_at, job.id


#: What pausing a job at a trial boundary and resuming it elsewhere costs, seconds: the
#: stop, the archive's trip, the new run's start (re-export of the models, server start;
#: its cold start is not re-measured). Measured by benchmarks/cluster_pause.py on the
#: 2-core development machine, nothing else running, since a paused run writes no report:
#: 12.6 s (11.7-13.3) for a job that starts its own Triton, 3.5 s for one against a
#: running server (docs/benchmarks.md, "Cluster pause and resume cost"); a pause must save
#: more than this.
PAUSE_COST_S = 13.0


class TwoTierPreemptive(TwoTier):
    """Two-tier, with shortest remaining time first: a running job much longer than a
    waiting one is paused at its next trial boundary (see the module docstring)."""

    name = "two-tier-preemptive"

    def __init__(
        self,
        max_wait_s: float = 3600.0,
        aging_rate: float = 0.1,
        alpha: float = 0.3,
        preempt_ratio: float = 2.0,
        pause_cost_s: float = PAUSE_COST_S,
    ) -> None:
        super().__init__(max_wait_s, aging_rate, alpha)
        if not preempt_ratio >= 1:
            raise ValueError(f"preempt_ratio must be >= 1, got {preempt_ratio}")
        if not pause_cost_s >= 0:
            raise ValueError(f"pause_cost_s must be >= 0, got {pause_cost_s}")
        self.preempt_ratio = preempt_ratio
        self.pause_cost_s = pause_cost_s

    def preempt(self, follower: FollowerState, now: float) -> Job | None:
        """The running job with the most estimated time left, if that is more than
        `preempt_ratio` × the estimate of the job this follower would run next plus
        `pause_cost_s`. Never a job of a higher priority than the waiting one, never one
        that has waited `max_wait_s` since its submission (the aging bound), and never
        while another of the follower's jobs is pausing (one pause frees one slot)."""
        if follower.free_slots > 0 or follower.pausing:
            return None
        waiting = self.next_job(follower, now)
        if waiting is None:
            return None
        candidates = [
            job
            for job in follower.running
            if job.priority <= waiting.priority and now - job.submitted_at < self.max_wait_s
        ]
        if not candidates:
            return None

        # Both sides with what the follower has taught so far (the estimates counted at
        # enqueueing may predate it): a factor learned since must not tip the balance.
        def left(job: Job) -> float:
            return remaining_s(self.estimate(job, follower.name), now - follower.starts[job.id])

        victim = max(candidates, key=left)
        needed = self.preempt_ratio * self.estimate(waiting, follower.name) + self.pause_cost_s
        return victim if left(victim) > needed else None


class FifoRoundRobin(_Learning):
    """Each job to the next fitting follower in turn; each queue first come, first served."""

    name = "fifo-roundrobin"

    def __init__(self, alpha: float = 0.3) -> None:
        super().__init__(alpha)
        self._next = 0

    def place(self, job: Job, pool: FollowerPool, now: float) -> str | None:
        names = pool.order
        for step in range(len(names)):
            i = (self._next + step) % len(names)
            if job.needs.fits(pool[names[i]].info):
                self._next = i + 1
                return names[i]
        return None

    def next_job(self, follower: FollowerState, now: float) -> Job | None:
        return min(follower.queue, key=_fifo_key, default=None)


class FifoLeastLoaded(_Learning):
    """Each job to the fitting follower with the fewest jobs; first come, first served."""

    name = "fifo-leastloaded"

    def place(self, job: Job, pool: FollowerPool, now: float) -> str | None:
        return pool.fewest_jobs(job.needs)

    def next_job(self, follower: FollowerState, now: float) -> Job | None:
        return min(follower.queue, key=_fifo_key, default=None)


POLICIES: dict[str, Callable[..., Policy]] = {
    TwoTier.name: TwoTier,
    TwoTierPreemptive.name: TwoTierPreemptive,
    FifoRoundRobin.name: FifoRoundRobin,
    FifoLeastLoaded.name: FifoLeastLoaded,
}

#: The baseline the simulator's JCT ratios are measured against.
FIFO_REFERENCE = FifoRoundRobin.name


def make_policy(name: str, **options: float) -> Policy:
    """The named policy with `options` (two-tier: max_wait_s, aging_rate;
    two-tier-preemptive: those and preempt_ratio, pause_cost_s; all: alpha).

    ValueError naming the choices for an unknown name, or the options a policy takes for
    one it does not."""
    takes = options_of(name)
    if unknown := sorted(set(options) - set(takes)):
        raise ValueError(f"policy {name} takes {', '.join(takes)}, not {', '.join(unknown)}")
    return POLICIES[name](**options)


def options_of(name: str) -> list[str]:
    """The options the named policy takes (ValueError naming the choices for an unknown
    name): what a command line passes on to each policy it makes."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r} (choices: {', '.join(POLICIES)})")
    return [p for p in inspect.signature(factory).parameters if p != "self"]
