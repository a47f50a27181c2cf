"""An SLO-search run's report: its latencies are found and its steps are plotted.

The run directory is written the way the runner writes a search (scenario/trial.py): each
step's records carry the trial id plus `.sN`, the trial's row holds the chosen step's
summary, `max_rate` and `search_steps` (rate, SLO-percentile latency, met?, reasons).
The steps come from the real search (scenario/search.py) over a queueing simulation, so
their rates and verdicts are the ones a run would produce.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_analysis_report import sections
from test_analysis_rundir import SETTINGS, _records, _summary, _trial_id, simulate

from servebench.analysis.compare import compare_trials
from servebench.analysis.figures import latency_cdf, search_steps_figure
from servebench.analysis.loader import load_run
from servebench.analysis.report import write_report
from servebench.analysis.search import search_steps, trial_records
from servebench.common.quantiles import percentile
from servebench.common.slo_judge import judge_latencies
from servebench.scenario.search import search_max_rate

SLO_S = 0.030
DURATION = 8.0


def make_search_run(root: Path, *, seed: int = 3) -> Path:
    """Two settings, one SLO search each (p99 ≤ 30 ms, rates 20-400/s, 10 % precision)."""
    path = root / "search-run"
    (path / "records").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    rows, tables = [], []
    t0 = 1_795_000_000.0
    for index, (setting, values) in enumerate(SETTINGS.items()):
        trial_id = _trial_id(setting, 1, "direct", -1.0)
        sims: list[dict] = []

        async def measure(
            rate: float, sims: list = sims, instances: int = values["instance_count"]
        ):
            sim = simulate(
                np.random.default_rng(rng.integers(2**63)),
                rate=rate,
                duration=DURATION,
                batch=1,
                instances=instances,
                link="direct",
            )
            sims.append(sim)
            latency = sim["completion"] - sim["intended"]
            judged = judge_latencies(latency, percentile=99.0, bound_s=SLO_S, level=0.95)
            return percentile(latency, 99), judged, True, sim

        result = asyncio.run(
            search_max_rate(measure, min_rate=20, max_rate=400, precision=0.1, max_steps=10)
        )
        for step, sim in enumerate(sims):
            table = _records(f"{trial_id}.s{step}", sim, 1, t0, closed=False)
            tables.append(table)
            pq.write_table(table, path / "records" / f"{trial_id}.s{step}.parquet")
            t0 += DURATION + 1
        chosen = result.best or result.steps[-1]
        row = _summary(
            trial_id,
            index,
            setting,
            values,
            1,
            "direct",
            chosen.rate,
            chosen.result,
            DURATION,
            True,
        )
        row.update(
            load_kind="search",
            load_level=None,
            slo_bound_s=SLO_S,
            slo_latency_s=None,
            slo_met=None,
            max_rate=result.max_rate,
            search_steps=json.dumps([[s.rate, s.latency, s.met, "", []] for s in result.steps]),
        )
        rows.append(row)
    pd.DataFrame(rows).to_csv(path / "trials.csv", index=False)
    pq.write_table(pa.concat_tables(tables), path / "records.parquet")
    (path / "run.json").write_text(
        json.dumps({"run_id": "search-run", "status": "complete", "host_peak_flops": 60e9})
    )
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_search_run(tmp_path_factory.mktemp("search"))


def test_steps_are_read_with_the_chosen_one_marked(run: Path) -> None:
    data = load_run(run)
    steps = search_steps(data.trials)
    assert set(steps["trial_id"]) == set(data.trials["trial_id"])
    for trial in data.trials.to_dict("records"):
        mine = steps[steps["trial_id"] == trial["trial_id"]]
        assert list(mine["step_id"]) == [f"{trial['trial_id']}.s{k}" for k in range(len(mine))]
        assert len(mine) >= 3 and mine["met"].any() and not mine["met"].all()
        chosen = mine[mine["chosen"]]
        assert len(chosen) == 1
        assert chosen["rate"].iloc[0] == trial["max_rate"] == mine[mine["met"]]["rate"].max()


def test_latencies_of_a_search_trial_are_its_chosen_steps(run: Path) -> None:
    data = load_run(run)
    records = trial_records(data.trials, data.records)
    assert set(records["trial_id"]) == set(data.trials["trial_id"])
    for trial in data.trials.to_dict("records"):
        mine = records[records["trial_id"] == trial["trial_id"]]
        # The row's figures are the chosen step's: the records say the same.
        assert len(mine) == trial["count"]
        assert percentile(mine["latency"], 99) == pytest.approx(trial["latency_p99"])
    svg = latency_cdf(data.trials, data.records)
    assert svg.startswith("<svg")


def test_steps_figure_marks_slo_and_chosen_rate(run: Path) -> None:
    data = load_run(run)
    svg = search_steps_figure(data.trials)
    for trial in data.trials.to_dict("records"):
        assert f"max {trial['max_rate']:.0f}/s" in svg
    assert svg.count("SLO p99 ≤ 30 ms") >= 1


def test_search_report_has_steps_and_latencies(run: Path) -> None:
    report = write_report(run)
    page = report.path.read_text()
    assert report.errors == []
    assert "latency-cdf" not in report.empty
    assert "no successful requests" not in page.lower()
    found = sections(page)
    assert "<svg" in found["search-steps"] and "<svg" in found["latency-cdf"]
    # The summary names the rate each setting sustains.
    assert re.search(r"max rate", found["summary"])


def test_compare_measures_noise_of_search_trials(run: Path) -> None:
    """`report compare` judges a search trial on its chosen step's requests: with only
    50 of them kept, its p99 is "too few" to compare, not compared on the floor alone."""
    data = load_run(run)
    few = data.records.groupby("trial_id", sort=False).head(50)
    result = compare_trials(data.trials, data.trials, few, few)
    assert np.isinf(result["p99_band"]).all()
