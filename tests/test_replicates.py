"""Replicates in randomized rounds (issue 34): the order they run in, what a setting's row
says over them, that interleaving cancels a drift that measuring one setting after the
other turns into a difference, and that a resumed run measures only what is missing.

The drift needs a server whose service time is known: a python-backend model on the real
local Triton that sleeps `base + slope × (now − origin)` per request, so every later
request is slower, whichever setting it goes to. Two settings that differ only in a 1 µs
queue delay (at one client in flight the batcher never waits) are the same setting twice.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from scenario_checks import write

from servebench.common.replicates import cv_band, median_interval, summarize
from servebench.results import RunDirectory, read_setting_rows
from servebench.scenario import round_runner
from servebench.scenario.plan import expand
from servebench.scenario.rounds import Replicate, draw_rounds, replicate_id, rounds_from_json
from servebench.scenario.validate import load_scenario

# -- the order of the rounds ------------------------------------------------------------------


def _plan_trials(tmp_path: Path, instances: str = "[1, 2]", delays: str = "[0, 1000]"):
    text = textwrap.dedent(f"""\
        name: order
        models:
          specs: [{{layer_type: dense, depth: 1, width: 8, input_shape: [4]}}]
        servers:
          - name: a
            api: triton
            settings: {{max_batch_size: 4, dynamic_batching: true, max_queue_delay_us: {delays},
                        instance_count: {instances}}}
          - name: b
            api: triton
            settings: {{max_batch_size: 4, dynamic_batching: false}}
        workload: {{rates: [10, 20]}}
        """)
    plan = expand(load_scenario(write(tmp_path, text)), tmp_path)
    return plan.trials


def test_every_round_measures_every_trial_once_in_a_seeded_order(tmp_path: Path) -> None:
    trials = _plan_trials(tmp_path)  # 5 settings x 2 rates
    group = lambda t: t.setting.server.name  # noqa: E731 - the servers as groups
    rounds = draw_rounds(trials, 6, seed=3, group=group)
    assert len(rounds) == 6
    for number, one in enumerate(rounds, start=1):
        assert sorted(r.trial.id for r in one) == sorted(t.id for t in trials)
        assert {r.round for r in one} == {number} and {r.replicate for r in one} == {number}
        assert [r.position for r in one] == list(range(1, len(trials) + 1))
        # A group's trials run together (one server start), its members in a random order.
        servers = [r.trial.setting.server.name for r in one]
        assert servers == sorted(servers, key=servers.index)
    for before, after in itertools.pairwise(rounds):
        assert before[-1].trial is not after[0].trial  # never the same setting back to back
    orders = {tuple(r.trial.id for r in one) for one in rounds}
    assert len(orders) > 1, "every round in the same order: nothing was drawn"
    again = draw_rounds(trials, 6, seed=3, group=group)
    assert [[r.id for r in one] for one in again] == [[r.id for r in one] for one in rounds]
    other = draw_rounds(trials, 6, seed=4, group=group)
    assert [[r.id for r in one] for one in other] != [[r.id for r in one] for one in rounds]


def test_one_round_keeps_the_plans_order_and_ids(tmp_path: Path) -> None:
    trials = _plan_trials(tmp_path)
    (only,) = draw_rounds(trials, 1, seed=0, group=lambda t: 0)
    assert [r.id for r in only] == [t.id for t in trials]  # runs before replicates read alike


def test_replicate_ids_and_recorded_rounds_read_back(tmp_path: Path) -> None:
    trials = _plan_trials(tmp_path)
    assert replicate_id("tabc", 1) == "tabc" and replicate_id("tabc", 3) == "tabc.r3"
    assert replicate_id("tabc", 3, 1) == "tabc.r3.m1"
    rounds = draw_rounds(trials, 3, seed=0, group=lambda t: 0)
    recorded = [[r.id for r in one] for one in rounds] + [[replicate_id(trials[0].id, 2, 1)]]
    back = rounds_from_json(json.loads(json.dumps(recorded)), trials)
    assert back is not None
    assert [[r.id for r in one] for one in back] == recorded
    assert back[-1][0] == Replicate(trials[0], 2, 4, 1, attempt=1)
    assert rounds_from_json([["tnothere"]], trials) is None
    assert rounds_from_json("garbage", trials) is None


# -- a setting's figures over its replicates -----------------------------------------------------


def test_the_median_interval_is_the_issues_order_statistics() -> None:
    six = [5.0, 1.0, 4.0, 2.0, 6.0, 3.0]
    assert median_interval(six) == (1.0, 6.0, pytest.approx(0.96875))
    nine = list(range(1, 10))
    assert median_interval(nine) == (2, 8, pytest.approx(0.9609375))
    low, high, coverage = median_interval([1.0, 2.0, 3.0, 4.0, 5.0])  # R = 5: [min, max]
    assert (low, high) == (1.0, 5.0) and coverage == pytest.approx(0.9375)
    summary = summarize([10.0, 11.0, 12.0, 13.0, 14.0])
    assert summary.median == 12.0 and (summary.rerun_low, summary.rerun_high) == (10.0, 14.0)
    assert summary.rerun_coverage == pytest.approx(4 / 6)
    assert summary.cv == pytest.approx(math.sqrt(2.5) / 12)
    one = summarize([7.0])
    assert one.median == 7.0 and math.isnan(one.low) and math.isnan(one.rerun_low)
    assert [cv_band(c) for c in (0.03, 0.07, 0.15, 0.5)] == [
        "quiet", "moderate", "noisy", "unstable",
    ]  # fmt: skip


# -- drift: interleaved rounds against one setting after the other ------------------------------

DRIFT_MODEL = '''
import itertools
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sleeps base + slope x (now - origin) per request: every later request is slower."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.origin, self.base, self.slope = (
            float(parameters[name]["string_value"]) for name in ("origin", "base", "slope")
        )

    def execute(self, requests):
        answers = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            time.sleep(self.base + self.slope * (time.time() - self.origin))
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x.copy())]))
        return answers
'''


def _drift_model(folder: Path, *, base_s: float, slope: float) -> Path:
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(DRIFT_MODEL)
    parameters = {"origin": time.time(), "base": base_s, "slope": slope}
    (folder / "config.pbtxt").write_text(
        'name: "drift"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [2] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [2] }]\n'
        + "".join(
            f'parameters {{ key: "{k}" value {{ string_value: "{v!r}" }} }}\n'
            for k, v in parameters.items()
        )
    )
    return folder


def _drift_run(tmp_path: Path, name: str) -> tuple[float, float]:
    """Run two identical settings, five replicates each, against a fresh drift model;
    return each setting's median p50 over its replicates (seconds)."""
    from servebench.scenario.runner import ScenarioRunner

    folder = tmp_path / name
    folder.mkdir()
    # 2 ms, then 2 ms more per second: about 1 ms more per replicate slot.
    _drift_model(folder / "drift", base_s=0.002, slope=0.002)
    path = write(
        folder,
        textwrap.dedent("""\
            name: drift
            seed: 5
            models:
              files: [{path: drift, name: drift}]
            servers:
              - name: triton
                api: triton
                settings: {max_batch_size: 4, dynamic_batching: true,
                           max_queue_delay_us: [0, 1]}
            workload:
              mode: closed
              concurrency: [1]
              duration_s: 1.0
              warmup_s: 0.1
              timeout_s: 5
              repeats: 5
              remeasure: 0  # the order under test is the drawn one
            """),
    )
    outcome = ScenarioRunner(path, output=folder / "results").run()
    assert outcome.status == "complete", outcome.reason
    settings = read_setting_rows(outcome.directory.path)
    assert [row["replicates"] for row in settings] == [5, 5]
    first, second = (row["latency_p50"] for row in settings)
    return first, second


def test_interleaved_rounds_cancel_a_drift_that_blocks_turn_into_a_difference(
    tmp_path: Path, triton_install, monkeypatch: pytest.MonkeyPatch
) -> None:
    interleaved = _drift_run(tmp_path, "interleaved")

    def blocked(trials, repeats, seed, group, *, first=1):
        """All of the first setting's replicates, then all of the second's."""
        order = [(t, k) for t in trials for k in range(1, repeats + 1)]
        return [[Replicate(t, k, first, i + 1) for i, (t, k) in enumerate(order)]]

    monkeypatch.setattr(round_runner, "draw_rounds", blocked)
    one_after_the_other = _drift_run(tmp_path, "blocked")

    def gap(pair: tuple[float, float]) -> float:
        return abs(pair[0] - pair[1]) / min(pair)

    # Blocked, the second setting's five replicates all come after the first's: its median
    # is about five slots (~5 ms on ~10-20 ms) later in the drift. Interleaved, the two
    # alternate, so their medians are at most a slot apart. Slack: a busy machine adds the
    # same noise to both runs; the blocked gap is several times the interleaved one.
    assert gap(one_after_the_other) > 0.2, one_after_the_other
    assert gap(interleaved) < gap(one_after_the_other) / 2, (interleaved, one_after_the_other)


# -- resume ------------------------------------------------------------------------------------


def test_resume_measures_only_the_missing_replicates_in_the_recorded_order(
    tmp_path: Path, triton_install
) -> None:
    path = write(
        tmp_path,
        textwrap.dedent("""\
            name: resume
            seed: 2
            models:
              specs: [{layer_type: dense, depth: 1, width: 8, input_shape: [4]}]
            servers:
              - name: triton
                api: triton
                settings: {max_batch_size: 4, dynamic_batching: [false, true]}
            workload:
              rates: [40]
              duration_s: 0.5
              warmup_s: 0.1
              timeout_s: 2
              repeats: 3
              remeasure: 0  # a busy machine must not add re-measurements to the count
            """),
    )
    results = tmp_path / "results"
    command = [sys.executable, "-m", "servebench.cli", "scenario", "run", str(path)]
    child = subprocess.Popen(
        [*command, "--output", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    run_dir = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and child.poll() is None:
        found = list(results.glob("resume-*/trials.csv"))
        if found and len(pd.read_csv(found[0])) >= 2:
            run_dir = found[0].parent
            os.kill(child.pid, signal.SIGUSR1)  # a pause: the trial in flight finishes
            break
        time.sleep(0.2)
    output, _ = child.communicate(timeout=120)
    assert run_dir is not None, output
    before = RunDirectory.open(run_dir)
    done = [r.trial_id for r in before.rows if r.status == "ok"]
    assert 2 <= len(done) < 6, output
    recorded = [i for one in before.run["rounds"] for i in one]
    assert len(recorded) == 6

    resumed = subprocess.run(
        [*command, "--resume", str(run_dir)], capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = RunDirectory.open(run_dir)
    assert after.run["rounds"] == before.run["rounds"]  # the order drawn once
    ids = [r.trial_id for r in after.rows]
    assert sorted(ids) == sorted(recorded) and len(ids) == len(set(ids))
    # The rows are added as measured: the missing ones, in the recorded order.
    assert ids[len(done) :] == [i for i in recorded if i not in done]
    settings = read_setting_rows(run_dir)
    # Each setting's three replicates are in its row (a busy machine may make one INVALID).
    assert [row["replicates"] + row["replicates_failed"] for row in settings] == [3, 3]


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "2.5", '"5"', "100000", "true"])
def test_a_bad_repeats_is_one_line_naming_it(tmp_path: Path, value: str) -> None:
    path = write(
        tmp_path,
        textwrap.dedent(f"""\
            name: bad
            models:
              specs: [{{layer_type: dense, depth: 1, width: 8, input_shape: [4]}}]
            servers: [{{name: triton, api: triton}}]
            workload:
              rates: [10]
              repeats: {value}
            """),
    )
    done = subprocess.run(
        [sys.executable, "-m", "servebench.cli", "scenario", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and f"{path}:7 workload.repeats" in lines[0], lines
    assert "Traceback" not in done.stderr


# -- interference ------------------------------------------------------------------------------


def test_a_replicate_disturbed_on_purpose_is_flagged_and_measured_again(
    tmp_path: Path, triton_install
) -> None:
    """Two CPU burners (this test's children, not the run's: the run excludes its own
    process tree) run until the first replicate is recorded: that replicate is flagged
    `interference_other_load` and measured again at the end of the next round."""
    from cpu_burner import cpu_burners

    path = write(
        tmp_path,
        textwrap.dedent("""\
            name: disturbed
            models:
              specs: [{layer_type: dense, depth: 1, width: 8, input_shape: [4]}]
            servers:
              - name: triton
                api: triton
                settings: {max_batch_size: 4, dynamic_batching: false}
            workload:
              mode: closed
              concurrency: [1]
              duration_s: 2
              warmup_s: 0.2
              timeout_s: 5
              repeats: 2
              remeasure: 1
            """),
    )
    results = tmp_path / "results"
    command = [sys.executable, "-m", "servebench.cli", "scenario", "run", str(path)]
    with cpu_burners(2):
        child = subprocess.Popen(
            [*command, "--output", str(results)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:
            if list(results.glob("disturbed-*/trials.csv")):
                break  # the first replicate is recorded: the burners stop
            time.sleep(0.05)
    output, _ = child.communicate(timeout=240)
    assert child.returncode == 0, output
    (run_dir,) = results.glob("disturbed-*")
    rows = {r.trial_id: r for r in RunDirectory.open(run_dir).rows}
    first = next(r for r in rows.values() if r.replicate == 1 and r.remeasure_of is None)
    assert "interference_other_load" in (first.verdict_warning_codes or ""), first
    assert first.interference_other_cpu is not None and first.interference_other_cpu > 0.38
    assert first.remeasured is True
    again = [r for r in rows.values() if r.remeasure_of == first.trial_id]
    assert len(again) == 1 and again[0].replicate == 1 and again[0].round == 2
    # At most `remeasure: 1` time, whatever the machine does to the second measurement.
    assert not any(r.remeasure_of == again[0].trial_id for r in rows.values())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["interference"]["remeasured"] >= 1
    assert any("re-measured for interference" in w for w in run["warnings"])
    (setting,) = read_setting_rows(run_dir)
    assert setting["replicates_remeasured"] >= 1 and "remeasured" in setting["warning_codes"]
    assert first.trial_id not in str(setting["replicate_ids"]).split(";")
