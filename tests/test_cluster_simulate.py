"""The cluster simulator: exact figures on small traces, the policies' ranking on the
synthetic mix, trace files and store replay, and `servebench cluster simulate`."""

import json

import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from servebench.cli import app
from servebench.cluster.job import FollowerInfo, Job, JobState, Needs
from servebench.cluster.policy import make_policy
from servebench.cluster.simulate import compare, simulate
from servebench.cluster.store import JobStore
from servebench.cluster.trace import (
    SyntheticMix,
    TraceError,
    TraceJob,
    read_trace,
    store_trace,
    synthetic_followers,
    synthetic_jobs,
    with_estimates,
    write_trace,
)

ONE = [FollowerInfo("a")]
# a 2 s job holds the follower while three more arrive at once
BURST = [TraceJob(0, 2, 2), TraceJob(1, 10, 10), TraceJob(1, 1, 1), TraceJob(1, 5, 5)]


def test_fifo_and_sjf_on_one_follower_give_the_textbook_figures():
    fifo = simulate(make_policy("fifo-roundrobin"), BURST, ONE)
    # in submission order: ends at 2, 12, 13, 18
    assert fifo.avg_jct_s == pytest.approx((2 + 11 + 12 + 17) / 4)
    assert fifo.mean_queueing_s == pytest.approx((0 + 1 + 11 + 12) / 4)
    assert fifo.makespan_s == 18 and fifo.utilization == pytest.approx(1.0)
    assert fifo.p95_jct_s == 17  # nearest rank: the 4th of 4 (ceil(0.95 × 4))
    sjf = simulate(make_policy("two-tier"), BURST, ONE)
    # shortest first: ends at 2, 3, 8, 18
    assert sjf.avg_jct_s == pytest.approx((2 + 2 + 7 + 17) / 4)
    assert sjf.makespan_s == 18 and sjf.jobs == 4 and sjf.unplaced == 0
    ratios = {r.policy: r.jct_ratio for r in compare(["two-tier"], make_policy, BURST, ONE)}
    assert ratios == {"two-tier": pytest.approx(42 / 28)}


def test_a_job_runs_for_its_duration_over_its_followers_speed():
    fast = simulate(
        make_policy("fifo-roundrobin"), [TraceJob(5, 10, 10)], [FollowerInfo("a", speed=2)]
    )
    assert fast.avg_jct_s == 5 and fast.makespan_s == 5  # the clock starts at the first job


def test_utilization_counts_idle_slots():
    pool = [FollowerInfo("a"), FollowerInfo("b")]
    result = simulate(make_policy("two-tier"), [TraceJob(0, 10, 10)], pool)
    assert result.utilization == pytest.approx(0.5)


def test_jobs_that_fit_no_follower_are_counted_not_run():
    trace = [TraceJob(0, 1, 1, gpus=1), TraceJob(0, 1, 1, labels={"zone": "x"}), TraceJob(0, 1, 1)]
    result = simulate(make_policy("two-tier"), trace, ONE)
    assert (result.jobs, result.unplaced) == (1, 2)


def test_a_long_job_pauses_at_its_next_trial_boundary_and_pays_the_resume_cost():
    # A 1,000 s job of 10 trials (100 s each); 10 s jobs arrive at 150 and 300.
    trace = [TraceJob(0, 1000, 1000, trials=10), TraceJob(150, 10, 10), TraceJob(300, 10, 10)]
    policy = make_policy("two-tier-preemptive", pause_cost_s=5.0)
    result = simulate(policy, trace, ONE, pause_cost_s=5.0)
    # Paused at 200 (its 2nd trial boundary), the first short one runs 200-210; resumed at
    # 210 (5 s of restart, then trial 3), paused again at 315 (end of trial 3), the second
    # short one runs 315-325; resumed at 325, it ends at 325 + 5 + 700 = 1030.
    assert result.preemptions == 2
    assert result.avg_jct_s == pytest.approx((1030 + 60 + 25) / 3)
    assert result.makespan_s == pytest.approx(1030)
    assert result.utilization == pytest.approx(1.0)
    assert result.mean_queueing_s == pytest.approx((0 + 50 + 15) / 3)
    # The same trace without preemption: the short jobs wait for the long one.
    plain = simulate(make_policy("two-tier"), trace, ONE, pause_cost_s=5.0)
    assert plain.preemptions == 0 and plain.avg_jct_s == pytest.approx((1000 + 860 + 720) / 3)
    assert result.long_slowdown == pytest.approx(1030 / 1010)  # JCT over its own run time


def test_a_job_of_one_trial_or_in_its_last_trial_is_never_paused():
    single = [TraceJob(0, 1000, 1000, trials=1), TraceJob(150, 10, 10)]
    result = simulate(make_policy("two-tier-preemptive"), single, ONE, pause_cost_s=5.0)
    assert result.preemptions == 0 and result.makespan_s == pytest.approx(1010)
    late = [TraceJob(0, 1000, 1000, trials=2), TraceJob(600, 10, 10)]
    result = simulate(make_policy("two-tier-preemptive"), late, ONE, pause_cost_s=5.0)
    assert result.preemptions == 0


def test_preemption_cuts_average_jct_on_a_small_cluster():
    followers = synthetic_followers(10, seed=1, gpu_share=0)
    mix = SyntheticMix(jobs=3000, batch_mean=1, gpu_job_share=0, label_job_share=0)
    trace = synthetic_jobs(mix, followers, seed=1)
    by_name = {
        r.policy: r
        for r in compare(
            ["two-tier-preemptive", "two-tier"], make_policy, trace, followers, pause_cost_s=8.0
        )
    }
    assert by_name["two-tier-preemptive"].preemptions > 0
    assert by_name["two-tier-preemptive"].avg_jct_s < by_name["two-tier"].avg_jct_s


def test_the_simulated_policy_learns_each_followers_speed():
    policy = make_policy("two-tier")
    trace = [TraceJob(i * 100.0, 10, 10, name="sweep") for i in range(20)]
    simulate(policy, trace, [FollowerInfo("slow", speed=0.5)])
    probe = Job("p", "sweep", "", "t", 0, Needs(), 10, JobState.QUEUED, 0)
    assert policy.estimate(probe, "slow") == pytest.approx(20, rel=0.01)


def test_two_tier_cuts_average_jct_on_the_synthetic_mix():
    followers = synthetic_followers(40, seed=3)
    trace = synthetic_jobs(SyntheticMix(jobs=1500), followers, seed=3)
    results = {r.policy: r for r in compare(
        ["two-tier", "fifo-roundrobin", "fifo-leastloaded"], make_policy, trace, followers
    )}  # fmt: skip
    assert all(r.jobs == 1500 and r.unplaced == 0 for r in results.values())
    assert results["two-tier"].jct_ratio >= 1.6
    assert results["two-tier"].avg_jct_s < results["fifo-leastloaded"].avg_jct_s
    assert results["fifo-roundrobin"].jct_ratio == 1.0


def test_the_synthetic_mix_is_what_it_says():
    followers = synthetic_followers(200, seed=1)
    mix = SyntheticMix(jobs=4000, load=0.5, batch_mean=1)
    trace = synthetic_jobs(mix, followers, seed=1)
    assert [t.submit_s for t in trace] == sorted(t.submit_s for t in trace)
    assert sum(f.gpus > 0 for f in followers) == 50
    fits_somewhere = [any(Needs(t.gpus, t.labels).fits(f) for f in followers) for t in trace]
    assert all(fits_somewhere)
    searches = [t for t in trace if t.name.startswith("search")]
    assert 0.1 < len(searches) / len(trace) < 0.2  # a few long searches...
    sweeps = sorted(t.duration_s for t in trace if t.name.startswith("sweep"))
    assert sweeps[len(sweeps) // 2] == pytest.approx(60, rel=0.15)  # ...many short sweeps
    assert max(t.duration_s for t in searches) > 10 * 900  # with a heavy tail
    offered = sum(t.duration_s for t in trace) / trace[-1].submit_s
    capacity = sum(f.speed for f in followers)
    assert offered / capacity == pytest.approx(0.5, rel=0.2)
    assert synthetic_jobs(mix, followers, seed=1) == trace  # seeded


def test_estimates_are_drawn_once_for_jobs_without_one():
    trace = [TraceJob(0, 100), TraceJob(1, 100, estimate_s=7)]
    drawn = with_estimates(trace, 0.5, seed=4)
    assert drawn[1].estimate_s == 7 and drawn[0].estimate_s != 100
    assert with_estimates(trace, 0.5, seed=4) == drawn
    assert with_estimates(trace, 0.0, seed=4)[0].estimate_s == 100


# ----------------------------------------------------------------------------- trace files


def test_a_trace_round_trips_through_csv_and_reads_json_lines(tmp_path):
    trace = [
        TraceJob(0.5, 30.0, 25.0, 1, {"zone": "a", "rack": "3"}, "sweep-1", 2),
        TraceJob(0.25, 10.0, None, 0, {}, "search-2", -1),
    ]
    write_trace(tmp_path / "t.csv", trace)
    assert read_trace(tmp_path / "t.csv") == sorted(trace, key=lambda t: t.submit_s)
    lines = [
        {"submit_s": 3, "duration_s": 4, "gpus": 2, "labels": {"zone": "b"}},
        {"submit_s": 1, "duration_s": 2.5, "estimate_s": 3, "name": "x"},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    assert read_trace(path) == [
        TraceJob(1, 2.5, 3, name="x"),
        TraceJob(3, 4, None, 2, {"zone": "b"}),
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.csv", "submit_s,duration_s\n0,1\n1,-2\n", "t.csv:3: duration_s: '-2' must be > 0"),
        ("t.csv", "submit_s,duration_s\n0,abc\n", "t.csv:2: duration_s: 'abc' is not a number"),
        ("t.csv", "submit_s,duration\n0,1\n", "t.csv:1: unknown column 'duration'"),
        ("t.csv", "submit_s,gpus\n0,1\n", "t.csv:2: duration_s: required"),
        ("t.csv", "submit_s,duration_s,labels\n0,1,zone\n", "labels: 'zone' is not name=value"),
        ("t.csv", "submit_s,duration_s,gpus\n0,1,1.5\n", "t.csv:2: gpus: '1.5' is not an integer"),
        ("t.csv", "submit_s,duration_s\n0,inf\n", "duration_s: 'inf' is not a finite number"),
        ("t.csv", "submit_s,duration_s\n", "t.csv: no jobs in the trace"),
        ("t.jsonl", '{"submit_s": 0, "duration_s": 1}\n[1]\n', "t.jsonl:2: each line must be a JSON object"),
        ("t.jsonl", "{nope\n", "t.jsonl:1: not JSON"),
        ("t.jsonl", '{"submit_s": 0, "duration_s": 1, "labels": {"a": 1}}\n', "labels: must map names to strings"),
        ("t.jsonl", '{"submit_s": 0, "duration_s": true}\n', "duration_s: True is not a finite number"),
    ],
)  # fmt: skip
def test_a_bad_trace_is_refused_naming_file_line_and_field(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(TraceError) as caught:
        read_trace(tmp_path / name)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def finished_store(path):
    """A store with a real cluster's kind of history: done, failed, cancelled, queued."""
    with JobStore(path) as store:
        rows = [  # id, needs, follower, submitted, started, ended, end state
            ("j1", Needs(), "f-cpu", 100.0, 101.0, 131.0, JobState.DONE),
            ("j2", Needs(1, {"zone": "a"}), "f-gpu", 105.0, 106.0, 116.0, JobState.FAILED),
            ("j3", Needs(), "f-cpu", 110.0, 131.0, 136.0, JobState.DONE),
        ]
        for jid, needs, follower, submitted, started, ended, end in rows:
            store.add(Job(jid, "sweep", "x", "ann", 0, needs, 20.0, JobState.QUEUED, submitted))
            store.transition(jid, JobState.PLACED, reason="p", follower=follower)
            store.transition(jid, JobState.RUNNING, reason="r", started_at=started)
            store.transition(jid, end, reason="e", finished_at=ended)
        store.add(Job("j4", "sweep", "x", "ann", 0, Needs(), 20.0, JobState.QUEUED, 120.0))
        store.add(Job("j5", "sweep", "x", "ann", 0, Needs(), 20.0, JobState.QUEUED, 121.0))
        store.transition("j5", JobState.CANCELLED, reason="by ann")


def test_a_store_replays_as_its_finished_jobs_on_its_own_followers(tmp_path):
    finished_store(tmp_path / "jobs.sqlite")
    trace, followers = store_trace(tmp_path / "jobs.sqlite")
    assert [(t.submit_s, t.duration_s, t.estimate_s, t.gpus) for t in trace] == [
        (100.0, 30.0, 20.0, 0), (105.0, 10.0, 20.0, 1), (110.0, 5.0, 20.0, 0),
    ]  # fmt: skip
    assert followers == [FollowerInfo("f-cpu"), FollowerInfo("f-gpu", 1, {"zone": "a"})]
    result = simulate(make_policy("two-tier"), trace, followers)
    assert result.jobs == 3 and result.unplaced == 0


def test_a_store_that_is_missing_or_empty_is_refused(tmp_path):
    with pytest.raises(TraceError, match="no job store there"):
        store_trace(tmp_path / "nope.sqlite")
    JobStore(tmp_path / "empty.sqlite").close()
    with pytest.raises(TraceError, match="no finished job"):
        store_trace(tmp_path / "empty.sqlite")


# ----------------------------------------------------------------------------- the command


def run(*args: str):
    """`servebench cluster simulate ARGS` through the root command, which turns usage errors
    into one line as a user sees them."""
    return CliRunner().invoke(app, ["cluster", "simulate", *args])


def test_simulate_prints_every_policy_with_its_ratio_to_fifo():
    result = run("--synthetic", "--jobs", "300", "--followers", "12")
    assert result.exit_code == 0, result.output
    for text in ("300 jobs (synthetic) on 12 followers", "two-tier", "fifo-roundrobin",
                 "fifo-leastloaded", "avg JCT s", "JCT ratio", "fifo-roundrobin's average JCT"):  # fmt: skip
        assert text in result.output


def test_simulate_json_holds_the_figures(tmp_path):
    result = run(
        "--synthetic", "--jobs", "300", "--followers", "12", "--policy", "two-tier", "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["fifo_reference"] == "fifo-roundrobin" and data["followers"] == 12
    (row,) = data["policies"]
    assert row["policy"] == "two-tier" and row["jobs"] == 300 and row["jct_ratio"] > 1
    assert {"avg_jct_s", "p95_jct_s", "mean_queueing_s", "makespan_s", "utilization"} <= set(row)


def test_a_saved_trace_replays_to_the_same_figures(tmp_path):
    saved = tmp_path / "mix.csv"
    first = run(
        "--synthetic", "--jobs", "200", "--followers", "8", "--json", "--save-trace", str(saved)
    )
    again = run("--trace", str(saved), "--followers", "8", "--json")
    assert first.exit_code == 0 and again.exit_code == 0, again.output

    def figures(output: str) -> list[dict]:
        rows = json.loads(output)["policies"]
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]

    assert figures(again.output) == figures(first.output)


def test_simulate_replays_a_store(tmp_path):
    finished_store(tmp_path / "jobs.sqlite")
    result = run("--store", str(tmp_path / "jobs.sqlite"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source"] == "store" and data["jobs"] == 3 and data["followers"] == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), ["give one of --synthetic, --trace FILE, --store PATH"]),
        (("--synthetic", "--trace", __file__), ["not --synthetic and --trace"]),
        (("--synthetic", "--policy", "sjf"), ["--policy: unknown policy 'sjf'", "two-tier"]),
        (("--synthetic", "--policy", ","), ["--policy: none given"]),
        (("--synthetic", "--max-wait-s", "0"), ["--max-wait-s 0: must be > 0"]),
        (("--trace", "missing.csv"), ["--trace missing.csv: no such file"]),
        (("--store", "missing.sqlite"), ["--store missing.sqlite: no such file"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, expected):
    assert_one_line_error(run(*args), *expected)


def test_a_bad_trace_line_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "t.csv").write_text("submit_s,duration_s\n0,-1\n")
    assert_one_line_error(run("--trace", str(tmp_path / "t.csv")), "t.csv:2: duration_s")
