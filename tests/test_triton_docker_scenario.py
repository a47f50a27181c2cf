"""`launch: docker` end to end: a scenario runs Triton in a container of the local CPU image
(`docker/images.sh` builds it) through the Docker Engine API — start, readiness, model load,
the split cold start, load through an emulated link to the published loopback port,
telemetry from the engine's stats and Triton's metrics port — and leaves no container
behind: after a normal run, after a start that fails on a missing image, after Ctrl-C.

Skipped, with the reason, where no engine answers or the image is not built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from docker_checks import ENGINE_PROBLEM, MISSING_IMAGE, needs_image, owned_containers
from link_checks import p50_floor_s
from scenario_checks import interrupted_run, tiny_scenario, write
from server_checks import container_metrics_url, wait_for_measured_answers

from servebench.common.wellknown import TRITON_CPU_IMAGE
from servebench.netem import resolve_link
from servebench.results import COLD_START_PHASES
from servebench.scenario.runner import ScenarioRunner
from servebench.telemetry import read_telemetry

pytestmark = pytest.mark.skipif(ENGINE_PROBLEM is not None, reason=ENGINE_PROBLEM or "")


def write_scenario(
    tmp_path: Path, image: str, *, duration: float = 1.5, link: str = "wifi", warmup: float = 0.2
):
    workload = {"mode": "closed", "concurrency": [2], "duration_s": duration}
    text = tiny_scenario(
        "tiny-docker",
        server={"launch": "docker", "image": image},
        workload={**workload, "warmup_s": warmup, "timeout_s": 5},
        links=[link],
    )
    return write(tmp_path, text, "tiny-docker.yaml")


def test_one_trial_through_a_link_to_triton_in_a_container(tmp_path: Path) -> None:
    needs_image(TRITON_CPU_IMAGE)
    outcome = ScenarioRunner(
        write_scenario(tmp_path, TRITON_CPU_IMAGE), output=tmp_path / "results"
    ).run()
    assert outcome.status == "complete", outcome.reason
    run = outcome.directory.path
    (trial,) = pd.read_csv(run / "trials.csv").to_dict("records")
    assert trial["status"] == "ok" and trial["errors"] == 0 and trial["count"] > 0
    assert (trial["launch"], trial["link"]) == ("docker", "wifi")
    # The requests went through the link: the least p50 its RTT and jitter allow (link_checks).
    assert trial["latency_p50"] >= p50_floor_s(resolve_link("wifi"), trial["count"]), trial
    # The container's CPU and memory from the engine; Triton's counters from its metrics port.
    assert trial["server_cpu_mean"] > 0 and trial["server_mem_max"] > 0
    # Closed loop: the server's counters cover exactly the measured requests (results.py,
    # "What the server and host said"), and none failed.
    assert trial["server_requests"] == trial["count"]
    rows = read_telemetry(run / "telemetry.parquet")
    container = {r.labels.get("container") for r in rows if r.source == "server_process"}
    assert len(container) == 1 and None not in container
    cold = pd.read_csv(run / "cold_start.csv", keep_default_na=False)
    assert list(cold.phase) == list(COLD_START_PHASES)  # container start first
    assert (cold.seconds > 0).all()
    assert (cold[cold.phase.isin(["container_start", "server_ready"])].model == "").all()
    assert b"Started HTTPService" in (run / "repos" / "00" / "container.log").read_bytes()
    assert owned_containers() == []


def test_a_missing_image_fails_the_setting_in_one_sentence_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    outcome = ScenarioRunner(
        write_scenario(tmp_path, MISSING_IMAGE), output=tmp_path / "results"
    ).run()
    assert outcome.status == "failed"
    assert outcome.reason.endswith(
        f"triton-docker: image {MISSING_IMAGE} is not present and could not be pulled "
        f"({outcome.reason.rsplit('(', 1)[-1]}"
    )
    assert "\n" not in outcome.reason
    assert not (outcome.directory.path / "repos" / "00" / "models").exists()
    assert owned_containers() == []


def test_ctrl_c_mid_trial_ends_the_run_interrupted_and_removes_the_container(
    tmp_path: Path,
) -> None:
    needs_image(TRITON_CPU_IMAGE)
    # No warm-up: every answer the server counts in the trial is a measured one, so the
    # interrupt can wait for them (server_checks); the 30 s trial is only the margin for it
    # to land inside the trial.
    path = write_scenario(tmp_path, TRITON_CPU_IMAGE, duration=30.0, link="direct", warmup=0)
    results = tmp_path / "results"

    def during(process: subprocess.Popen[str]) -> None:
        (container,) = owned_containers(process.pid)
        wait_for_measured_answers(container_metrics_url(container), warmup_requests=0)

    process, output = interrupted_run(path, results, during)
    assert process.returncode == 130, output
    (run,) = results.iterdir()
    status = json.loads((run / "run.json").read_text())
    assert (status["status"], status["reason"]) == ("interrupted", "stopped by SIGINT")
    (trial,) = pd.read_csv(run / "trials.csv").to_dict("records")
    assert trial["status"] == "interrupted" and trial["count"] > 0  # its records were kept
    assert owned_containers(process.pid) == []


def test_servebench_ui_starts_the_container_as_a_run_does(tmp_path: Path) -> None:
    """`servebench ui` on a docker server: its kind builds and starts the container (the
    registry's one way), Locust measures through it, and the container is gone after."""
    needs_image(TRITON_CPU_IMAGE)
    path = write_scenario(tmp_path, TRITON_CPU_IMAGE, link="direct")
    command = [sys.executable, "-m", "servebench.cli", "ui", str(path), "--headless"]
    command += ["-u", "2", "-t", "2s", "--results", str(tmp_path / "results")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "docker Triton ready: http://127.0.0.1:" in output
    assert "docker Triton stopped" in output
    (run,) = (tmp_path / "results").iterdir()
    (trial,) = pd.read_csv(run / "trials.csv").to_dict("records")
    assert trial["count"] > 0 and trial["errors"] == 0
    assert owned_containers() == []
