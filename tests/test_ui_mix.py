"""`servebench ui` with a scenario whose model is a weighted mix (`workload.mix`).

The mix reaches the Locust users as the scenario names its trial's model,
`mix(a*3+b*1)`: each request goes to the model a seeded draw by weight picks, and the run
has what a scenario run of a mix has — one trial row whose model is the mix's id, with
each model's figures in `mix_json`, and records whose `model` column names the model each
request went to. The headless run starts the real local Triton with both models loaded,
as `tests/test_locust.py`'s `servebench ui` runs do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_locust import _env
from test_scenario_mix import A_ID, B_ID, mix_scenario, within_binomial

from servebench.cli.ui_launcher import resolve, setup_from_scenario
from servebench.locust.launch import LaunchError
from servebench.locust.mix import ModelChoice, mix_members
from servebench.locust.records import Coordinates, RecordCollector
from servebench.locust.results import LocustRun
from servebench.locust.settings import user_settings
from servebench.results import read_mix

MIX_ID = f"mix({A_ID}*3+{B_ID}*1)"


def test_a_mix_scenario_runs_in_the_ui_headless(tmp_path: Path) -> None:
    scenario = tmp_path / "mixed.yaml"
    scenario.write_text(mix_scenario("  mode: closed\n  concurrency: [2]\n"))
    proc = subprocess.run(
        [
            sys.executable, "-c", "from servebench.cli import main; main()", "ui",
            str(scenario), "--headless", "-u", "3", "-t", "4s",
            "--results", str(tmp_path / "results"),
        ],
        capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert f"exporting {A_ID}, {B_ID} for the local Triton" in output
    assert f"model {MIX_ID}" in output and "local Triton stopped" in output
    (run_dir,) = (tmp_path / "results").iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["source"] == "locust"
    assert run["locust"]["model"] == MIX_ID and run["locust"]["seed"] == 5
    (row,) = pd.read_csv(run_dir / "trials.csv").to_dict("records")
    assert row["model"] == MIX_ID and row["errors"] == 0
    records = pq.read_table(run_dir / "records.parquet").to_pandas()
    assert len(records) == row["count"] > 0 and records["ok"].all()
    counts = records["model"].value_counts().to_dict()
    assert set(counts) == {A_ID, B_ID}  # every request names the model it went to
    assert within_binomial(counts[A_ID], len(records), 0.75), counts
    mix = read_mix(row["mix_json"])  # each model's figures, as a scenario run's row has
    assert list(mix) == [A_ID, B_ID]
    assert [mix[m].count for m in mix] == [counts[A_ID], counts[B_ID]]
    assert [mix[m].weight for m in mix] == [3.0, 1.0] and mix[B_ID].errors == 0


def test_the_scenario_hands_the_users_its_mix(tmp_path: Path) -> None:
    scenario = tmp_path / "mixed.yaml"
    scenario.write_text(mix_scenario("  mode: closed\n  concurrency: [2]\n"))
    setup = setup_from_scenario(scenario, None, tmp_path)
    assert setup.target.model == MIX_ID and setup.target.seed == 5
    assert setup.to_start is not None
    assert [spec.id for spec in setup.to_start.specs] == [A_ID, B_ID]  # both loaded
    with pytest.raises(LaunchError, match=r"^--model 'mix\(a\*x\)': a mix is mix\(MODEL"):
        resolve(setup, {"model": "mix(a*x)"})


def test_mix_members_read_a_scenarios_mix_id() -> None:
    assert mix_members("dense-d1") is None
    assert mix_members(MIX_ID) == ((A_ID, 3.0), (B_ID, 1.0))
    for bad in ("mix(a)", "mix(a*0+b*1)", "mix(*2)", "mix(a*1+a*2)", "mix(a*nan)"):
        with pytest.raises(ValueError, match=r"^--model "):
            mix_members(bad)
    options = SimpleNamespace(model="mix(a*1+b)", seed="3")
    with pytest.raises(ValueError, match=r"^--model 'mix\(a\*1\+b\)'"):
        user_settings(options, "http://h:1", "triton-http")
    settings = user_settings(SimpleNamespace(model=MIX_ID, seed="3"), "http://h:1")
    assert settings.is_mix and settings.seed == 3
    assert settings.for_model(B_ID).request_name == f"{B_ID} b1 triton-http"


def test_the_draw_is_seeded_and_follows_the_weights() -> None:
    first, again = ModelChoice((3.0, 1.0), seed=5), ModelChoice((3.0, 1.0), seed=5)
    picks = [first.next() for _ in range(4000)]
    assert picks == [again.next() for _ in range(4000)]
    assert within_binomial(picks.count(0), len(picks), 0.75)
    assert set(picks) == {0, 1}


def test_a_mix_trial_names_each_records_model(tmp_path: Path) -> None:
    """Through a worker's report too: the codes travel with the rows."""
    coords = Coordinates("http://h:1", "triton", "triton-http", "mix(a*1+b*1)", "", 1, "direct")
    worker, master = RecordCollector(), RecordCollector()
    for i in range(6):
        worker.add(coords, 1000.0 + i, 1000.01 + i, None, 10, 20, 1 + i % 2)
    master.extend(json.loads(json.dumps(worker.drain())))
    ((_, chunk),) = master.snapshot()
    assert chunk.model.tolist() == [1, 2, 1, 2, 1, 2]
    run = LocustRun(tmp_path, "r")
    (row,) = run.add_swarm(run.start_swarm(), master.snapshot(), users=2)
    run.finish()
    records = pq.read_table(run.path / "records.parquet").to_pandas()
    assert records["model"].tolist() == ["a", "b"] * 3
    mix = read_mix(row["mix_json"])
    assert [(m, mix[m].count, mix[m].share) for m in mix] == [("a", 3, 0.5), ("b", 3, 0.5)]
