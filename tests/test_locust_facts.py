"""Locust runs keep what their scenario says and the load cannot (issue 15 item 4): the
cloud instance and its price, the SLO, and each model's size and FLOP counts, so that the
report prices them and `servebench recommend` ranks them — as closed-loop measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_locust import ROOT, headless_ui

from model_zoo.counting import count
from servebench.analysis.loader import load_run
from servebench.analysis.recommend import Query, price_run, recommend
from servebench.analysis.report import write_report
from servebench.cli.ui_launcher import scenario_facts, setup_from_scenario
from servebench.locust.facts import TrialFacts, read_facts
from servebench.locust.launch import Target, locust_argv
from servebench.locust.records import Coordinates, RecordCollector
from servebench.locust.results import LocustRun
from servebench.pricing import load_prices
from servebench.scenario.plan import expand
from servebench.scenario.validate import load_scenario
from servebench.trial_row import ModelColumns

QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def test_the_quickstart_says_its_instance_slo_and_model_counts(tmp_path: Path) -> None:
    setup = setup_from_scenario(QUICKSTART, None, tmp_path)
    facts = setup.facts
    assert facts is not None
    assert facts.instance == "c6i.xlarge"
    assert facts.usd_per_hour == load_prices()["c6i.xlarge"].usd_per_hour
    assert facts.slo_percentile == 99.0 and facts.slo_latency_s == pytest.approx(0.5)
    plan = expand(load_scenario(QUICKSTART), QUICKSTART.parent)
    assert set(facts.models) == {m.id for m in plan.models}
    spec = plan.models[0]
    assert facts.models[spec.id].flops_per_sample == count(spec).flops > 0
    assert facts.models[spec.id].layer_type == spec.layer_type
    # What the launcher writes is what the Locust process reads.
    path = tmp_path / "facts.json"
    path.write_text(facts.to_json())
    assert read_facts(path) == facts


def test_a_scenario_price_override_is_the_price(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        QUICKSTART.read_text().replace(
            "cost: {instance: c6i.xlarge}",
            "cost: {instance: my.box, prices: {my.box: {usd_per_hour: 0.05}}}",
        )
    )
    facts = scenario_facts(load_scenario(scenario), [])
    assert (facts.instance, facts.usd_per_hour) == ("my.box", 0.05)


def test_the_swarm_is_priced_as_the_scenario_runner_prices(tmp_path: Path) -> None:
    """One price builder (`CostSection.price`, the scenario runner's): an override of a
    shipped instance's price keeps the shipped entry's vcpus, and `servebench ui` says
    what it says."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        QUICKSTART.read_text().replace(
            "cost: {instance: c6i.xlarge}",
            "cost: {instance: c6i.xlarge, prices: {c6i.xlarge: {usd_per_hour: 0.2}}}",
        )
    )
    loaded = load_scenario(scenario)
    price = loaded.cost.price()
    assert (price.usd_per_hour, price.vcpus) == (0.2, load_prices()["c6i.xlarge"].vcpus)
    facts = scenario_facts(loaded, [])
    assert (facts.instance, facts.usd_per_hour) == (price.instance_type, price.usd_per_hour)


def test_the_launcher_passes_the_facts_file() -> None:
    argv = locust_argv(
        Target(host="http://h:1", model="m"), results_dir=Path("out"), run_id="r",
        scenario=None, port=0, headless=True, users=1, spawn_rate=1.0, run_time="1s",
        extra=[], trial_facts=Path("/tmp/facts.json"),
    )  # fmt: skip
    assert argv[argv.index("--trial-facts") + 1] == "/tmp/facts.json"


def _swarm(run: LocustRun, model: str, answers: int = 50) -> dict:
    collector = RecordCollector()
    coords = Coordinates("http://h:1", "triton", "triton-http", model, "", 1, "direct")
    for i in range(answers):  # 10 ms each, one every 20 ms
        collector.add(coords, 1000 + 0.02 * i, 1000 + 0.02 * i + 0.01, None, 10, 20)
    (row,) = run.add_swarm(run.start_swarm(), collector.snapshot(), users=1)
    return row


def test_trial_rows_carry_cost_slo_and_model_columns(tmp_path: Path) -> None:
    facts = TrialFacts(
        instance="c6i.xlarge",
        usd_per_hour=0.17,
        slo_percentile=99.0,
        slo_latency_s=0.05,
        models={"m": ModelColumns(layer_type="dense", depth=2, flops_per_sample=4096.0)},
    )
    run = LocustRun(tmp_path, "r1", facts=facts)
    row = _swarm(run, "m", answers=400)  # enough to bound p99 from above (368)
    assert row["instance"] == "c6i.xlarge" and row["usd_per_hour"] == 0.17
    assert row["cost_per_million"] == pytest.approx(0.17 / (row["throughput_ips"] * 3600) * 1e6)
    assert row["flops_per_sample"] == 4096.0 and row["layer_type"] == "dense"
    assert row["slo_latency_s"] == pytest.approx(0.01)
    assert row["slo_latency_high"] == pytest.approx(0.01) and row["slo_met"] == "met"
    other = _swarm(run, "not-in-the-scenario")
    assert other.flops_per_sample is None and other.instance == "c6i.xlarge"
    run.finish()
    assert json.loads((run.path / "run.json").read_text())["instance"] == "c6i.xlarge"
    page = write_report(run.path).path.read_text()
    assert "scenario named no cloud instance" not in page
    # recommend ranks it, as a closed-loop measurement with its warning.
    priced = price_run(load_run(run.path, records=False), load_prices())
    result = recommend([priced], Query(slo_s=0.05, qps=100.0))
    assert result.best is not None and result.best.option.closed_loop
    assert result.best.option.instance == "c6i.xlarge"
    assert any("closed-loop measurements only" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"cost": {"instance": "x", "usd_per_hour": -1}}, "cost.usd_per_hour"),
        ({"slo": {"percentile": "ninety"}}, "could not convert"),
        ({"models": ["m"]}, "--trial-facts"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_bad_facts_name_the_file_and_field(tmp_path: Path, document, field: str) -> None:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=field) as caught:
        read_facts(path)
    assert str(path) in str(caught.value)


def test_servebench_ui_from_a_scenario_prices_its_swarm(triton_dense_model, tmp_path: Path):
    """The whole way: `servebench ui SCENARIO --host ...` writes the facts, the Locust child
    reads them, and the swarm's row is priced on the scenario's instance."""
    _, run_dir = headless_ui(tmp_path, triton_dense_model, str(QUICKSTART))
    trials = pd.read_csv(run_dir / "trials.csv")
    assert (trials["instance"] == "c6i.xlarge").all()
    assert np.isfinite(trials["cost_per_million"]).all()
    assert (trials["slo_bound_s"] == 0.5).all() and trials["slo_met"].notna().all()
