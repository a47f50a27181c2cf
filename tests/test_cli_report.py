"""`servebench report -o`: an output path that cannot be written is one line, no traceback."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servebench.cli import app
from servebench.locust.results import LocustRun


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished (empty) run directory: enough for the report to be written."""
    run = LocustRun(tmp_path / "results", "r1")
    run.finish()
    return run.path


def report(*args: str):
    return CliRunner().invoke(app, ["report", *args])


def one_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    return line


def test_output_in_a_missing_folder(run_dir: Path, tmp_path: Path):
    target = tmp_path / "missing" / "r.html"
    line = one_line(report(str(run_dir), "-o", str(target)), 2)
    assert line == f"error: --output {target}: folder {target.parent} does not exist"
    assert not target.parent.exists()


def test_output_that_is_a_folder(run_dir: Path, tmp_path: Path):
    line = one_line(report(str(run_dir), "-o", str(tmp_path)), 2)
    assert line == f"error: --output {tmp_path}: is a folder; give a file name"


def test_a_failed_write_names_the_file(run_dir: Path, tmp_path: Path, monkeypatch):
    target = tmp_path / "r.html"

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr("servebench.analysis.report.write_report", full_disk)
    line = one_line(report(str(run_dir), "-o", str(target)), 1)
    assert line == f"error: cannot write {target}: No space left on device"


def test_the_report_is_still_written(run_dir: Path, tmp_path: Path):
    target = tmp_path / "r.html"
    result = report(str(run_dir), "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_text().startswith("<!DOCTYPE html>")
