"""A weighted mix of two models in one trial (`workload.mix`), against the real local Triton:
open and closed loop, the records' model column against the weights, the per-model columns,
the seeded sequence, the plan's ids, and validation of the mix.

Shares are held to a binomial bound: each request goes to the model of weight share p
independently (a seeded draw), so of n requests the model's count has standard deviation
sqrt(n p (1 - p)); a share within 4.5 of those is a match (a fair draw misses it about
once in 150,000 runs; with the scenario's fixed seed the draw is the same every run).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from scenario_checks import problems, write
from typer.testing import CliRunner

from model_zoo.spec import parse_spec
from servebench.analysis.report import write_report
from servebench.cli import app
from servebench.load.mix import Mix, MixTarget
from servebench.pricing import cost_per_million
from servebench.scenario.plan import ModelMix, expand
from servebench.scenario.runner import ScenarioRunner
from servebench.scenario.validate import load_scenario

SIGMAS = 4.5
A = {"layer_type": "dense", "depth": 1, "width": 8, "input_shape": [4], "num_outputs": 3}
B = {"layer_type": "dense", "depth": 2, "width": 16, "input_shape": [4], "num_outputs": 3}
A_ID, B_ID = parse_spec(A).id, parse_spec(B).id
SEED = 5


def mix_scenario(load: str, mix: str | None = None, *, models: str = "") -> str:
    """Two small dense models on the local Triton, `load` lines under workload, and a mix
    of them 3:1 (or `mix`'s lines)."""
    mix = mix or f"    - {{model: {A_ID}, weight: 3}}\n    - {{model: {B_ID}, weight: 1}}\n"
    return (
        "name: mixed\n"
        f"seed: {SEED}\n"
        "models:\n"
        "  specs:\n"
        f"    - {json.dumps(A)}\n"
        f"    - {json.dumps(B)}\n"
        f"{models}"
        "servers:\n"
        "  - {name: triton, api: triton, settings: {max_batch_size: 4}}\n"
        "workload:\n"
        f"{load}"
        "  warmup_s: 0.2\n"
        "  timeout_s: 5\n"
        "  mix:\n"
        f"{mix}"
        "slo: {percentile: 99, latency_ms: 500}\n"
        "cost: {instance: c6i.xlarge}\n"
    )


def within_binomial(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


def test_the_plan_has_one_trial_per_level_with_the_mix_as_its_model(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, mix_scenario("  rates: [50, 100]\n")))
    plan = expand(scenario, tmp_path)
    assert [m.id for m in plan.models] == [A_ID, B_ID]  # both exported and loaded
    assert len(plan.trials) == 2
    model = plan.trials[0].model
    assert isinstance(model, ModelMix)
    assert model.id == f"mix({A_ID}*3+{B_ID}*1)"
    assert plan.trials[0].coordinates["model"] == model.id
    assert [m.id for m in plan.trials[0].models] == [A_ID, B_ID]
    # Without the mix the same scenario has a trial per model, with the ids it always had.
    lines = mix_scenario("  rates: [50, 100]\n").splitlines(keepends=True)
    plain = "".join(lines[: lines.index("  mix:\n")] + lines[lines.index("  mix:\n") + 3 :])
    trials = expand(load_scenario(write(tmp_path, plain, "plain.yaml")), tmp_path).trials
    assert [t.model.id for t in trials] == [A_ID, A_ID, B_ID, B_ID]


@pytest.mark.parametrize(
    "load",
    ["  rates: [150]\n  requests: 450\n", "  mode: closed\n  concurrency: [3]\n  requests: 450\n"],
    ids=["open", "closed"],
)
def test_a_mix_runs_as_one_trial_with_shares_by_weight(tmp_path: Path, triton_install, load):
    path = write(tmp_path, mix_scenario(load + "  duration_s: 0.5\n"), "mix.yaml")
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    run = outcome.directory.path
    (row,) = pd.read_csv(run / "trials.csv").itertuples()
    assert row.model == f"mix({A_ID}*3+{B_ID}*1)" and row.status == "ok"
    records = pq.read_table(run / "records.parquet").to_pandas().sort_values("seq")
    assert len(records) == row.count >= 450 and records.ok.all()
    # The records' model column: every request names its model, in the shares of the weights.
    assert set(records.model) == {A_ID, B_ID}
    n, a = len(records), int((records.model == A_ID).sum())
    assert within_binomial(a, n, 0.75), (a, n)
    # The seeded sequence: request seq went to the model the scenario's seed picks for it,
    # so a rerun with the same seed sends the same sequence.
    picker = Mix([MixTarget(m, w, None, (None,)) for m, w in ((A_ID, 3), (B_ID, 1))], SEED)  # type: ignore[arg-type]
    codes = picker.codes(records.seq.to_numpy())
    assert list(records.model) == [(A_ID, B_ID)[code - 1] for code in codes]
    # The per-model columns, from the same requests as the row's whole-system figures.
    mix = json.loads(row.mix_json)
    assert set(mix) == {A_ID, B_ID}
    assert mix[A_ID]["count"] == a and mix[B_ID]["count"] == n - a
    assert mix[A_ID]["weight"] == 3 and mix[B_ID]["weight"] == 1
    assert mix[A_ID]["share"] == pytest.approx(a / n)
    for model, figures in mix.items():
        mine = records[records.model == model].latency
        assert figures["errors"] == 0 and figures["ok"] == figures["count"]
        assert 0 < figures["latency_p50"] <= figures["latency_p99"] <= mine.max()
    # Cost and recommend take the mix as one deployment, at the whole system's throughput.
    assert row.cost_per_million == pytest.approx(
        cost_per_million(row.throughput_ips, row.usd_per_hour)
    )
    answer = CliRunner().invoke(app, ["recommend", str(run), "--json"])
    assert answer.exit_code in (0, 1), answer.output  # 1: no option meets the SLO
    (ranking,) = json.loads(answer.output)["rankings"]
    assert ranking["model"] == row.model
    # The report shows each model's share and p99 of a mix trial.
    html = write_report(run).path.read_text()
    section = html[html.index('<section id="mix">') :].split("</section>")[0]
    for model in (A_ID, B_ID):
        assert model in section
    assert f"{mix[B_ID]['latency_p99'] * 1e3:,.1f}" in section and "25.0%" in section


def test_mix_problems_are_one_line_each_all_at_once(tmp_path: Path):
    bad = (
        f"    - {{model: {A_ID}, weight: 0}}\n"
        f"    - {{model: {B_ID}, weight: .nan}}\n"
        "    - {model: dense-d9-w9-000000, weight: -1}\n"
        "    - {model: no-such-model, weight: 2}\n"
    )
    text = mix_scenario("  rates: [50]\n", bad)
    path = tmp_path / "s.yaml"
    found = problems(tmp_path, text)
    assert found == [
        f"{path}:14 workload.mix[0].weight: 0 — must be > 0",
        f"{path}:15 workload.mix[1].weight: nan — must be a finite number",
        f"{path}:16 workload.mix[2].weight: -1 — must be > 0",
        found[3],
        found[4],
    ], found
    assert found[3].startswith(
        f"{path}:16 workload.mix[2].model: 'dense-d9-w9-000000' — not a model of this scenario"
    )
    assert found[4].startswith(f"{path}:17 workload.mix[3].model: 'no-such-model' — not a model")
    assert A_ID in found[4] and "scenario plan" in found[4]
    result = CliRunner().invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 2 and result.output.count("error:") == 5, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "mix, expected",
    [
        (f"    - {{model: {A_ID}, weight: 1}}\n", "must have at least 2 item"),
        (
            f"    - {{model: {A_ID}, weight: 1}}\n    - {{model: {A_ID}, weight: 2}}\n",
            f"15 workload.mix[1].model: '{A_ID}' — '{A_ID}' is in the mix already",
        ),
        (
            f"    - {{model: {A_ID}, weight: .inf}}\n    - {{model: {B_ID}, weight: 1}}\n",
            "14 workload.mix[0].weight: inf — must be a finite number",
        ),
    ],
    ids=["one-model", "duplicate", "inf"],
)
def test_other_mix_problems(tmp_path: Path, mix: str, expected: str):
    (found,) = problems(tmp_path, mix_scenario("  rates: [50]\n", mix))
    assert expected in found, found
