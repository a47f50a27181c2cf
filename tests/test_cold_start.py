"""Cold start on the real local Triton: the one measurement, as the runner and the benchmark
call it (`measure_cold_start` with the runner's `client_probe`), and a scenario's
`cold_start: {repeats: N}` giving N rows per phase in cold_start.csv.

Times are only checked to be positive: which phase is slower depends on the machine.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scenario_checks import tiny_scenario, write

from servebench.analysis.summary import cold_start_lines, cold_start_stats
from servebench.results import COLD_START_COLUMNS, COLD_START_PHASES
from servebench.scenario.runner import ScenarioRunner
from servebench.scenario.serving import client_probe
from servebench.servers.base import ServerModelError
from servebench.servers.cold_start import PhaseTime, measure_cold_start
from servebench.servers.kinds import create_server

# A server started here has no container: every phase but the container's start.
LOCAL_PHASES = tuple(p for p in COLD_START_PHASES if p != "container_start")

CLOSED = {"mode": "closed", "concurrency": [1], "requests": 20, "duration_s": 1}
SCENARIO = tiny_scenario(
    "cold", workload={**CLOSED, "warmup_s": 0, "timeout_s": 5}, cold_start={"repeats": 2}
)


@pytest.fixture
def local(triton_batching_model, tmp_path: Path):
    """A not-yet-started local Triton on the batching model's repository; stopped after."""
    server = create_server(
        "triton-local", model_repository=triton_batching_model.repository, run_dir=tmp_path
    )
    yield server
    server.stop()


def test_scenario_repeats_give_a_row_per_phase_and_repeat(triton_install, tmp_path: Path):
    path = write(tmp_path, SCENARIO, "cold.yaml")
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    cold = pd.read_csv(outcome.directory.path / "cold_start.csv", keep_default_na=False)
    assert tuple(cold.columns) == COLD_START_COLUMNS
    assert list(dict.fromkeys(cold.phase)) == list(LOCAL_PHASES)
    for phase in LOCAL_PHASES:
        assert sorted(cold[cold.phase == phase].repeat) == [0, 1], phase
    assert (cold[cold.phase == "server_ready"].model == "").all()
    assert (cold.seconds > 0).all()
    # the trials ran on the server the last repeat left up
    trials = pd.read_csv(outcome.directory.path / "trials.csv")
    assert (trials.status == "ok").all() and (trials.errors == 0).all()
    lines = cold_start_lines(cold, 200)
    assert lines[0] == "cold start, median (min–max) of 2 repeats:"
    assert all(f"{word} " in lines[1] for word in ("ready", "load", "first", "warm"))


def test_each_repeat_restarts_the_server_and_the_last_one_stays_up(
    local, triton_batching_model
) -> None:
    name = triton_batching_model.name
    seen: list[PhaseTime] = []
    pids: list[int | None] = []

    def on_time(measured: PhaseTime) -> None:
        seen.append(measured)
        if measured.phase == "server_ready":
            pids.append(local.pid)

    probe = client_probe("triton", "grpc", timeout_s=10.0)
    times = measure_cold_start(local, [name], probe, repeats=2, on_time=on_time)
    assert seen == times
    assert [(t.repeat, t.phase) for t in times] == [(r, p) for r in (0, 1) for p in LOCAL_PHASES]
    assert [t.model for t in times] == ["", name, name, name] * 2
    assert all(t.seconds > 0 for t in times)
    assert len(set(pids)) == 2 and None not in pids  # a new process each repeat
    assert local.pid == pids[-1] and local.is_model_ready(name)  # left up for the trials


def test_a_failing_repeat_keeps_what_was_measured(local) -> None:
    seen: list[PhaseTime] = []
    probe = client_probe("triton", "http", timeout_s=10.0)
    with pytest.raises(ServerModelError, match="no-such-model"):
        measure_cold_start(local, ["no-such-model"], probe, repeats=3, on_time=seen.append)
    assert [(t.repeat, t.phase) for t in seen] == [(0, "server_ready")]


def test_settings_are_checked(local) -> None:
    probe = client_probe("triton", "http", timeout_s=1.0)
    with pytest.raises(ValueError, match="repeats: must be >= 1"):
        measure_cold_start(local, ["m"], probe, repeats=0)
    remote = create_server("triton-remote", http_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="did not start it"):
        measure_cold_start(remote, ["m"], probe)


def test_report_and_summary_show_median_min_max_per_phase() -> None:
    rows = [
        {"server": "triton", "setting": "triton[instance_count=1]", "model": model,
         "phase": phase, "repeat": repeat, "seconds": seconds}
        for repeat, scale in enumerate((1.0, 2.0, 4.0))
        for model, phase, seconds in (
            (None, "server_ready", 0.1 * scale),
            ("dense-d1-w8-abcdef", "model_load", 1.5 * scale),
            ("dense-d1-w8-abcdef", "first_inference", 0.02 * scale),
            ("dense-d1-w8-abcdef", "warm_median", 0.002),
        )
    ]  # fmt: skip
    cold = pd.DataFrame(rows)
    stats = cold_start_stats(cold)
    assert list(stats.phase) == list(LOCAL_PHASES)
    load = stats[stats.phase == "model_load"].iloc[0]
    assert (load.n, load["median"], load["min"], load["max"]) == (3, 3.0, 1.5, 6.0)
    assert cold_start_lines(cold, 60) == [
        "cold start, median (min–max) of 3 repeats:",
        "  i1 · dense-d1-w8: ready 200 ms (100–400 ms)",
        "    load 3.00 s (1.50–6.00 s); first 40 ms (20–80 ms)",
        "    warm 2 ms (2–2 ms)",
    ]
    assert cold_start_lines(cold[cold.repeat == 0], 200) == [
        "cold start, median:",
        "  i1 · dense-d1-w8: ready 100 ms; load 1.50 s; first 20 ms; warm 2 ms",
    ]
