"""A server killed in the middle of an SLO search ends that search within seconds.

Before, every later step ran its full length against the dead address (6.5 minutes in the
run that found this) and the failed setting still got a max rate and a cost.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from servebench.scenario.runner import ScenarioRunner

SCENARIO = """\
name: search-kill
models:
  specs:
    - {layer_type: dense, depth: 1, width: 8, input_shape: [4], num_outputs: 3}
servers:
  - name: triton
    kind: triton
    settings: {max_batch_size: 4, dynamic_batching: false}
workload:
  search: max_rate
  search_settings: {min_rate: 5, max_rate: 400, precision: 0.2, max_steps: 8}
  batch_sizes: [1, 2]
  duration_s: 2
  warmup_s: 0.2
  timeout_s: 2
links: [direct]
slo: {percentile: 99, latency_ms: 500}
cost: {instance: c6i.xlarge}
"""


@pytest.fixture(autouse=True)
def _needs_triton(triton_install):
    """Skips (with the reason) where the nvidia-pytriton wheel is missing."""


def _tritonservers(under: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.name() == "tritonserver" and str(under) in " ".join(process.cmdline()):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def test_server_killed_mid_search_fails_the_trial_within_seconds(tmp_path: Path) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(SCENARIO)
    results = tmp_path / "results"
    timings: dict[str, float] = {}

    def kill_during_the_second_step() -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not list(results.glob("*/records/*.parquet")):
            time.sleep(0.05)
        time.sleep(3.0)  # the first 2 s step is done; the search is stepping on
        for process in _tritonservers(tmp_path):
            process.kill()
        timings["killed"] = time.monotonic()
        while time.monotonic() < deadline and not list(results.glob("*/trials.csv")):
            time.sleep(0.05)
        timings["row"] = time.monotonic()

    killer = threading.Thread(target=kill_during_the_second_step, daemon=True)
    killer.start()
    outcome = ScenarioRunner(path, output=results).run()
    killer.join(timeout=10)
    assert "killed" in timings, "the search never started"
    assert timings["row"] - timings["killed"] < 10
    trials = pd.read_csv(outcome.directory.path / "trials.csv").sort_values("index")
    first, second = trials.iloc[0], trials.iloc[1]
    assert first.status == "failed"
    assert "server unreachable" in first.reason and "the end of its log" in first.reason
    assert pd.isna(first.get("max_rate")) and pd.isna(first.get("cost_per_million_at_slo"))
    assert second.status == "ok" and second.max_rate > 0  # the server was restarted
    assert outcome.status == "partial"
