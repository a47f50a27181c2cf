"""What a scenario run survives: bad result-directory arguments, a SIGKILLed runner, a full
disk, a resume with another scenario, and failed trials (which the status and the exit
code must say).

Runs that need no real server go against a stub that says ready and refuses every model
request, so their every trial fails within a second. The kill and the
full-disk runs use the real local Triton with a tiny model.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from server_checks import StubHandler, http_stub
from typer.testing import CliRunner

from servebench.analysis.loader import load_run
from servebench.cli import app
from servebench.results import RECORDS_DIR, RunDirectory, TrialRow, new_run_id
from servebench.scenario.runner import ScenarioRunner

MODEL = (
    "{{layer_type: dense, depth: 1, width: 8, input_shape: [4], num_outputs: 3}}"  # .format-escaped
)
WORKLOAD = """\
workload:
  rates: [{rate}]
  batch_sizes: [1, 2]
  duration_s: {duration}
  warmup_s: 0.2
  timeout_s: 2
"""
REMOTE = f"""\
name: broken
models:
  specs: [{MODEL}]
servers:
  - name: stub
    api: triton
    launch: remote
    url: {{url}}
{WORKLOAD}"""
LOCAL = f"""\
name: tiny
models:
  specs: [{MODEL}]
servers:
  - name: triton
    api: triton
    settings: {{{{max_batch_size: 4, dynamic_batching: false}}}}
{WORKLOAD}"""


def cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


def no_temp_files(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.name.endswith(".tmp")]


class _ReadyButRefusing(StubHandler):
    """Says the server and its models are ready (and loads succeed); refuses everything
    else (metadata, inference), so every trial fails at once."""

    def _answer(self) -> None:
        self.read_body()
        ok = self.path.endswith(("/ready", "/live", "/load"))
        self.reply(200 if ok else 400, b"" if ok else b'{"error": "no such model"}')

    do_GET = do_POST = _answer


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with http_stub(_ReadyButRefusing) as url:
        yield url


def remote_scenario(tmp_path: Path, url: str, *, rate: int = 40, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(REMOTE.format(url=url, rate=rate, duration=1))
    return path


# -- bad arguments: one line, exit 2 -------------------------------------------------------


def test_bad_output_and_resume_directories_are_one_line_errors(tmp_path: Path, stub_url: str):
    path = remote_scenario(tmp_path, stub_url)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    garbage_json = tmp_path / "garbage-json"
    garbage_json.mkdir()
    (garbage_json / "run.json").write_text("{not json")
    list_json = tmp_path / "list-json"
    list_json.mkdir()
    (list_json / "run.json").write_text("[1, 2]")
    binary_csv = RunDirectory.create(tmp_path / "r", "binary", "", path).path
    (binary_csv / "trials.csv").write_bytes(b"\xff\xfe\x00garbage\x00\n\x01\x02")
    no_ids = RunDirectory.create(tmp_path / "r", "no-ids", "", path).path
    (no_ids / "trials.csv").write_text("a,b\n1,2\n")
    cases = {
        ("--output", a_file): "not a directory",
        ("--resume", tmp_path / "missing"): "no such run directory",
        ("--resume", a_file): "not a directory",
        ("--resume", garbage_json): "run.json",
        ("--resume", list_json): "run.json",
        ("--resume", binary_csv): "trials.csv",
        ("--resume", no_ids): "trial_id",
    }
    for args, expected in cases.items():
        code, output = cli("scenario", "run", path, *args, "--no-report")
        assert code == 2, (args, output)
        assert "Traceback" not in output and len(output.strip().splitlines()) == 1, output
        assert expected in output, (args, output)


def test_run_ids_started_in_the_same_second_are_unique(tmp_path: Path):
    run_id = new_run_id("same")
    first = RunDirectory.create(tmp_path, run_id, "", Path("s.yaml"), unique=True)
    second = RunDirectory.create(tmp_path, run_id, "", Path("s.yaml"), unique=True)
    assert first.path != second.path and second.path.name.startswith(run_id)
    assert json.loads((second.path / "run.json").read_text())["run_id"] == second.path.name
    with pytest.raises(FileExistsError):  # an id given on purpose is never renamed
        RunDirectory.create(tmp_path, run_id, "", Path("s.yaml"))


# -- failed trials in the status and the exit code ----------------------------------------


def test_a_run_whose_every_trial_failed_is_failed_and_exits_3(tmp_path: Path, stub_url: str):
    path = remote_scenario(tmp_path, stub_url)
    code, output = cli("scenario", "run", path, "--output", tmp_path / "results", "--no-report")
    assert code == 3, output
    assert last_line(output).startswith("run failed: all 2 trials failed"), output
    (run,) = (tmp_path / "results").iterdir()
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "failed" and meta["reason"].startswith("all 2 trials failed")


def test_resume_with_another_scenario_is_refused_unless_forced(tmp_path: Path, stub_url: str):
    path = remote_scenario(tmp_path, stub_url)
    run = ScenarioRunner(path, output=tmp_path / "results", console=Console(quiet=True)).run()
    run_dir = run.directory.path
    other = remote_scenario(tmp_path, stub_url, rate=80, name="other.yaml")
    code, output = cli("scenario", "run", other, "--resume", run_dir, "--no-report")
    assert code == 2 and "different scenario" in output and "--force" in output, output
    assert len(output.strip().splitlines()) == 1, output
    assert json.loads((run_dir / "run.json").read_text()).get("resumed_at") is None

    # Comments, quoting, defaults spelled out and the results folder are not the
    # scenario: same hash.
    same = tmp_path / "same.yaml"
    text = path.read_text().replace("api: triton", 'api: "triton"  # quoted')
    same.write_text(f"# the same\nseed: 0\noutput: elsewhere\n{text}")
    code, output = cli("scenario", "run", same, "--resume", run_dir, "--no-report")
    assert code == 3 and "different scenario" not in output, output

    code, output = cli("scenario", "run", other, "--resume", run_dir, "--force", "--no-report")
    assert code == 3, output
    meta = json.loads((run_dir / "run.json").read_text())
    assert any("different scenario" in w and "--force" in w for w in meta["warnings"]), meta


# -- a full disk ------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 20 MB tmpfs (needs root and a sandbox that allows mounts; skips saying why)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    """Write to `disk` until not one more byte fits."""
    with open(disk / "filler", "ab", buffering=0) as out:
        for size in (1 << 16, 4096, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError:
                continue


def test_disk_full_at_merge_marks_the_run_failed_and_keeps_the_trials(small_disk: Path):
    directory = RunDirectory.create(small_disk, "full", "", Path("s.yaml"))
    rng = np.random.default_rng(0)
    for n in range(2):
        trial = f"t{n}"
        table = pa.table({"trial_id": [trial] * 700_000, "latency": rng.random(700_000)})
        pq.write_table(table, directory.trial_records_path(trial), compression="none")
        directory.add_trial(TrialRow(trial_id=trial, status="ok", count=700_000))
    directory.finish("complete")  # the merge needs ~11 MB more than the 9 MB left
    meta = json.loads((directory.path / "run.json").read_text())
    assert meta["status"] == "failed", meta
    assert meta["reason"] == f"no space left on device ({directory.path / 'records.parquet'})"
    assert not no_temp_files(directory.path) and not (directory.path / "records.parquet").exists()
    for n in range(2):
        assert pq.read_metadata(directory.trial_records_path(f"t{n}")).num_rows == 700_000

    fill(small_disk)  # now not even trials.csv can be rewritten, yet run.json says why
    with pytest.raises(OSError) as raised:
        directory.add_trial(TrialRow(trial_id="t2", status="ok", count=1))
    assert raised.value.filename == str(directory.path / "trials.csv")
    assert len(pd.read_csv(directory.path / "trials.csv")) == 2
    directory.finish("failed", "no space left on device (somewhere)")
    assert json.loads((directory.path / "run.json").read_text())["ended_at"] != meta["ended_at"]
    assert not no_temp_files(directory.path)


def test_disk_full_during_a_run_fails_it_with_the_reason(
    small_disk: Path, tmp_path: Path, triton_install
):
    path = tmp_path / "tiny.yaml"
    path.write_text(LOCAL.format(rate=40, duration=1.5))
    results = small_disk / "results"

    def fill_after_first_trial() -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            csv = list(results.glob("*/trials.csv"))
            if csv:
                fill(small_disk)
                return
            time.sleep(0.05)

    filler = threading.Thread(target=fill_after_first_trial, daemon=True)
    filler.start()
    outcome = ScenarioRunner(path, output=results, console=Console(quiet=True)).run()
    filler.join(timeout=5)
    run = outcome.directory.path
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "failed", meta
    assert meta["reason"].startswith("no space left on device ("), meta["reason"]
    trials = pd.read_csv(run / "trials.csv")
    ok = trials[trials.status == "ok"]
    assert len(ok) >= 1, trials
    for row in ok.itertuples():
        assert pq.read_metadata(run / RECORDS_DIR / f"{row.trial_id}.parquet").num_rows == row.count
    assert not no_temp_files(run)


# -- a SIGKILLed runner -----------------------------------------------------------------


def kill_leftovers(marker: str) -> None:
    """A SIGKILLed runner cannot stop its tritonserver: the test does (by its tmp path)."""
    me = os.getpid()
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.pid != me and marker in " ".join(process.info["cmdline"] or []):
                process.kill()
        except psutil.Error:
            continue


def tear(path: Path, keep: float = 0.5) -> None:
    """Cut a file the way a kill mid-write leaves it: a prefix, no Parquet footer."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_sigkilled_run_resumes_and_loses_no_completed_trial(tmp_path: Path, triton_install):
    path = tmp_path / "tiny.yaml"
    path.write_text(LOCAL.format(rate=40, duration=1.0))
    results = tmp_path / "results"
    command = [sys.executable, "-m", "servebench.cli", "scenario", "run", str(path)]
    process = subprocess.Popen(
        [*command, "--output", str(results), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Kill it during the second trial: the first is complete, the second begun (its
        # records file is made as it starts, and it lasts a second at least).
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            if len(list(results.glob(f"*/{RECORDS_DIR}/*.parquet"))) == 2:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        kill_leftovers(str(tmp_path))
    (run,) = results.iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "running"
    trials = pd.read_csv(run / "trials.csv")
    assert list(trials.status) == ["ok"], trials
    first = run / RECORDS_DIR / f"{trials.trial_id[0]}.parquet"
    first_rows, first_mtime = pq.read_metadata(first).num_rows, first.stat().st_mtime_ns
    assert first_rows == trials["count"][0]
    # Before any resume, the report reads what the killed run measured.
    killed = load_run(run)
    assert set(killed.records.trial_id) == set(killed.telemetry.trial_id) == {trials.trial_id[0]}

    # What a kill at other moments leaves: a merge cut short, a telemetry file cut short
    # (also the single telemetry.parquet earlier versions kept open), a half-written CSV.
    (run / ".records.parquet.tmp").write_bytes(first.read_bytes()[:100])
    for part in (run / "telemetry").glob("*.parquet"):
        shutil.copy(part, run / "telemetry" / f".{part.name}.tmp")
        tear(run / "telemetry" / f".{part.name}.tmp")
        shutil.copy(part, run / "telemetry.parquet")
        tear(run / "telemetry.parquet")
    (run / ".trials.csv.tmp").write_text("trial_id,status\nhalf")

    console = Console(file=io.StringIO(), record=True)
    try:
        outcome = ScenarioRunner(path, resume=run, console=console).run()
    finally:
        kill_leftovers(str(tmp_path))
    lines = console.export_text().splitlines()
    assert outcome.status == "complete", outcome.reason
    assert any("torn" in line for line in lines), lines
    trials = pd.read_csv(run / "trials.csv")
    assert len(trials) == 2 and set(trials.status) == {"ok"}
    records = pq.read_table(run / "records.parquet").to_pandas()
    counts = records.groupby("trial_id").size().to_dict()
    assert counts == dict(zip(trials.trial_id, trials["count"], strict=True))
    assert first.stat().st_mtime_ns == first_mtime  # the completed trial was not run again
    telemetry = pq.read_table(run / "telemetry.parquet").to_pandas()
    assert set(telemetry.trial_id) == set(trials.trial_id)
    assert not no_temp_files(run)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and any("torn" in w for w in meta["warnings"])
