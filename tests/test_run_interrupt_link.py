"""Scenario runs over an emulated link.

Ctrl-C in a terminal during a trial on an emulated link (issue 10, item 10): a terminal
sends SIGINT to its whole foreground process group, not just to servebench. The link
emulator's worker must not be in that group: if it is, it dies of the SIGINT before the
runner has stopped the load, and the trial is marked failed (BrokenPipeError) instead of
interrupted.

A link given as a profile file is read once per run (issue 21, item 6): validation reads
it, every trial takes the profile from the plan.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import psutil
import pytest
from scenario_checks import TINY_WORKLOAD, interrupted_run, tiny_scenario, write
from server_checks import metrics_url, tritonservers, wait_for_measured_answers

from servebench.netem import profiles
from servebench.scenario.runner import ScenarioRunner

# The 30 s trial is only the margin for the interrupt to land inside it.
SCENARIO = tiny_scenario(
    "tiny-link", workload={**TINY_WORKLOAD, "duration_s": 30.0}, links=["wifi"]
)


# 40 req/s over the 0.2 s warm-up: the requests at offsets 0, 0.025, ... 0.175 s.
WARMUP_REQUESTS = 8


@pytest.fixture(autouse=True)
def _needs_triton(triton_install):
    """Skips (with the reason) where the nvidia-pytriton wheel is missing."""


def _emulator_workers(root: psutil.Process) -> list[psutil.Process]:
    found = []
    for process in root.children(recursive=True):
        try:
            if "servebench.netem.worker" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def test_sigint_to_the_process_group_interrupts_a_trial_on_an_emulated_link(tmp_path: Path):
    results = tmp_path / "results"
    workers: list[psutil.Process] = []

    def during(process: subprocess.Popen[str]) -> None:
        # Interrupted once measured answers have come back through the link (server_checks).
        (server,) = tritonservers(tmp_path)
        wait_for_measured_answers(metrics_url(server), WARMUP_REQUESTS)
        workers.extend(_emulator_workers(psutil.Process(process.pid)))
        assert workers, "no link emulator worker found during the trial"

    process, output = interrupted_run(write(tmp_path, SCENARIO, "tiny.yaml"), results, during)
    assert process.returncode == 130, output
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "interrupted" and "SIGINT" in meta["reason"], meta
    trials = pd.read_csv(run / "trials.csv")
    assert list(trials.status) == ["interrupted"], list(trials.reason)
    # the link stayed up until the runner stopped the load: no request failed because of it
    assert trials.iloc[0]["count"] > 0 and trials.iloc[0]["errors"] == 0, trials.iloc[0].to_dict()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == [], f"emulator workers left running: {[p.pid for p in alive]}"


def test_a_profile_file_is_read_once_per_run(tmp_path: Path, monkeypatch):
    (tmp_path / "links").mkdir()
    link = write(tmp_path / "links", "name: office\nrtt_s: 0.01\ndown_mbps: 50\nup_mbps: 20\n")
    workload = {**TINY_WORKLOAD, "duration_s": 0.5}
    text = tiny_scenario("office-run", workload=workload, links=[f"links/{link.name}"])
    reads = []
    real = profiles.load_yaml

    def counting(file: Path):
        reads.append(Path(file).resolve())
        return real(file)

    monkeypatch.setattr(profiles, "load_yaml", counting)
    outcome = ScenarioRunner(write(tmp_path, text), output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    assert reads == [link.resolve()]  # two trials over it, one read
    trials = pd.read_csv(outcome.directory.path / "trials.csv")
    assert list(trials.status) == ["ok", "ok"], list(trials.reason)
    assert set(trials.link) == {"office"} and set(trials.link_rtt_s) == {0.01}
    assert (trials["ok"] > 0).all() and (trials["errors"] == 0).all()
