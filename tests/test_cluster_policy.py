"""Scheduling policies: resource fit, least-queued placement, SJF with an aging bound,
learned estimates, and the FIFO baselines doing what their names say."""

import random

import pytest

from servebench.cluster.job import FollowerInfo, Job, JobState, Needs
from servebench.cluster.policy import (
    POLICIES,
    FollowerPool,
    Learner,
    make_policy,
)


def job(
    i: int, estimate: float, *, at: float = 0.0, gpus: int = 0, labels=None, priority: int = 0
) -> Job:
    return Job(
        id=f"j{i}", scenario_name="s", scenario_text="", submitter="t", priority=priority,
        needs=Needs(gpus, labels or {}), estimate_s=estimate, state=JobState.QUEUED,
        submitted_at=at,
    )  # fmt: skip


def place(policy, pool: FollowerPool, j: Job, now: float = 0.0) -> str | None:
    name = policy.place(j, pool, now)
    if name is not None:
        pool.enqueue(name, j, policy.estimate(j, name), now)
    return name


MIXED = [
    FollowerInfo("cpu-a", labels={"zone": "a"}),
    FollowerInfo("gpu-a", gpus=1, labels={"zone": "a"}),
    FollowerInfo("cpu-b", labels={"zone": "b"}),
    FollowerInfo("gpu2-b", gpus=2, labels={"zone": "b"}),
]


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_job_only_goes_where_its_gpus_and_labels_fit(name):
    policy, pool = make_policy(name), FollowerPool(MIXED)
    rng = random.Random(1)
    for i in range(200):
        needs = Needs(rng.choice([0, 0, 1, 2]), rng.choice([{}, {"zone": "a"}, {"zone": "b"}]))
        j = job(i, rng.uniform(1, 100), gpus=needs.gpus, labels=needs.labels)
        where = place(policy, pool, j)
        fitting = [f.name for f in MIXED if needs.fits(f)]
        if fitting:
            assert where in fitting
        else:  # 2 GPUs in zone a: nobody
            assert where is None
    assert len(pool["gpu2-b"].queue) > 0 and len(pool["cpu-a"].queue) > 0


@pytest.mark.parametrize("name", list(POLICIES))
def test_no_follower_fits_means_none(name):
    pool = FollowerPool([FollowerInfo("cpu")])
    assert make_policy(name).place(job(1, 10, gpus=1), pool, 0.0) is None
    assert make_policy(name).place(job(1, 10), FollowerPool(), 0.0) is None


def test_two_tier_places_on_the_least_queued_estimated_work():
    policy = make_policy("two-tier")
    pool = FollowerPool([FollowerInfo("a"), FollowerInfo("b"), FollowerInfo("c")])
    pool.enqueue("a", job(1, 100), 100, 0)
    pool.enqueue("b", job(2, 30), 30, 0)
    pool.enqueue("b", job(3, 30), 30, 0)
    pool.enqueue("c", job(4, 70), 70, 0)
    # b has two jobs (a count-based balancer would avoid it) but the least work: 60 s
    assert policy.place(job(5, 1), pool, 0) == "b"
    # what remains of a running job counts: c starts its 70 s job at t=0; at t=20, 50 s
    # remain on c against b's 60 s queued
    pool.start("c", "j4", 0)
    assert pool["c"].load(20) == pytest.approx(50)
    assert policy.place(job(6, 1), pool, 20) == "c"
    # a job past its estimate is not "almost done": it is expected to run on for half
    # the time it has run (heavy tails), 40 s at t=80, 65 s at t=130 (more than b's 60)
    assert pool["c"].load(80) == pytest.approx(40)
    assert policy.place(job(7, 1), pool, 80) == "c"
    assert pool["c"].load(130) == pytest.approx(65)
    assert policy.place(job(8, 1), pool, 130) == "b"


def test_two_tier_counts_the_learned_estimate_of_each_follower():
    policy = make_policy("two-tier")
    pool = FollowerPool([FollowerInfo("slow"), FollowerInfo("fast")])
    for _ in range(5):  # "slow" takes 4x the plan's estimate
        policy.observe(job(0, 10), "slow", 40)
        policy.observe(job(0, 10), "fast", 10)
    place(policy, pool, job(1, 10))
    place(policy, pool, job(2, 10))
    assert pool["slow"].queued_work == pytest.approx(40)
    assert pool["fast"].queued_work == pytest.approx(10)
    # fast now holds 10 s, slow 40 s: the next two go to fast before slow gets another
    assert [place(policy, pool, job(i, 10)) for i in (3, 4)] == ["fast", "fast"]


def test_the_pool_index_agrees_with_a_scan_of_every_follower():
    """The per-class heaps give the same least load as looking at every follower."""
    rng = random.Random(7)
    infos = [
        FollowerInfo(f"f{i}", gpus=rng.choice([0, 1]), slots=rng.choice([1, 1, 2]))
        for i in range(30)
    ]
    pool = FollowerPool(infos)
    now, n = 0.0, 0
    for _ in range(2000):
        now += rng.expovariate(1.0)
        state = rng.choice(list(pool))
        action = rng.random()
        if action < 0.5:
            n += 1
            pool.enqueue(state.name, job(n, 1), rng.uniform(0.5, 30), now)
        elif action < 0.8 and state.queue and state.free_slots:
            pool.start(state.name, rng.choice(state.queue).id, now)
        elif state.running:
            pool.finish(state.name, rng.choice(state.running).id, now)
        for needs in (Needs(0), Needs(1)):
            fitting = [s for s in pool if needs.fits(s.info)]
            by_work = pool[pool.least_work(needs, now)]
            assert by_work.load(now) == pytest.approx(min(s.load(now) for s in fitting))
            by_jobs = pool[pool.fewest_jobs(needs)]
            assert by_jobs.jobs_per_slot() == min(s.jobs_per_slot() for s in fitting)


def test_two_tier_runs_the_shortest_job_first():
    policy = make_policy("two-tier")
    pool = FollowerPool([FollowerInfo("a")])
    for i, estimate in enumerate([50, 5, 300, 20, 1]):
        pool.enqueue("a", job(i, estimate, at=i), estimate, i)
    order = []
    while pool["a"].queue:
        nxt = policy.next_job(pool["a"], 10)
        order.append(nxt.estimate_s)
        pool.start("a", nxt.id, 10)
        pool.finish("a", nxt.id, 10)
    assert order == [1, 5, 20, 50, 300]


def test_a_higher_priority_goes_first_in_every_policy():
    for name in POLICIES:
        policy = make_policy(name)
        pool = FollowerPool([FollowerInfo("a")])
        pool.enqueue("a", job(1, 1, at=0), 1, 0)
        pool.enqueue("a", job(2, 99, at=5, priority=1), 99, 5)
        assert policy.next_job(pool["a"], 10).id == "j2", name


def serve_one_follower(policy, arrivals: list[Job], horizon: float) -> dict[str, float]:
    """Drive one follower: jobs arrive at their submitted_at and run for their estimate.
    Returns each started job's start time."""
    pool = FollowerPool([FollowerInfo("a")])
    pending = sorted(arrivals, key=lambda j: j.submitted_at)
    started: dict[str, float] = {}
    now, busy_until, running = 0.0, 0.0, None
    while now <= horizon:
        while pending and pending[0].submitted_at <= now:
            j = pending.pop(0)
            pool.enqueue("a", j, j.estimate_s, j.submitted_at)
        if running is not None and busy_until <= now:
            pool.finish("a", running.id, now)
            running = None
        if running is None and (nxt := policy.next_job(pool["a"], now)) is not None:
            running = pool.start("a", nxt.id, now)
            started[nxt.id] = now
            busy_until = now + nxt.estimate_s
        now = min(busy_until if running else float("inf"),
                  pending[0].submitted_at if pending else float("inf"))  # fmt: skip
        if now == float("inf"):
            break
    return started


def test_aging_bound_no_job_waits_past_max_wait_behind_shorter_ones():
    # A 5 s job arrives every 5 s, forever, and a 100 s job just after the first: a strict
    # shortest-job-first always has a shorter job at hand and never runs the long one.
    stream = [job(0, 100, at=0.5)] + [job(i, 5, at=5.0 * (i - 1)) for i in range(1, 400)]
    strict = make_policy("two-tier", max_wait_s=1e9, aging_rate=0)
    assert "j0" not in serve_one_follower(strict, stream, 1900)  # what the bound is for
    bound = 300.0
    started = serve_one_follower(
        make_policy("two-tier", max_wait_s=bound, aging_rate=0), stream, 1900
    )
    # it waits at most the bound plus the one short job already running when it is due
    assert 0.5 + bound <= started["j0"] <= 0.5 + bound + 5
    # and no job waits past the bound plus that long job
    waits = [started[j.id] - j.submitted_at for j in stream if j.id in started]
    assert max(waits) <= bound + 100


def test_aging_rate_lets_a_long_job_overtake_fresher_short_ones():
    stream = [job(0, 100, at=0.5)] + [job(i, 5, at=5.0 * (i - 1)) for i in range(1, 400)]
    # key = estimate - 0.5 × waited: the 100 s job beats a fresh 5 s one once it has
    # waited 190 s, at the next decision (every 5 s)
    aging = make_policy("two-tier", max_wait_s=1e9, aging_rate=0.5)
    started = serve_one_follower(aging, stream, 1900)
    assert 0.5 + 190 <= started["j0"] <= 0.5 + 190 + 5


def test_learning_corrects_estimates_per_follower_and_scenario():
    learner = Learner(alpha=0.5)
    assert learner.factor("a", "s") == 1.0
    for _ in range(12):
        learner.observe("a", "sweep", 20, 10)  # follower a: 2x slower than planned
    assert learner.factor("a", "sweep") == pytest.approx(2.0, rel=1e-3)
    assert learner.factor("a", "unseen") == pytest.approx(2.0, rel=1e-3)  # the follower's
    assert learner.factor("b", "sweep") == 1.0  # another follower learned nothing
    learner.observe("a", "search", 5, 10)
    assert learner.factor("a", "search") == pytest.approx(0.5)  # its own scenario first
    learner.observe("a", "sweep", 0, 10)  # nothing to learn from a zero duration
    assert learner.factor("a", "sweep") == pytest.approx(2.0, rel=1e-3)

    policy = make_policy("two-tier")
    j = job(1, 100)
    for _ in range(10):
        policy.observe(j, "a", 300)
    assert policy.estimate(j, "a") == pytest.approx(300, rel=1e-2)
    assert policy.estimate(j, "b") == 100


def test_one_wild_run_moves_the_estimate_only_part_way():
    learner = Learner(alpha=0.3)
    for _ in range(10):
        learner.observe("a", "s", 10, 10)
    learner.observe("a", "s", 1000, 10)  # a stalled run, 100x
    assert 1.0 < learner.factor("a", "s") < 100**0.3 * 1.01


def test_fifo_roundrobin_takes_fitting_followers_in_turn_and_serves_in_arrival_order():
    policy, pool = make_policy("fifo-roundrobin"), FollowerPool(MIXED)
    assert [place(policy, pool, job(i, 1)) for i in range(5)] == [
        "cpu-a", "gpu-a", "cpu-b", "gpu2-b", "cpu-a",
    ]  # fmt: skip
    assert [place(policy, pool, job(10 + i, 1, gpus=1)) for i in range(3)] == [
        "gpu-a", "gpu2-b", "gpu-a",
    ]  # fmt: skip
    single = FollowerPool([FollowerInfo("a")])
    for i, estimate in enumerate([50, 5, 300]):
        single.enqueue("a", job(i, estimate, at=10 - i), estimate, 0)
    assert policy.next_job(single["a"], 20).id == "j2"  # the earliest submitted


def test_fifo_leastloaded_takes_the_follower_with_fewest_jobs():
    policy = make_policy("fifo-leastloaded")
    pool = FollowerPool([FollowerInfo("a"), FollowerInfo("b"), FollowerInfo("c", slots=2)])
    pool.enqueue("a", job(1, 1000), 1000, 0)
    pool.enqueue("b", job(2, 1), 1, 0)
    pool.enqueue("b", job(3, 1), 1, 0)
    # a holds 1000 s in one job, b 2 s in two, c (2 slots) nothing: c (0 jobs per slot),
    # c (0.5), then a (1 job, and earlier than c's 2 over 2 slots; work does not matter)
    assert [place(policy, pool, job(i, 1)) for i in (4, 5, 6)] == ["c", "c", "a"]


def test_make_policy_refuses_an_unknown_name_or_option():
    with pytest.raises(
        ValueError, match=r"unknown policy 'sjf'.*two-tier, two-tier-preemptive, fifo"
    ):
        make_policy("sjf")
    with pytest.raises(ValueError, match="fifo-roundrobin takes alpha, not max_wait_s"):
        make_policy("fifo-roundrobin", max_wait_s=10)
    with pytest.raises(ValueError, match="max_wait_s must be > 0"):
        make_policy("two-tier", max_wait_s=0)
    with pytest.raises(ValueError, match="preempt_ratio must be >= 1"):
        make_policy("two-tier-preemptive", preempt_ratio=0.5)
    with pytest.raises(ValueError, match=r"two-tier takes .*, not pause_cost_s"):
        make_policy("two-tier", pause_cost_s=1)
    assert make_policy("two-tier", max_wait_s=60, aging_rate=0.2).max_wait_s == 60


def test_a_removed_follower_gives_back_its_jobs_and_gets_no_more():
    policy = make_policy("two-tier")
    pool = FollowerPool([FollowerInfo("a"), FollowerInfo("b")])
    place(policy, pool, job(1, 10))
    place(policy, pool, job(2, 10))
    pool.start("a", "j1", 0)
    assert [j.id for j in pool.remove("a")] == ["j1"]
    assert pool.holder("j1") is None and pool.holder("j2") == "b"
    assert all(place(policy, pool, job(i, 1)) == "b" for i in range(3, 6))


# ----------------------------------------------------------------------------- preemption


def full_follower(policy, running: Job, started: float = 0.0) -> FollowerPool:
    """One follower of one slot, running `running` since `started`."""
    pool = FollowerPool([FollowerInfo("a")])
    place(policy, pool, running, started)
    pool.start("a", running.id, started)
    return pool


def test_preemptive_pauses_a_long_running_job_for_a_much_shorter_one():
    policy = make_policy("two-tier-preemptive", preempt_ratio=2.0, pause_cost_s=10.0)
    pool = full_follower(policy, job(1, 1000.0))
    place(policy, pool, job(2, 50.0, at=100.0), 100.0)
    # 900 s left > 2 × 50 + 10: pause the long one.
    assert policy.preempt(pool["a"], 100.0).id == "j1"
    # Not a second time while it is pausing (one pause frees the one slot).
    pool.pausing("a", "j1")
    assert policy.preempt(pool["a"], 100.0) is None


def test_preemptive_leaves_a_job_alone_when_the_gain_is_small():
    policy = make_policy("two-tier-preemptive", preempt_ratio=2.0, pause_cost_s=10.0)
    pool = full_follower(policy, job(1, 1000.0))
    place(policy, pool, job(2, 450.0, at=100.0), 100.0)
    assert policy.preempt(pool["a"], 100.0) is None  # 900 s left < 2 × 450 + 10
    place(policy, pool, job(3, 300.0, at=500.0), 500.0)
    assert policy.preempt(pool["a"], 500.0) is None  # 500 left < 2 × 300 + 10
    # The pause cost counts: 900 left > 2 × 400 but not > 2 × 400 + 150.
    costly = make_policy("two-tier-preemptive", pause_cost_s=150.0)
    pool = full_follower(costly, job(1, 1000.0))
    place(costly, pool, job(2, 400.0, at=100.0), 100.0)
    assert costly.preempt(pool["a"], 100.0) is None


@pytest.mark.parametrize("name", ["two-tier", "fifo-roundrobin", "fifo-leastloaded"])
def test_the_other_policies_never_preempt(name):
    policy = make_policy(name)
    pool = full_follower(policy, job(1, 1000.0))
    place(policy, pool, job(2, 1.0, at=1.0), 1.0)
    assert policy.preempt(pool["a"], 1.0) is None


def test_a_paused_job_is_estimated_by_what_remains_of_it():
    policy = make_policy("two-tier-preemptive")
    long = job(1, 1000.0)
    long.run_s = 600.0
    assert policy.estimate(long, "a") == pytest.approx(400.0)
    long.run_s = 1500.0  # past its estimate: half what it has run (OVERRUN_SHARE)
    assert policy.estimate(long, "a") == pytest.approx(750.0)
    # Shortest remaining first: the paused job with 400 s left goes before a fresh 500 s one.
    pool = FollowerPool([FollowerInfo("a")])
    long.run_s = 600.0
    place(policy, pool, job(2, 500.0), 0.0)
    place(policy, pool, long, 0.0)
    assert policy.next_job(pool["a"], 0.0).id == "j1"


def test_aging_bound_a_job_waiting_max_wait_is_never_paused_and_goes_first():
    policy = make_policy("two-tier-preemptive", max_wait_s=600.0, aging_rate=0.0)
    # Submitted at 0, started at 550: by 700 it has waited 700 s since its submission.
    pool = full_follower(policy, job(1, 1000.0), started=550.0)
    place(policy, pool, job(2, 10.0, at=560.0), 560.0)
    assert policy.preempt(pool["a"], 560.0).id == "j1"  # 560 < 600: still pausable
    assert policy.preempt(pool["a"], 700.0) is None  # overdue: it runs to its end
    # Once paused, an overdue job goes ahead of every shorter one that is not.
    pool = FollowerPool([FollowerInfo("a")])
    overdue = job(3, 1000.0, at=0.0)
    overdue.run_s = 100.0
    place(policy, pool, job(4, 1.0, at=650.0), 650.0)
    place(policy, pool, overdue, 650.0)
    assert policy.next_job(pool["a"], 700.0).id == "j3"


def test_a_higher_priority_running_job_is_not_paused_for_a_lower_one():
    policy = make_policy("two-tier-preemptive")
    pool = full_follower(policy, job(1, 1000.0, priority=1))
    place(policy, pool, job(2, 1.0, at=1.0), 1.0)
    assert policy.preempt(pool["a"], 1.0) is None
