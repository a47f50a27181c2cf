"""What the scenario tests share: a tiny scenario's text, writing and validating one, and
a `servebench scenario run` interrupted the way a terminal's Ctrl-C does.

The tiny scenario is one small dense model on one Triton (the local one unless `server`
says otherwise), cheap enough that a runner test starts it in a few seconds; each test
gives the sections it is about.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from server_checks import wait_for_a_trial

from servebench.scenario.validate import ScenarioError, load_scenario

#: The smallest model a scenario names: one dense layer of 8 on 4 inputs (flow style).
DENSE_SPEC = "{layer_type: dense, depth: 1, width: 8, input_shape: [4]}"
TINY_SETTINGS = {"max_batch_size": 4, "dynamic_batching": False}
#: 40 requests/s at batch sizes 1 and 2 for a second each: `{**TINY_WORKLOAD, ...}` varies it.
TINY_WORKLOAD = {
    "rates": [40],
    "batch_sizes": [1, 2],
    "duration_s": 1.0,
    "warmup_s": 0.2,
    "timeout_s": 2,
}


def flow(value: Any) -> str:
    """`value` in YAML's flow style, as a person writes it (`[1, 2]`, `{a: 1}`, `false`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return str(value)


def tiny_scenario(
    name: str,
    *,
    server: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = TINY_SETTINGS,
    **sections: Any,
) -> str:
    """The scenario's YAML: header lines 1-7 (name, the model, the server's name and kind),
    then `server`'s extra keys and `settings` (None: no settings line), then each section
    in the order given, a mapping one key a line (`workload={...}` is lines `  rates:
    [40]` ...), anything else on its own line."""
    lines = [
        f"name: {name}",
        "models:",
        "  specs:",
        "    - {layer_type: dense, depth: 1, width: 8, input_shape: [4], num_outputs: 3}",
        "servers:",
        "  - name: triton",
        "    api: triton",
        *(f"    {key}: {flow(value)}" for key, value in (server or {}).items()),
    ]
    if settings is not None:
        lines.append(f"    settings: {flow(settings)}")
    for section, value in sections.items():
        if isinstance(value, dict):
            lines += [f"{section}:", *(f"  {k}: {flow(v)}" for k, v in value.items())]
        else:
            lines.append(f"{section}: {flow(value)}")
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str, name: str = "s.yaml") -> list[str]:
    """The problem lines validation finds in `text` (written to `tmp_path / name`)."""
    with pytest.raises(ScenarioError) as caught:
        load_scenario(write(tmp_path, text, name))
    return caught.value.problems


def interrupted_run(
    path: Path, results: Path, during: Callable[[subprocess.Popen[str]], None]
) -> tuple[subprocess.Popen[str], str]:
    """`servebench scenario run` until its first trial has begun (server_checks), then
    `during(process)` (where a test waits for what it acts on: measured answers), then SIGINT
    to its whole session as a terminal's Ctrl-C does; (process, its output).

    The run has its own session: it stands in for the terminal's foreground group and keeps
    the SIGINT away from pytest. A run that ends before a trial fails the test with its
    output; one still running at the end is killed.
    """
    command = [sys.executable, "-m", "servebench.cli", "scenario", "run", str(path)]
    process = subprocess.Popen(
        [*command, "--output", str(results), "--no-report"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_a_trial(results, process)
        during(process)
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process, output
