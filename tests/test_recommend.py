"""`servebench recommend` on synthetic trial tables whose answers are known by hand.

Each run directory is written as the runner leaves one (run.json and trials.csv) and read
back through the loader, so the decision sees exactly what it sees on a real run. The
latencies are round numbers chosen so that every replica count, interpolated p99 and
ranking below can be checked with pen and paper.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from cli_checks import assert_one_line_error
from replicated_runs import replicated_run
from typer.testing import CliRunner

from servebench.analysis.loader import load_run
from servebench.analysis.recommend import (
    CLOSED,
    LinkCost,
    Query,
    RecommendError,
    price_run,
    recommend,
    replicas_needed,
)
from servebench.cli import app
from servebench.pricing import load_prices
from servebench.results import LEGACY_UNKNOWN, legacy_codes

C6I, G4DN = "c6i.xlarge", "g4dn.xlarge"  # $0.17/h and $0.526/h in prices.csv
SLO = 0.050


def trial(setting: str, rate: float, p99_ms: float, **extra) -> dict:
    """An open-loop rate trial's row: `rate` req/s achieved, p99 in ms."""
    row = {
        "trial_id": "t-" + "-".join(str(v) for v in (setting, rate, *extra.values())),
        "status": "ok",
        "verdict": "VALID",
        "server": "triton",
        "setting": setting,
        "protocol": "http",
        "model": "conv-d2-w32-abcdef",
        "batch_size": 1,
        "link": "direct",
        "load_kind": "rate",
        "load_level": rate,
        "mode": "open",
        "achieved_rate": rate,
        "latency_p99": p99_ms / 1e3,
        "request_bytes_mean": 1000.0,
        "response_bytes_mean": 500.0,
        "slo_percentile": 99.0,
        "slo_bound_s": SLO,
    }
    row.update(extra)
    return row


def curve(setting: str, points: dict[float, float], **extra) -> list[dict]:
    return [trial(setting, rate, p99, **extra) for rate, p99 in points.items()]


def write_run(root: Path, name: str, rows: list[dict], instance: str | None = C6I) -> Path:
    path = root / name
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"run_id": name, "status": "complete"}))
    if instance is not None:
        price = load_prices()[instance].usd_per_hour
        rows = [{**r, "instance": instance, "usd_per_hour": price} for r in rows]
    pd.DataFrame(rows).to_csv(path / "trials.csv", index=False)
    return path


def decide(paths: list[Path], as_instance: dict[int, str] | None = None, **query):
    prices = load_prices()
    runs = [
        price_run(load_run(p, records=False), prices, (as_instance or {}).get(n))
        for n, p in enumerate(paths)
    ]
    return recommend(runs, Query(slo_s=query.pop("slo_s", SLO), **query))


# A: p99 10, 20, 30, 60 ms at 100-400 req/s: 300 req/s is the max within 50 ms.
A = {100.0: 10.0, 200.0: 20.0, 300.0: 30.0, 400.0: 60.0}


@pytest.mark.parametrize(
    ("qps", "replicas"),
    [(300.0, 1), (300.0001, 2), (600.0, 2), (600.5, 3), (900.0, 3), (3000.0, 10)],
)
def test_replicas_at_the_boundaries(tmp_path: Path, qps: float, replicas: int) -> None:
    run = write_run(tmp_path, "a", curve("A", A))
    best = decide([run], qps=qps).best
    assert best is not None and best.max_rate == 300.0
    assert best.replicas == replicas
    assert best.per_replica_rate == pytest.approx(qps / replicas)
    assert best.usd_per_hour_total == pytest.approx(replicas * 0.17)
    # $/h over inferences/h, per million: the fleet at the target load.
    assert best.usd_per_million == pytest.approx(replicas * 0.17 / (qps * 3600) * 1e6)


def test_replicas_needed_counts_an_exact_multiple_as_fitting() -> None:
    # 64 req/s with 30 % headroom is 44.8 usable; 134.4 / 44.8 is 3.0000000000000004.
    assert replicas_needed(134.4, 64 * (1 - 0.3)) == 3
    assert replicas_needed(134.5, 64 * (1 - 0.3)) == 4
    assert replicas_needed(1.0, 700.0) == 1


def test_headroom_lowers_the_usable_rate_and_interpolates(tmp_path: Path) -> None:
    run = write_run(tmp_path, "a", curve("A", A))
    best = decide([run], qps=300.0, headroom=0.5).best
    assert best is not None
    assert best.usable_rate == 150.0 and best.replicas == 2
    # 150 req/s each: halfway between 100 (10 ms) and 200 (20 ms).
    assert best.expected_latency_s == pytest.approx(0.015)
    assert "interpolated between 100 and 200 req/s" in best.expected_how
    assert best.margin_s == pytest.approx(0.035)


def test_headroom_of_one_or_more_is_refused() -> None:
    with pytest.raises(RecommendError, match="headroom"):
        Query(slo_s=SLO, headroom=1.0)


def test_a_setting_that_never_meets_the_slo_says_why(tmp_path: Path) -> None:
    rows = curve("A", A) + curve("B", {100.0: 80.0, 200.0: 95.0})
    result = decide([write_run(tmp_path, "a", rows)], qps=500.0)
    assert [c.option.setting for c in result.ranked] == ["A"]
    (slow,) = result.infeasible
    assert slow.option.setting == "B"
    assert "p99 80.0 ms at 100 req/s, the lowest rate measured" in slow.reason


def test_never_past_the_measured_points(tmp_path: Path) -> None:
    # 100 and 300 req/s both well within the SLO and nothing measured above: a line
    # through them would promise 500 req/s at 50 ms, but only 300 was measured.
    run = write_run(tmp_path, "a", curve("A", {100.0: 10.0, 300.0: 30.0}))
    best = decide([run], qps=500.0).best
    assert best is not None
    assert best.max_rate == 300.0 and best.highest_measured
    assert best.replicas == 2  # not 1
    # Below the lowest measured rate the lowest point's p99 stands, not a line to 0.
    low = decide([run], qps=40.0).best
    assert low is not None and low.replicas == 1
    assert low.expected_latency_s == pytest.approx(0.010)
    assert "the lowest rate measured" in low.expected_how


def test_non_monotone_latency_adds_replicas_until_the_load_meets_the_slo(tmp_path: Path) -> None:
    # A spike at 200 req/s: 400 req/s on 2 replicas would run each at 200 (60 ms).
    run = write_run(tmp_path, "a", curve("A", {100.0: 10.0, 200.0: 60.0, 300.0: 30.0}))
    best = decide([run], qps=400.0).best
    assert best is not None and best.max_rate == 300.0
    assert best.replicas == 3
    # 133.3 req/s each: 10 ms + (33.3 / 100) × 50 ms.
    assert best.expected_latency_s == pytest.approx(0.010 + (400 / 3 - 100) / 100 * 0.050)


def test_ties_break_on_latency_margin_then_name(tmp_path: Path) -> None:
    rows = (
        curve("B", {100.0: 20.0, 300.0: 40.0})
        + curve("A", {100.0: 20.0, 300.0: 40.0})
        + curve("C", {100.0: 10.0, 300.0: 30.0})
    )
    result = decide([write_run(tmp_path, "a", rows)], qps=300.0)
    assert [c.option.setting for c in result.ranked] == ["C", "A", "B"]
    assert all(c.usd_per_hour_total == pytest.approx(0.17) for c in result.ranked)
    assert result.ranked[1].loses_because.startswith("same cost as #1, smaller latency margin")
    assert "p99 margin 10.0 ms vs 20.0 ms" in result.ranked[1].loses_because
    full = decide([write_run(tmp_path, "b", rows[:4])], qps=300.0)
    assert [c.option.setting for c in full.ranked] == ["A", "B"]
    assert full.ranked[1].loses_because.startswith("ties with #1: the same cost")
    assert full.rankings[0].tie_within_noise


def test_runs_on_different_instances_are_ranked_by_cost(tmp_path: Path) -> None:
    cpu = write_run(tmp_path, "cpu", curve("A", A), instance=C6I)
    gpu = write_run(tmp_path, "gpu", curve("G", {500.0: 5.0, 2000.0: 20.0, 4000.0: 90.0}), G4DN)
    # 2,000 req/s: 7 × $0.17 = $1.19/h on the CPU, 1 × $0.526/h on the GPU.
    result = decide([cpu, gpu], qps=2000.0)
    assert [(c.option.instance, c.replicas) for c in result.ranked] == [(G4DN, 1), (C6I, 7)]
    assert result.ranked[1].loses_because.startswith("+$0.664/h (+126%) over #1")
    # 300 req/s: one CPU replica ($0.17/h) beats one GPU ($0.526/h).
    assert decide([cpu, gpu], qps=300.0).best.option.instance == C6I
    only = decide([cpu, gpu], qps=300.0, instances=(G4DN, "p3.2xlarge"))
    assert {c.option.instance for c in only.ranked} == {G4DN}
    assert "no run stands for instance p3.2xlarge" in only.warnings


def test_as_instance_names_the_hardware_of_a_run_without_one(tmp_path: Path) -> None:
    bare = write_run(tmp_path, "bare", curve("A", A), instance=None)
    with pytest.raises(RecommendError, match="--as-instance"):
        decide([bare], qps=300.0)
    best = decide([bare], {0: G4DN}, qps=300.0).best
    assert best is not None and best.option.instance == G4DN
    assert best.option.usd_per_hour == pytest.approx(0.526)


def test_closed_loop_points_only_where_nothing_else_and_with_a_warning(tmp_path: Path) -> None:
    closed = {"load_kind": "concurrency", "mode": "closed"}
    rows = curve("A", A) + curve("A", {500.0: 45.0}, **closed) + curve("K", A, **closed)
    result = decide([write_run(tmp_path, "a", rows)], qps=300.0)
    by_setting = {c.option.setting: c for c in result.ranked}
    assert by_setting["A"].max_rate == 300.0  # its closed-loop 500 req/s point is not used
    assert not by_setting["A"].option.closed_loop
    assert by_setting["K"].option.closed_loop
    assert all(p.kind == CLOSED for p in by_setting["K"].option.points)
    assert any("closed-loop measurements only" in w for w in result.warnings)


def test_a_closed_loop_rate_is_the_throughput_the_trial_table_shows(tmp_path: Path) -> None:
    """One figure per quantity (issue 33): a closed-loop trial's rate in `recommend` is
    its throughput (successful requests per second: the table's req/s), not the rate it
    sent, and its cost per million inferences is the table's $/M inf."""
    from servebench.analysis.summary import summary_table

    row = trial(
        "K", 3306.2, 6.6, load_kind="concurrency", mode="closed", throughput_rps=3300.0,
        throughput_ips=3300.0, cost_per_million=0.17 / (3300.0 * 3600) * 1e6,
    )  # fmt: skip
    run = write_run(tmp_path, "a", [row])
    best = decide([run]).best
    assert best is not None and best.max_rate == 3300.0 and best.max_rate_source == "throughput"
    headers, (cells,), _ = summary_table(load_run(run, records=False).trials)
    assert cells[headers.index("req/s")] == "3,300.0"
    assert best.usd_per_million == pytest.approx(row["cost_per_million"])
    text = run_cli(str(run), "--slo-p99-ms", "50").output
    assert "(the throughput of closed-loop trial" in text
    assert "per million inferences at 3,300 req/s per replica" in text


def test_invalid_trials_are_not_operating_points(tmp_path: Path) -> None:
    rows = curve("A", A)
    rows[2]["verdict"] = "INVALID"  # 300 req/s: the generator fell behind
    best = decide([write_run(tmp_path, "a", rows)], qps=200.0).best
    assert best is not None and best.max_rate == 200.0


def search_row(setting: str, steps: list, percentile: float = 99.0) -> dict:
    """An SLO-search trial as the runner writes it: steps [rate, latency s, met, reasons]."""
    met = [s for s in steps if s[2]]
    chosen = max(met, key=lambda s: s[0]) if met else steps[-1]
    return trial(
        setting,
        chosen[0],
        chosen[1] * 1e3,
        load_kind="search",
        load_level=float("nan"),
        slo_percentile=percentile,
        max_rate=chosen[0] if met else float("nan"),
        search_steps=json.dumps(steps),
    )


def test_search_steps_are_the_points_and_unusable_steps_are_left_out(tmp_path: Path) -> None:
    steps = [
        [100.0, 0.010, True, ""],
        [200.0, 0.020, True, "generator fell behind: ..."],  # met: lateness is in the latency
        [400.0, 0.020, False, "errors: 90 of 1000 requests failed"],  # unusable
        [300.0, 0.060, False, ""],
        [250.0, 0.040, True, ""],
    ]
    result = decide([write_run(tmp_path, "a", [search_row("S", steps)])], qps=500.0)
    best = result.best
    assert best is not None and best.max_rate == 250.0 and best.replicas == 2
    assert best.max_rate_trial.endswith(".s4")
    assert [p.valid for p in best.option.points] == [True, True, False, True, True]


def test_search_steps_are_usable_or_not_by_their_codes(tmp_path: Path) -> None:
    """Steps as the runner writes them now, with their reasons' codes: the codes decide,
    whatever the text says (it is for people, and may change)."""
    steps = [
        [100.0, 0.010, True, "", []],
        [200.0, 0.020, True, "generator fell behind: ...", ["lag_high"]],  # in its latency
        [300.0, 0.060, False, "errors: worded as a failure, but no check said so", []],
        [400.0, 0.070, False, "", ["errors"]],  # unusable, whatever the text
        [250.0, 0.040, True, "", []],
    ]
    best = decide([write_run(tmp_path, "a", [search_row("S", steps)])], qps=500.0).best
    assert best is not None and best.max_rate == 250.0
    assert [p.valid for p in best.option.points] == [True, True, True, False, True]


def test_an_older_run_reads_its_codes_from_its_texts_once(tmp_path: Path) -> None:
    """Rows from before verdict codes (text, no codes): the loader reads their codes from
    the texts those versions wrote, and only theirs; a row with codes keeps its own."""
    old = trial("A", 100.0, 10.0, verdict="INVALID")
    old.update(
        verdict_reasons="stopped early: interrupted; by SIGTERM; errors: 3 of 10 requests failed",
        verdict_warnings="generator lag: 5.0% of requests were sent more than 1 ms late",
    )
    odd = trial("A", 200.0, 20.0, verdict="INVALID", verdict_reasons="a reason no version wrote")
    trials = load_run(write_run(tmp_path, "old", [old, odd]), records=False).trials
    assert list(trials["verdict_reason_codes"]) == ["stopped_early;errors", LEGACY_UNKNOWN]
    assert list(trials["verdict_warning_codes"]) == ["late_sends", None]
    assert legacy_codes("generator fell behind: 2.0% of requests were sent late") == (
        "late_sends",
    )  # the oldest wording, when late sends still invalidated a run
    # Resumed since: rows with codes keep theirs, whatever their text says.
    new = trial(
        "A", 300.0, 30.0, verdict_reasons="errors: 3 of 10", verdict_reason_codes="unstable"
    )
    trials = load_run(write_run(tmp_path, "resumed", [old, new]), records=False).trials
    assert list(trials["verdict_reason_codes"]) == ["stopped_early;errors", "unstable"]


def test_search_at_another_percentile_gives_only_its_chosen_step(tmp_path: Path) -> None:
    steps = [[100.0, 0.010, True, ""], [200.0, 0.030, True, ""], [400.0, 0.080, False, ""]]
    row = search_row("S", steps, percentile=95.0)
    row["latency_p99"] = 0.045  # the chosen step's p99, above its p95
    best = decide([write_run(tmp_path, "a", [row])], qps=200.0).best
    assert best is not None
    assert [(p.rate, p.latency_s) for p in best.option.points] == [(200.0, 0.045)]


def test_link_measured_and_analytic_estimate(tmp_path: Path) -> None:
    rows = curve("A", A) + curve("A", {100.0: 45.0, 200.0: 70.0}, link="lte")
    run = write_run(tmp_path, "a", rows)
    measured = decide([run], qps=100.0, link="lte").best
    assert measured is not None and measured.max_rate == 100.0
    assert measured.expected_latency_s == pytest.approx(0.045)
    # lte as an estimate: 30 ms RTT + 1000 B up at 8 Mbit/s (1 ms) + 500 B down at 4
    # Mbit/s (1 ms) = 32 ms on top of direct: 10+32 and 20+32 (> 50) → max 100 req/s.
    lte = LinkCost("lte", 0.030, up_mbps=8.0, down_mbps=4.0)
    assert lte.added_s(1000.0, 500.0) == pytest.approx(0.032)
    estimate = decide([run], qps=100.0, link="lte", link_cost=lte)
    assert estimate.best is not None and estimate.best.max_rate == 100.0
    assert estimate.best.expected_latency_s == pytest.approx(0.042)
    assert any("is an estimate" in w for w in estimate.warnings)
    tight = decide([run], qps=100.0, slo_s=0.040, link="lte", link_cost=lte)
    assert tight.best is None
    assert "direct 10.0 ms + link 32.0 ms" in tight.infeasible[0].reason


def test_without_a_target_rate_ranks_by_cost_per_million(tmp_path: Path) -> None:
    rows = curve("A", A) + curve("B", {100.0: 5.0, 150.0: 10.0, 200.0: 70.0})
    result = decide([write_run(tmp_path, "a", rows)])
    assert [c.option.setting for c in result.ranked] == ["A", "B"]
    a, b = result.ranked
    assert a.replicas is None and a.per_replica_rate == 300.0
    assert a.usd_per_million == pytest.approx(0.17 / (300 * 3600) * 1e6)
    assert b.usd_per_million == pytest.approx(0.17 / (150 * 3600) * 1e6)
    assert "per million inferences" in b.loses_because


# -- the command line ----------------------------------------------------------------------


def run_cli(*args: str):
    return CliRunner().invoke(app, ["recommend", *args])


def test_cli_prints_the_answer_and_json(tmp_path: Path) -> None:
    rows = curve("A", A) + curve("B", {100.0: 80.0})
    run = write_run(tmp_path, "a", rows)
    text = run_cli(str(run), "--qps", "600", "--slo-p99-ms", "50")
    assert text.exit_code == 0, text.output
    assert "Run 2 replicas of A (conv-d2-w32-abcdef, batch 1) on c6i.xlarge" in text.output
    assert "$0.34/h" in text.output
    assert "cannot meet p99 ≤ 50 ms at any replica count" in text.output
    out = run_cli(str(run), "--qps", "600", "--json")  # the SLO comes from the run
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["query"]["slo_s"] == SLO and data["query"]["link_model"] == "measured"
    (ranking,) = data["rankings"]
    assert ranking["model"] == "conv-d2-w32-abcdef" and ranking["headline"].startswith("Run 2")
    assert ranking["ranked"][0]["replicas"] == 2
    assert ranking["ranked"][0]["setting"] == "A"
    assert ranking["infeasible"][0]["setting"] == "B"
    assert math.isclose(ranking["ranked"][0]["usd_per_hour_total"], 0.34)


def test_cli_as_instance_and_no_answer(tmp_path: Path) -> None:
    run = write_run(tmp_path, "bare", curve("B", {100.0: 80.0}), instance=None)
    result = run_cli(str(run), "--qps", "100", "--as-instance", f"bare={G4DN}")
    assert result.exit_code == 1, result.output
    assert "no measured option meets the SLO" in result.output
    assert f"{G4DN} at $0.5260/h" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["missing-run"], "no such run directory"),
        (["{run}", "--headroom", "1"], "--headroom 1: must be <= 0.99"),
        (["{run}", "--qps", "0"], "--qps 0: must be > 0"),
        (["{run}", "--qps", "1e308", "--headroom", "0.999999"], "--qps 1e308: must be <="),
        (["{run}", "--model", "nosuchmodel"], "--model nosuchmodel: no run measured that model"),
        (["{run}", "--link", "lte"], "no run measured a trial over link lte"),
        (["{run}", "--link-model", "analytic"], "give --link NAME"),
        (["{run}", "--link", "moon", "--link-model", "analytic"], "--link moon"),
        (["{run}", "--as-instance", "nope"], "write RUN=TYPE"),
        (["{run}", "--as-instance", "other=c6i.xlarge"], "other is none of the runs"),
        (["{run}", "--as-instance", "a=c7x.huge"], "no price for 'c7x.huge'"),
        (["{bare}"], "trials.csv has no trial with a rate and latency_p99"),
    ],
)
def test_cli_errors_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    run = write_run(tmp_path, "a", curve("A", A))
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "run.json").write_text(json.dumps({"run_id": "bare"}))
    (bare / "trials.csv").write_text(
        "trial_id,status,setting,link,instance\nt1,ok,A,direct,c6i.xlarge\n"
    )
    args = [a.format(run=run, bare=bare) for a in args]
    assert_one_line_error(run_cli(*args, "--slo-p99-ms", "50"), expected)


def test_each_model_and_batch_size_is_its_own_question(tmp_path: Path) -> None:
    """Serving another model is no deployment choice: each model (and batch size, since a
    target in requests/s is other work at another batch) gets its own ranking."""
    rows = (
        curve("A", A)
        + curve("B", {100.0: 5.0, 900.0: 10.0}, model="dense-d2-w32-123456")
        + curve("A", A, batch_size=8)
    )
    run = write_run(tmp_path, "a", rows)
    result = decide([run], qps=600.0)
    questions = [(r.model, r.batch_size) for r in result.rankings]
    assert questions == [
        ("conv-d2-w32-abcdef", 1),
        ("conv-d2-w32-abcdef", 8),
        ("dense-d2-w32-123456", 1),
    ]
    assert [len(r.ranked) for r in result.rankings] == [1, 1, 1]
    assert all(c.loses_because == "" for c in result.ranked)  # nobody loses to another model
    only = decide([run], qps=600.0, model="dense-d2-w32", batch_size=1)
    assert [(r.model, r.best.replicas) for r in only.rankings] == [("dense-d2-w32-123456", 1)]
    text = run_cli(str(run), "--qps", "600", "--slo-p99-ms", "50")
    assert "── conv-d2-w32-abcdef, batch 8 ──" in text.output
    assert "each model and batch size is ranked on its own" in text.output


def _bounded(setting: str, points: dict[float, tuple[float, float, float]]) -> list[dict]:
    """Rows with intervals: rate -> (low, p99, high) in ms, at 95 % confidence."""
    return [
        trial(
            setting,
            rate,
            p99,
            confidence_level=0.95,
            latency_p99_low=low / 1e3,
            latency_p99_high=high / 1e3,
            ok=1000,
        )
        for rate, (low, p99, high) in points.items()
    ]


def test_the_safe_side_of_the_interval_decides(tmp_path: Path) -> None:
    """A p99 of 40 ms whose interval reaches 60 ms does not meet a 50 ms SLO: the max
    rate is the lower one whose high bound is within it."""
    rows = _bounded("A", {100.0: (9.0, 10.0, 12.0), 300.0: (35.0, 40.0, 60.0)})
    result = decide([write_run(tmp_path, "a", rows)], qps=300.0)
    assert result.best is not None and result.best.max_rate == 100.0
    assert result.best.replicas == 3


def test_a_failure_is_claimed_only_where_it_was_measured(tmp_path: Path) -> None:
    """Issue 33: no high bound (175 requests of the 368 that bound a p99 at 95 %) and an
    interval around the bound are undecided, said with the counts from the one
    percentile module; only a low bound over the SLO is "cannot meet"; an INVALID trial
    is no valid measurement. The headline, the box's words and the command say so."""
    few = _bounded("F", {100.0: (9.0, 10.0, 12.0)})
    few[0].update(latency_p99_high=None, ok=175)
    straddles = _bounded("S", {100.0: (40.0, 45.0, 60.0)})
    straddles[0].update(slo_requests_to_decide=2400)
    over = _bounded("O", {100.0: (55.0, 60.0, 70.0)})
    invalid = _bounded("I", {100.0: (9.0, 10.0, 12.0)})
    invalid[0].update(verdict="INVALID", verdict_reasons="generator fell behind: lag p99 9 ms")
    run = write_run(tmp_path, "a", few + straddles + over + invalid)
    result = decide([run], qps=100.0)
    assert result.best is None
    kinds = {i.option.setting: (i.kind, i.reason) for i in result.infeasible}
    assert kinds["F"][0] == "undecided"
    assert kinds["F"][1].startswith("undecided — too few requests (175 of 368): p99 10.0 ms")
    assert kinds["S"] == (
        "undecided",
        "undecided — too few requests (1,000 of 2,400): p99 40.0–60.0 ms at 100 req/s "
        "straddles the 50 ms SLO",
    )
    assert kinds["O"][0] == "missed" and "already over the 50 ms SLO" in kinds["O"][1]
    assert kinds["I"] == ("no valid measurement", "no valid measurement — generator fell "
                          "behind: lag p99 9 ms")  # fmt: skip
    from servebench.analysis.recommend import headline

    (ranking,) = result.rankings
    assert ranking.unanswered()[0] == "undecided"
    text = headline(ranking, result.query)
    assert text.startswith("Undecided whether any setting serves conv-d2-w32-abcdef")
    assert "none meets" not in text and "No measured setting" not in text
    out = run_cli(str(run), "--qps", "100", "--slo-p99-ms", "50")
    assert out.exit_code == 1, out.output
    assert "no measured option meets the SLO" not in out.output
    assert "cannot meet p99 ≤ 50 ms at any replica count:\n  O · " in out.output
    assert "undecided at p99 ≤ 50 ms:\n  F · " in out.output
    assert "no valid measurement:\n  I · " in out.output
    # Every setting measured over the SLO: then, and only then, "none meets it".
    only_over = decide([write_run(tmp_path, "b", over)], qps=100.0)
    assert only_over.rankings[0].unanswered()[0] == "missed"
    assert headline(only_over.rankings[0], only_over.query).startswith("No measured setting serves")
    # A job whose only trial was INVALID: no valid measurement, and why.
    lone = decide([write_run(tmp_path, "c", invalid)], qps=100.0).rankings[0]
    assert lone.unanswered() == (
        "no valid measurement",
        "no valid measurement — generator fell behind: lag p99 9 ms",
    )
    assert headline(lone, result.query).startswith("No answer for conv-d2-w32-abcdef")


def test_equal_cost_with_overlapping_intervals_is_a_tie(tmp_path: Path) -> None:
    """Issue 33: four settings that each need one replica for the target are the same
    cost; a 0.1 ms margin between p99 intervals that overlap orders nothing: a tie,
    named in the headline and in each runner-up's line. Intervals apart, the margin
    decides as before."""
    rows = []
    for name, high in (("A", 6.6), ("B", 6.7), ("C", 6.8), ("D", 30.0)):
        rows += _bounded(name, {3000.0: (high - 1.0, high - 0.5, high)})
    result = decide([write_run(tmp_path, "a", rows)], qps=2000.0)
    ranking = result.rankings[0]
    assert [c.replicas for c in ranking.ranked] == [1, 1, 1, 1]
    assert [c.option.setting for c, _ in ranking.tied] == ["B", "C"]  # D's interval is apart
    from servebench.analysis.recommend import headline

    text = headline(ranking, result.query)
    assert text.startswith("A tie for the cheapest conv-d2-w32-abcdef (batch 1)")
    assert "between 3 settings: #1 A (1 replica, $0.17/h, p99 5.6–6.6 ms); #2 B" in text
    assert "the same cost, and their p99 intervals overlap" in text
    assert ranking.ranked[1].loses_because.startswith("ties with #1: the same cost")
    assert ranking.ranked[3].loses_because.startswith("same cost as #1, smaller latency margin")
    data = json.loads(
        run_cli(str(write_run(tmp_path, "j", rows)), "--qps", "2000", "--json").output
    )
    assert [t["rank"] for t in data["rankings"][0]["tied_with_first"]] == [2, 3]


def test_the_top_two_within_each_others_intervals_are_a_tie_within_the_noise(
    tmp_path: Path,
) -> None:
    """A meets 50 ms at 300 req/s (2 replicas for 600); B's high bound at 300 is over (3
    replicas), but its low bound is not: on the optimistic side B needs 2 as well, so the
    answer is a tie within the noise. With B's low bound over too, A wins outright."""
    a = _bounded("A", {200.0: (20.0, 22.0, 25.0), 300.0: (35.0, 38.0, 45.0)})
    b = _bounded("B", {200.0: (20.0, 22.0, 25.0), 300.0: (45.0, 48.0, 55.0)})
    result = decide([write_run(tmp_path, "tie", a + b)], qps=600.0)
    assert [c.option.setting for c in result.ranked] == ["A", "B"]
    assert [c.replicas for c in result.ranked] == [2, 3]
    ranking = result.rankings[0]
    assert ranking.tie_within_noise
    from servebench.analysis.recommend import headline

    text = headline(ranking, result.query)
    assert "A tie for the cheapest" in text and "#2 B (3 replicas" in text
    assert "their costs overlap within the noise of the latency intervals" in text
    b_over = _bounded("B", {200.0: (20.0, 22.0, 25.0), 300.0: (51.0, 53.0, 55.0)})
    clear = decide([write_run(tmp_path, "clear", a + b_over)], qps=600.0)
    assert not clear.rankings[0].tie_within_noise
    assert "tie" not in headline(clear.rankings[0], clear.query)
    # A point with no high bound counts on its low bound only if nothing else rules it out:
    # an INVALID trial's low bound makes no tie.
    b_invalid = _bounded("B", {200.0: (20.0, 22.0, 25.0), 300.0: (45.0, 48.0, 55.0)})
    b_invalid[1].update(latency_p99_high=None, verdict="INVALID", verdict_reasons="rate short")
    unsure = decide([write_run(tmp_path, "invalid", a + b_invalid)], qps=600.0)
    assert not unsure.rankings[0].tie_within_noise


def test_a_p95_slo_is_decided_on_p95_without_being_told(tmp_path: Path) -> None:
    """The runs' own SLO is the default, on its own percentile (issue 34: a p95 SLO is p95
    everywhere): at 300 req/s p95 is 40 ms (within 50) while p99 is 90 ms (over it)."""
    rows = [
        trial("A", rate, p99, slo_percentile=95.0, latency_p95=p95 / 1e3)
        for rate, p95, p99 in ((100.0, 10.0, 20.0), (300.0, 40.0, 90.0), (400.0, 70.0, 95.0))
    ]
    run = write_run(tmp_path, "a", rows)
    text = run_cli(str(run), "--qps", "300")
    assert text.exit_code == 0, text.output
    assert "p95 ≤ 50 ms" in text.output
    assert "max 300 req/s per replica within the SLO" in text.output
    # Told a p99 bound, it decides on p99: 300 req/s is then over it.
    told = run_cli(str(run), "--qps", "300", "--slo-p99-ms", "50")
    assert told.exit_code == 0, told.output
    assert "p99 ≤ 50 ms" in told.output and "max 100 req/s per replica" in told.output


def test_runs_held_to_different_slos_ask_for_a_bound(tmp_path: Path) -> None:
    """Without --slo-p99-ms the runs' one SLO decides; runs held to two SLOs (or none) name
    what they hold and ask for a bound, one line, exit 2."""
    a = write_run(tmp_path, "a", curve("A", A))
    b = write_run(tmp_path, "b", curve("B", A, slo_percentile=95.0))
    assert run_cli(str(a), "--qps", "100").exit_code == 0
    assert_one_line_error(
        run_cli(str(a), str(b), "--qps", "100"),
        "give --slo-p99-ms (the runs' SLOs: p95 ≤ 50 ms, p99 ≤ 50 ms)",
    )
    bare = write_run(tmp_path, "c", curve("C", A, slo_percentile=None, slo_bound_s=None))
    assert_one_line_error(run_cli(str(bare)), "give --slo-p99-ms (the runs' SLOs: none)")


def test_a_replicated_run_names_its_tied_set_from_paired_rounds(tmp_path: Path) -> None:
    """Two settings of one cost in the same rounds: alike round by round, they tie (with
    how many more rounds would likely separate them); B 30 % slower in every one of
    eight rounds, it does not."""
    drift = [10.0, 12.0, 9.0, 14.0, 11.0, 13.0, 10.5, 12.5]
    alike = replicated_run(
        tmp_path, "alike",
        {"A": drift, "B": [v * f for v, f in zip(drift, (1.02, 0.99, 1.01, 0.98) * 2, strict=True)]},
    )  # fmt: skip
    text = run_cli(str(alike), "--qps", "100").output
    assert "A tie for the cheapest" in text, text
    assert "compared round by round" in text and "ties with #1" in text
    apart = replicated_run(tmp_path, "apart", {"A": drift, "B": [v * 1.3 for v in drift]})
    text = run_cli(str(apart), "--qps", "100").output
    assert "A tie" not in text and "ties with #1" not in text, text
    assert "Run 1 replica of A " in text


def test_a_replicated_run_too_short_to_separate_says_how_many_more_rounds(
    tmp_path: Path,
) -> None:
    five = [10.0, 12.0, 9.0, 14.0, 11.0]
    run = replicated_run(tmp_path, "five", {"A": five, "B": [v * 1.3 for v in five]})
    text = run_cli(str(run), "--qps", "100").output
    assert "too few to tell at 95% (R=5)" in text
    assert "1 more round would likely separate the first two" in text, text
