"""`tune:` in a scenario: the schema's errors (file, line, field, why), and one short quick
search on the real local Triton whose run directory has every step in tune.json and opens
with `servebench report` and `servebench recommend`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scenario_checks import tiny_scenario, write

from servebench.load import Started
from servebench.pricing import cost_at_qps, load_prices
from servebench.scenario.validate import ScenarioError, load_scenario

SEARCH = {
    "search": "max_rate",
    "search_settings": {"min_rate": 20, "max_rate": 80, "precision": 0.5, "max_steps": 2},
    "batch_sizes": [1],
    "duration_s": 0.5,
    "warmup_s": 0.1,
    "timeout_s": 2,
}
SETTINGS = {"max_batch_size": 4, "dynamic_batching": [False, True], "max_queue_delay_us": [0, 500]}
SLO = {"percentile": 90, "latency_ms": 500}
PRICE = load_prices()["c6i.xlarge"].usd_per_hour


def _problems(tmp_path: Path, text: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(write(tmp_path, text))
    return str(caught.value)


@pytest.mark.parametrize(
    ("tune", "sections", "expected"),
    [
        (
            {"objective": "cost_at_qps"},
            {"slo": SLO},
            "tune.qps: objective cost_at_qps is taken at a target rate: give qps",
        ),
        ({"budget_trials": 0}, {"slo": SLO}, "tune.budget_trials: 0 — must be >= 1"),
        (
            {"method": "brute", "budget_trials": 3},
            {"slo": SLO},
            "tune.budget_trials: 3 — only for methods quick and race",
        ),
        ({"method": "brute", "level": 0.1}, {"slo": SLO}, "tune.level: 0.1 — only for methods"),
        ({"level": 0.5}, {"slo": SLO}, "tune.level: 0.5 — must be <= 0.2"),
        ({"first_rounds": 3}, {"slo": SLO}, "tune.first_rounds: 3 — only for method race"),
        ({"over": "all"}, {"slo": SLO}, "tune.over: 'all' — only for method race"),
        (
            {"method": "race", "first_rounds": 1},
            {"slo": SLO},
            "tune.first_rounds: 1 — must be >= 2",
        ),
        (
            {"method": "race", "start": {"max_queue_delay_us": 500}},
            {"slo": SLO},
            "tune.start: {'max_queue_delay_us': 500} — a race over all settings has no start",
        ),
        (
            {"method": "race"},
            {"slo": SLO},
            "workload.repeats: tune method race measures every setting in 5 rounds",
        ),
        ({"objective": "max_rate", "qps": 10}, {"slo": SLO}, "tune.qps: 10 — only for objectives"),
        ({"objective": "p99", "qps": 10}, {}, "slo: tune objective p99 is judged against an slo"),
        (
            {"objective": "cost_at_qps", "qps": 10},
            {"slo": SLO},
            "cost: tune objective cost_at_qps prices replicas",
        ),
        (
            {"start": {"instance_count": 2}},
            {"slo": SLO},
            "tune.start.instance_count: 2 — not a setting server 'triton' varies",
        ),
        (
            {"start": {"max_queue_delay_us": 7}},
            {"slo": SLO},
            "tune.start.max_queue_delay_us: 7 — not one of the values server",
        ),
    ],
)
def test_tune_errors_name_the_line_and_why(
    tmp_path: Path, tune: dict, sections: dict, expected: str
) -> None:
    text = tiny_scenario(
        "t", settings=SETTINGS, workload=SEARCH, **sections, tune=tune, cost={"instance": "x"}
    )
    if "cost" not in expected:
        text = text.replace("cost:\n  instance: x\n", "cost:\n  instance: c6i.xlarge\n")
    else:
        text = text.replace("cost:\n  instance: x\n", "")
    # Each problem names the file and a line, then the field and why.
    assert re.search(r"s\.yaml:\d+ " + re.escape(expected), _problems(tmp_path, text))


def test_a_race_budget_must_hold_its_first_block(tmp_path: Path) -> None:
    race = {"method": "race", "first_rounds": 2, "budget_trials": 5}
    text = tiny_scenario(
        "t", settings=SETTINGS, workload={**SEARCH, "repeats": 3}, slo=SLO, tune=race
    )
    # Batching off, or on with 0 or 500 µs: three settings, two rounds of them first.
    assert re.search(
        r"s\.yaml:\d+ tune\.budget_trials: 5 — less than the race's first block on server "
        r"'triton': 2 rounds of 3 settings = 6 replicate trials",
        _problems(tmp_path, text),
    )
    fits = tiny_scenario(
        "t", settings=SETTINGS, workload={**SEARCH, "repeats": 3}, slo=SLO,
        tune={**race, "budget_trials": 6},
    )  # fmt: skip
    assert load_scenario(write(tmp_path, fits)).tune.budget_trials == 6


def test_tune_needs_what_it_compares(tmp_path: Path) -> None:
    workload = {**SEARCH, "search": None, "rates": [50], "batch_sizes": [1, 2]}
    text = tiny_scenario(
        "t", settings=SETTINGS, workload=workload, slo=SLO, tune={"method": "quick"}
    )
    problems = _problems(tmp_path, text.replace("  search: None\n", ""))
    assert "workload.search: tune objective max_rate takes each setting's max rate" in problems
    assert "workload.batch_sizes: [1, 2] — tune compares one trial per setting" in problems
    p99 = tiny_scenario(
        "t", settings=SETTINGS, workload=workload, slo=SLO, tune={"objective": "p99", "qps": 60}
    )
    assert "set rates to [60] (and no search)" in _problems(
        tmp_path, p99.replace("  search: None\n", "")
    )
    fixed = tiny_scenario(
        "t", settings={"max_batch_size": 4}, workload=SEARCH, slo=SLO, tune={"method": "quick"}
    )
    assert "servers[0].settings: nothing to tune" in _problems(tmp_path, fixed)
    remote = tiny_scenario(
        "t", server={"launch": "remote", "url": "http://127.0.0.1:8000"}, settings=None,
        workload=SEARCH, slo=SLO, tune={"method": "quick"},
    )  # fmt: skip
    assert "a remote server has no settings to tune" in _problems(tmp_path, remote)


def test_a_quick_search_on_the_real_triton_records_its_path(tmp_path: Path, triton_install) -> None:
    """Three settings (batching off; on with 0 and 500 µs), quick from the first, priced at
    100 req/s: tune.json has every step; its trials are ordinary rows of trials.csv that
    `report` draws and `recommend` ranks; a resumed run measures nothing again."""
    from servebench.analysis.loader import read_trials
    from servebench.results import TRIALS_FILE, TUNE_FILE
    from servebench.scenario.runner import ScenarioRunner

    tune = {"method": "quick", "objective": "cost_at_qps", "qps": 100}
    text = tiny_scenario(
        "tuned", settings=SETTINGS, workload=SEARCH, slo=SLO, cost={"instance": "c6i.xlarge"},
        tune=tune,
    )  # fmt: skip
    path = write(tmp_path, text)
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    run = outcome.directory.path
    assert outcome.status in ("complete", "partial"), outcome.reason
    search = json.loads((run / TUNE_FILE).read_text())
    assert (search["method"], search["objective"], search["qps"]) == ("quick", "cost_at_qps", 100)
    server = search["servers"]["triton"]
    assert server["axes"] == {"dynamic_batching": [False, True], "max_queue_delay_us": [0, 500]}
    steps = server["steps"]
    assert steps[0]["decision"] == "start" and "dynamic_batching=off" in steps[0]["setting"]
    assert steps[-1]["decision"] == "stopped" and steps[-1]["reason"]
    assert [s["step"] for s in steps] == list(range(len(steps)))
    trials = read_trials(run / TRIALS_FILE)
    measured = [t for s in steps for t in s["trials"]]
    assert len(measured) == len(set(measured)) == server["trials_spent"] == len(trials)
    assert set(measured) == set(trials["trial_id"])
    for step in steps:
        if step["trials"] and step["value"] is not None:
            (row,) = trials[trials.trial_id == step["trials"][0]].to_dict("records")
            assert step["value"] == pytest.approx(cost_at_qps(100, row["max_rate"], PRICE))
    cli = [sys.executable, "-m", "servebench.cli"]
    report = subprocess.run([*cli, "report", "html", str(run)], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    html = (run / "report.html").read_text()
    assert "Configuration search" in html and steps[0]["setting"] in html
    rec = subprocess.run(
        [*cli, "recommend", str(run), "--qps", "100", "--slo-p99-ms", "500"],
        capture_output=True,
        text=True,
    )
    # Ranked, or each setting said infeasible (0.5 s steps are too few requests to bound a
    # p99 from above on a busy machine): either way the run's settings are read.
    assert rec.returncode in (0, 1) and not rec.stderr, rec.stderr
    assert "triton[" in rec.stdout
    # Resumed: the same search, every setting read from the rows it measured.
    again = ScenarioRunner(path, resume=run).run()
    assert again.status == outcome.status
    assert json.loads((run / TUNE_FILE).read_text())["servers"]["triton"]["steps"] == steps
    assert len(read_trials(run / TRIALS_FILE)) == len(trials)


@pytest.mark.parametrize(
    "tune", [None, {"method": "quick", "objective": "p99", "qps": 20, "budget_trials": 1}]
)
def test_a_pause_during_the_last_trial_leaves_the_run_complete(
    tmp_path: Path, triton_install, tune: dict | None
) -> None:
    """A cluster pause (SIGUSR1) that arrives while the run's last trial measures left
    nothing out: the run is complete, not interrupted (a quick search runs a subset of the
    plan's trials, so "every planned trial has a row" cannot be the test). The pause is
    delivered from inside the trial, when its load starts, so the timing is exact."""
    from servebench.scenario.runner import ScenarioRunner

    one = {k: v for k, v in SEARCH.items() if k not in ("search", "search_settings")}
    # One trial: one setting, or a quick search with a budget of one over several.
    settings, sections = (SETTINGS, {"tune": tune}) if tune else ({"max_batch_size": 4}, {})
    text = tiny_scenario(
        "paused", settings=settings, workload={**one, "rates": [20]}, slo=SLO, **sections
    )
    runner = ScenarioRunner(write(tmp_path, text), output=tmp_path / "results")
    on_load_event = runner._on_load_event

    def pause_when_the_load_starts(event: object) -> None:
        on_load_event(event)
        if isinstance(event, Started):
            runner._pause()

    runner._on_load_event = pause_when_the_load_starts
    outcome = runner.run()
    assert (outcome.status, outcome.completed) == ("complete", 1), outcome.reason


def test_a_paused_run_leaves_its_report_to_the_resumed_run(
    tmp_path: Path, triton_install, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause (a cluster's preemption, SIGUSR1) with trials left writes no report.html:
    the job resumes soon, and plotting one would only lengthen every pause. The resumed
    run writes it."""
    from typer.testing import CliRunner

    from servebench.cli import app
    from servebench.scenario.runner import ScenarioRunner

    one = {k: v for k, v in SEARCH.items() if k not in ("search", "search_settings")}
    text = tiny_scenario(
        "paused", settings={"max_batch_size": [1, 4]}, workload={**one, "rates": [20]}, slo=SLO
    )
    path, results = write(tmp_path, text), tmp_path / "results"
    on_load_event = ScenarioRunner._on_load_event

    def pause_when_the_first_load_starts(self: ScenarioRunner, event: object) -> None:
        on_load_event(self, event)
        if isinstance(event, Started) and self.state.paused is None:
            self._pause()

    with monkeypatch.context() as patched:
        patched.setattr(ScenarioRunner, "_on_load_event", pause_when_the_first_load_starts)
        paused = CliRunner().invoke(app, ["scenario", "run", str(path), "--output", str(results)])
    (run,) = results.iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted", paused.output
    assert "report: not written (paused" in paused.output
    assert not (run / "report.html").exists()
    resumed = CliRunner().invoke(app, ["scenario", "run", str(path), "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
    assert (run / "report.html").is_file()


def test_a_replicated_quick_search_measures_each_batch_in_rounds(
    tmp_path: Path, triton_install
) -> None:
    """With repeats, each step's batch is measured in interleaved rounds — the start alone,
    then the start again beside its neighbours, its replicates numbered on, so each
    neighbour is compared with it over rounds they share — only that batch's settings are
    served, and each setting is valued on its settings.csv row: the p99's high end over
    replicates."""
    from servebench.results import TUNE_FILE, RunDirectory, read_setting_rows
    from servebench.scenario.runner import ScenarioRunner

    workload = {"rates": [40], "duration_s": 0.5, "warmup_s": 0.1, "timeout_s": 2,
                "repeats": 2, "remeasure": 0}  # fmt: skip
    # Start (batching off, one instance); its neighbours: batching on, and two instances.
    settings = {"max_batch_size": 4, "dynamic_batching": [False, True], "instance_count": [1, 2]}
    text = tiny_scenario(
        "replicated", settings=settings, workload={**workload, "batch_sizes": [1]},
        slo=SLO, tune={"method": "quick", "objective": "p99", "qps": 40},
    )  # fmt: skip
    outcome = ScenarioRunner(write(tmp_path, text), output=tmp_path / "results").run()
    assert outcome.status in ("complete", "partial"), outcome.reason
    run = RunDirectory.open(outcome.directory.path)
    rounds = run.run["rounds"]
    # The start's two rounds, then start and both neighbours in two rounds (and, if a
    # neighbour looked better, one round of the start and it: two rounds never decide).
    assert [len(r) for r in rounds[:4]] == [1, 1, 3, 3], rounds
    start = rounds[0][0]
    assert {i.split(".")[0] for i in rounds[2]} == {i.split(".")[0] for i in rounds[3]}
    assert {f"{start}.r3", f"{start}.r4"} <= set(rounds[2] + rounds[3])
    rows = {row["trial_id"]: row for row in read_setting_rows(run.path)}
    assert len(rows) >= 3 and all(r["replicates_planned"] == 2 for r in rows.values())
    search = json.loads((run.path / TUNE_FILE).read_text())["servers"]["triton"]
    assert search["replicate_trials"] == sum(len(r) for r in rounds)
    assert search["finalists"] == [search["best"]["setting"]]
    for step in search["steps"]:
        if step["trials"] and step["value"] is not None:
            (row,) = [r for r in rows.values() if step["trials"][0] in r["replicate_ids"]]
            if len(step["trials"]) == row["replicates"]:  # not measured again since
                assert step["value"] == pytest.approx(row["latency_p99_high"])
    # One server per batch: each batch's settings side by side in one folder.
    assert (run.path / "repos" / "shared-triton").is_dir()


# A race of three settings on the real Triton: batching on with no queue delay, 0.1 ms and
# 20 ms. At 40 req/s the last holds requests up to 20 ms for a batch: always the slowest.
RACE_SETTINGS = {"max_batch_size": 4, "dynamic_batching": True,
                 "max_queue_delay_us": [0, 100, 20000]}  # fmt: skip
# Its trials are 20 requests: one send 4 ms late on a busy machine is the lag p99, over
# half of a 5 ms latency p99, and the replicate would be INVALID (no value in its round,
# tests/test_race.py); the path is what is tested here, so the lag never invalidates.
RACE_WORKLOAD = {"rates": [40], "batch_sizes": [1], "duration_s": 0.5, "warmup_s": 0.1,
                 "timeout_s": 2, "repeats": 3, "remeasure": 0, "lag_ratio": 1000}  # fmt: skip
RACE = {"method": "race", "objective": "p99", "qps": 40, "first_rounds": 2}


def _race_scenario(tmp_path: Path) -> Path:
    text = tiny_scenario(
        "raced", settings=RACE_SETTINGS, workload=RACE_WORKLOAD, slo=SLO, tune=RACE
    )
    return write(tmp_path, text)


def _check_race(run: Path) -> dict:
    """What every race leaves: its looks and steps in tune.json, one trials.csv row per
    replicate it asked for, each setting's replicates numbered on from 1 and all in the
    rounds run.json records; the report draws its path."""
    from servebench.analysis.loader import read_trials
    from servebench.results import TRIALS_FILE, TUNE_FILE, read_run_json

    tune = json.loads((run / TUNE_FILE).read_text())
    assert (tune["method"], tune["level"], tune["first_rounds"], tune["over"]) == (
        "race", 0.05, 2, "all",
    )  # fmt: skip
    search = tune["servers"]["triton"]
    trials = read_trials(run / TRIALS_FILE)
    assert search["replicate_trials"] == len(trials) == len(set(trials["trial_id"]))
    rounds = read_run_json(run / "run.json")["rounds"]
    assert sorted(i for one in rounds for i in one) == sorted(trials["trial_id"])
    assert [len(one) for one in rounds[:2]] == [3, 3]  # the first block: every setting
    looks = search["looks"]
    assert looks and looks[0]["round"] >= 2 and looks[0]["settings"] == 3
    for look in looks:
        assert 0 <= look["p"] <= 1 and look["level"] == pytest.approx(0.0498, abs=1e-4)
        assert 2 <= look["rounds_compared"] <= look["round"]
    steps = search["steps"]
    dropped = {s["setting"] for s in steps if s["decision"] == "dropped"}
    assert dropped == {n for look in looks for n in look["dropped"]}
    assert [s["setting"] for s in steps if s["decision"] in ("best", "tied")] == search["finalists"]
    assert search["best"]["setting"] == search["finalists"][0]
    # Each setting measured in every round until it was dropped, numbered on: .r2, .r3.
    # Its step names the replicates that count (VALID, not disturbed): a replicate the
    # load generator's lag made INVALID is measured but gives no value in its round.
    for step in steps:
        last = next((lk["round"] for lk in looks if step["setting"] in lk["dropped"]), None)
        measured = trials[trials["setting"] == step["setting"]]
        assert len(measured) == (last or len(rounds)), (step, list(measured["trial_id"]))
        assert set(step["trials"]) <= set(measured["trial_id"])
    # The 20 ms queue delay is the slowest in every round: never the answer.
    slow = next(s["setting"] for s in steps if "20000" in s["setting"])
    assert search["best"]["setting"] != slow
    report = subprocess.run(
        [sys.executable, "-m", "servebench.cli", "report", "html", str(run)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    html = (run / "report.html").read_text()
    assert "Friedman" in html and search["finalists"][0] in html
    return search


def test_a_race_on_the_real_triton_keeps_its_path(tmp_path: Path, triton_install) -> None:
    """Three settings in two rounds, then a look after each round up to three: tune.json
    keeps every look (its statistic, p-value, level, rank sums, drops, survivors) and
    every setting's fate; the report draws them."""
    from servebench.scenario.runner import ScenarioRunner

    outcome = ScenarioRunner(_race_scenario(tmp_path), output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    search = _check_race(outcome.directory.path)
    assert search["stop_reason"]


def test_an_interrupted_race_resumes_with_the_same_replicates(
    tmp_path: Path, triton_install
) -> None:
    """Paused (a cluster's SIGUSR1) when its fourth replicate starts, a race leaves three
    measured; resumed, it replays its asks — the same rounds, the same replicate ids —
    measures only what is missing, and ends as a race does."""
    from servebench.results import RunDirectory
    from servebench.scenario.runner import ScenarioRunner

    path = _race_scenario(tmp_path)
    runner = ScenarioRunner(path, output=tmp_path / "results")
    on_load_event, loads = runner._on_load_event, []

    def pause_at_the_fourth_load(event: object) -> None:
        on_load_event(event)
        if isinstance(event, Started):
            loads.append(event)
            if len(loads) == 4:
                runner._pause()

    runner._on_load_event = pause_at_the_fourth_load
    paused = runner.run()
    assert paused.status == "interrupted", paused.reason
    run = paused.directory.path
    first = RunDirectory.open(run)
    assert len(first.rows) == 4  # the paused replicate finishes
    drawn = first.run["rounds"]
    resumed = ScenarioRunner(path, resume=run).run()
    assert resumed.status == "complete", resumed.reason
    again = RunDirectory.open(run)
    # The rounds drawn before the pause are drawn again, the same; nothing measured twice.
    assert again.run["rounds"][: len(drawn)] == drawn
    written = {r.trial_id: first.trial_records_path(r.trial_id).stat().st_mtime_ns
               for r in first.rows if r.status == "ok"}  # fmt: skip
    for trial_id, when in written.items():
        assert again.trial_records_path(trial_id).stat().st_mtime_ns == when, (
            f"{trial_id}, measured before the pause, was measured again"
        )
    _check_race(run)
