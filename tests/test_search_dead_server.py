"""A server killed in the middle of an SLO search ends that search at once.

Before, every later step ran its full length against the dead address (6.5 minutes in the
run that found this) and the failed setting still got a max rate and a cost. The kill
comes once the server has answered a request of the second step (server_checks), not
after a fixed sleep; that no step ran after the kill is read from the records.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from scenario_checks import tiny_scenario, write
from server_checks import (
    Background,
    answered,
    metrics_url,
    tritonservers,
    wait_for_a_trial,
    wait_for_answers,
)

from servebench.scenario.runner import ScenarioRunner

SEARCH = {"min_rate": 5, "max_rate": 40, "precision": 0.2, "max_steps": 4}
WORKLOAD = {"search": "max_rate", "search_settings": SEARCH, "batch_sizes": [1, 2]}
SCENARIO = tiny_scenario(
    "search-kill",
    workload={**WORKLOAD, "duration_s": 1, "warmup_s": 0.2, "timeout_s": 2},
    links=["direct"],
    # A p50: a step is judged on its percentile's interval, and a 1 s step at 10 req/s has
    # enough requests to bound a p50 (6), not a p99 (368).
    slo={"percentile": 50, "latency_ms": 500},
    cost={"instance": "c6i.xlarge"},
)


@pytest.fixture(autouse=True)
def _needs_triton(triton_install):
    """Skips (with the reason) where the nvidia-pytriton wheel is missing."""


# Step 0 at 5 req/s sends every request scheduled before warmup + duration (1.2 s), at
# most 5 × 1.2 + 1 (the one at offset 0): more answers than that mean step 1 has begun.
FIRST_STEP_AT_MOST = 7


def _kill_during_the_second_step(tmp_path: Path) -> None:
    wait_for_a_trial(tmp_path / "results")
    (server,) = tritonservers(tmp_path)
    url = metrics_url(server)
    before = answered(url)  # the cold-start probes' requests
    wait_for_answers(url, before + FIRST_STEP_AT_MOST + 1, "an answer of the second step")
    server.kill()


def test_server_killed_mid_search_ends_the_search_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, SCENARIO, "search.yaml")
    killer = Background(lambda: _kill_during_the_second_step(tmp_path))
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    killer.join()
    run = outcome.directory.path
    trials = pd.read_csv(run / "trials.csv").sort_values("index")
    first, second = trials.iloc[0], trials.iloc[1]
    assert first.status == "failed"
    assert "server unreachable" in first.reason and "the end of its log" in first.reason
    assert pd.isna(first.get("max_rate")) and pd.isna(first.get("cost_per_million_at_slo"))
    # The steps the failed search ran (its records are kept): all answered until the step
    # the server died in; after it at most one more, whose every request was refused (a
    # short step can end before the engine's unreachable rule stops it; a step with no
    # answer at all ends the search), or none (below). Before, every remaining step ran against the dead
    # address: minutes of refusals.
    records = pq.read_table(run / "records" / f"{first.trial_id}.parquet").to_pandas()
    steps = records.groupby("trial_id").ok.agg(["size", "sum"])
    steps = steps.sort_index(key=lambda ids: ids.str.rsplit(".s", n=1).str[1].astype(int))
    failing = steps[steps["sum"] < steps["size"]]
    # Each step connects anew: a step begun after the kill is refused at its connect, and
    # leaves no records (the reason says so), so no step need hold a failure.
    assert len(failing) >= 1 or "connection refused" in first.reason, steps
    assert failing.empty or steps.index[-len(failing) :].equals(failing.index), steps
    assert len(failing) <= 1 or (len(failing) == 2 and failing["sum"].iloc[-1] == 0), steps
    assert second.status == "ok" and second.max_rate > 0  # the server was restarted
    assert outcome.status == "partial"
