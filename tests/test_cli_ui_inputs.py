"""`servebench ui` refuses, before starting anything, what would misfire later.

A run id after `--` is passed to Locust, which made it a path: `-- --run-id ../../X`
wrote the run two folders above `--results`. A taken `--port` made Locust fail with a
traceback after everything else had started, while the launcher announced the UI on it
(something else was listening there).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from servebench.cli import app
from servebench.locust.launch import LaunchError, own_options
from servebench.locust.results import LocustRun

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"


def ui(*args: str):
    return CliRunner().invoke(app, ["ui", *args])


@pytest.mark.parametrize("run_id", ["../../X", "a/b", "..", "{tmp}/X", "x\\y"])
def test_a_run_id_that_is_a_path_is_refused(run_id: str, closed_port: str, tmp_path: Path):
    run_id = run_id.format(tmp=tmp_path)  # an absolute path, inside the test's folder
    results = tmp_path / "a" / "b" / "results"
    result = ui(  # options after `--` go to Locust, once a scenario fills the positional
        *(str(QUICKSTART), "--host", f"http://{closed_port}", "--headless", "-t", "1s"),
        *("--results", str(results), "--", "--run-id", run_id),
    )
    assert_one_line_error(result, "--run-id", "not a path")
    assert not (tmp_path / "X").exists() and not (tmp_path / "a").exists()


def test_run_id_and_results_dir_after_the_separator():
    assert own_options(["--run-id=mine", "--processes", "2"]) == ("mine", ["--processes", "2"])
    assert own_options(["--run-id", "mine"]) == ("mine", [])
    assert own_options(["-u", "3"]) == (None, ["-u", "3"])
    with pytest.raises(LaunchError, match="servebench ui --results"):
        own_options(["--results-dir", "/elsewhere"])


def test_locust_run_refuses_a_path_as_run_id(tmp_path: Path):
    """`locust -f` with servebench's options, without `servebench ui`, is checked too."""
    with pytest.raises(ValueError, match="not a path"):
        LocustRun(tmp_path / "results", "../escaped")
    assert not (tmp_path / "escaped").exists()


def test_a_taken_port_is_refused_before_anything_starts(closed_port: str):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = ui("--host", f"http://{closed_port}", "--model", "m", "--port", str(port))
    assert_one_line_error(result, f"--port {port}", "not free")


def test_an_existing_run_id_is_refused_and_generated_ones_never_collide(
    closed_port: str, tmp_path: Path
):
    from servebench.results import unused_run_id

    results = tmp_path / "results"
    (results / "taken").mkdir(parents=True)
    result = ui(
        *(str(QUICKSTART), "--host", f"http://{closed_port}", "--headless", "-t", "1s"),
        *("--results", str(results), "--", "--run-id", "taken"),
    )
    assert_one_line_error(result, "--run-id taken", "exists")
    (results / "quickstart-locust-20261130T120000Z").mkdir()
    assert unused_run_id(results, "quickstart-locust-20261130T120000Z").endswith("Z-2")
    assert unused_run_id(results, "fresh") == "fresh"
