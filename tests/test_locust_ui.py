"""`servebench ui` driven through Locust's real web UI in Debian's headless Chromium.

The whole path a person takes: `servebench ui SCENARIO` exports the scenario's model,
starts the local Triton and Locust's web UI on a free loopback port; the browser fills
the start form (users, spawn rate, and a custom parameter: batch size 2; the scenario's
input data is already in its own field), starts a swarm,
waits until the statistics table shows the model's request at a non-zero rate, takes a
screenshot and stops the swarm; a SIGTERM then ends `servebench ui`, which must leave a
complete result directory and stop Triton.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from model_zoo.spec import ModelSpec
from servebench.common.ports import free_ports

ROOT = Path(__file__).resolve().parents[1]
SPEC = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
SCENARIO = """\
name: locust-ui
models:
  specs:
    - {layer_type: dense, depth: 2, width: 16, input_shape: [8], num_outputs: 4}
servers:
  - {name: triton, kind: triton, launch: local, protocol: http, settings: {max_batch_size: 8}}
workload: {mode: closed, concurrency: [2], batch_sizes: [1], duration_s: 1, inputs: samples.npz}
links: [direct]
"""


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text():
            return
        assert proc.poll() is None, f"servebench ui exited:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} within {timeout_s} s:\n{log.read_text()[-3000:]}")


def _current_rps(page, name: str) -> float:
    """The statistics table's "Current RPS" for the row named `name` (0 if not there yet)."""
    headers = [" ".join(h.split()) for h in page.locator("table th").all_inner_texts()]
    row = page.locator("table tr", has_text=name)
    if not headers or row.count() == 0:
        return 0.0
    cells = row.first.locator("td").all_inner_texts()
    return float(cells[headers.index("Current RPS")] or 0)


def test_swarm_from_the_web_ui(browser, tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    samples = tmp_path / "samples.npz"  # 3 samples: batches of 2 make a cycle of 3 requests
    np.savez(samples, input=np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32))
    (port,) = free_ports(1)
    log = tmp_path / "servebench-ui.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-c", "from servebench.cli import main; main()", "ui",
                str(scenario), "--port", str(port), "--results", str(tmp_path / "results"),
            ],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env,
        )  # fmt: skip
    name = f"{SPEC.id} b2 triton-http"
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(log, f"Locust web UI: {url}", proc, timeout_s=180)
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(url)
        page.fill("input[name=userCount]", "2")
        page.fill("input[name=spawnRate]", "2")
        page.get_by_text("Custom parameters").click()
        assert page.input_value("input[name=model]") == SPEC.id  # from the scenario
        assert page.input_value("input[name=inputData]") == str(samples.resolve())
        page.fill("input[name=batchSize]", "2")
        page.get_by_role("button", name="Start").click()
        deadline = time.monotonic() + 60
        while _current_rps(page, name) <= 0:
            assert time.monotonic() < deadline, f"no rate for {name!r}:\n{log.read_text()[-2000:]}"
            page.wait_for_timeout(500)
        page.screenshot(path=str(tmp_path / "locust-ui.png"))
        page.get_by_role("button", name="Stop").click()
        page.get_by_text(re.compile("^stopped$", re.IGNORECASE)).wait_for(timeout=30_000)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert proc.returncode == 0, output[-3000:]
    assert "local Triton stopped" in output
    assert (tmp_path / "locust-ui.png").stat().st_size > 10_000
    (run_dir,) = (tmp_path / "results").iterdir()
    run = (run_dir / "run.json").read_text()
    assert '"status": "complete"' in run and '"source": "locust"' in run
    assert (run_dir / "scenario.yaml").read_text() == SCENARIO
    (row,) = pd.read_csv(run_dir / "trials.csv").to_dict("records")
    assert row["model"] == SPEC.id and row["batch_size"] == 2  # the form's value was used
    assert row["count"] > 0 and row["errors"] == 0
