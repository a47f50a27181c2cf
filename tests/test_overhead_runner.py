"""servebench overhead's orchestration: probe_main's JSON lines, the interleaved schedule,
the result files (written as the run goes, kept when it is interrupted), the container side
for real where the engine and the servebench image exist, and the report's section.

The probes here are small modules written into a temporary package (a probe may be any
importable module with run(context)), so the runner and the sides are the real ones while
the figures are known; the real probes have their own tests.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from servebench.analysis.overhead import SEED_CPU
from servebench.analysis.report import write_report
from servebench.cli import app
from servebench.overhead.measure import Measurement
from servebench.overhead.probe_main import UNAVAILABLE_EXIT
from servebench.overhead.runner import (
    HOST_ONLY_REASON,
    OverheadRunner,
    OverheadSettings,
    Step,
    schedule,
)
from servebench.overhead.serving import SERVING_DIR, measure_serving
from servebench.overhead.sides import KIND, KIND_LABEL, container_problem
from servebench.overhead.stats import compare_measurements, to_rows
from servebench.results import OVERHEAD_FILE, OVERHEAD_RAW_FILE, RUN_FILE
from servebench.servers.docker_engine import OWNER_LABEL, connect_docker

PACKAGE = "sbtest_probes"

PROBE_SOURCES = {
    # Two figures; chatter on stdout (its own and a child's) must not become a measurement.
    "fixed": """
        import subprocess
        from servebench.overhead.measure import Measurement

        def run(context):
            print("chatter")
            subprocess.run(["echo", "a child's chatter"], check=True)
            return [
                Measurement("fixed", "speed", 2.0, "GFLOP/s", "higher"),
                Measurement("fixed", "latency", 0.5, "s", "lower", cpu_s=0.25, wall_s=0.5),
            ]
    """,
    "unavailable": """
        from servebench.overhead.probes import ProbeUnavailable

        def run(context):
            raise ProbeUnavailable("this probe needs a thing\\nthis machine lacks")
    """,
    "crash": """
        def run(context):
            raise RuntimeError("the tool died")
    """,
    # Ctrl-C in the middle of the second repetition: the runner's process gets SIGINT
    # while it waits for this probe, as it would from a terminal.
    "interrupt": """
        import os, signal, time
        from servebench.overhead.measure import Measurement

        def run(context):
            count = context.scratch / "calls"
            calls = int(count.read_text()) + 1 if count.exists() else 1
            count.write_text(str(calls))
            if calls == 2:
                os.kill(os.getppid(), signal.SIGINT)
                time.sleep(60)
            return [Measurement("interrupt", "x", float(calls), "s", "lower")]
    """,
}


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test probes as an importable package; PYTHONPATH reaches the probe processes."""
    root = tmp_path / "probes"
    package = root / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, source in PROBE_SOURCES.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    )
    return root


def _probe_main(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servebench.overhead.probe_main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def _run(tmp_path: Path, names: tuple[str, ...], **settings) -> tuple:
    steps: list[tuple[Step, int | str]] = []
    settings.setdefault("repeats", 3)
    runner = OverheadRunner(
        OverheadSettings(probes=names, output=tmp_path / "results", **settings),
        on_step=lambda step, outcome: steps.append((step, outcome)),
    )
    outcome = runner.run()
    return outcome, steps


def _files(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    return (
        pd.read_csv(run_dir / OVERHEAD_RAW_FILE),
        pd.read_csv(run_dir / OVERHEAD_FILE),
        json.loads((run_dir / RUN_FILE).read_text()),
    )


# -- probe_main --------------------------------------------------------------------------


def test_probe_main_prints_one_measurement_per_line(probes: Path, tmp_path: Path) -> None:
    done = _probe_main(
        f"{PACKAGE}.fixed", "--scratch", str(tmp_path), "--overlay", str(tmp_path), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    found = [Measurement.from_json(line) for line in done.stdout.splitlines()]
    assert [(m.metric, m.value, m.unit, m.better) for m in found] == [
        ("speed", 2.0, "GFLOP/s", "higher"),
        ("latency", 0.5, "s", "lower"),
    ]
    # The probe's own CPU and wall time stand; a figure without them gets the whole run's.
    assert (found[1].cpu_s, found[1].wall_s) == (0.25, 0.5)
    assert found[0].cpu_s is not None and found[0].cpu_s >= 0
    assert found[0].wall_s is not None and found[0].wall_s > 0
    assert "chatter" in done.stderr and "a child's chatter" in done.stderr


def test_probe_main_unavailable_is_its_own_exit_and_one_sentence(
    probes: Path, tmp_path: Path
) -> None:
    done = _probe_main(
        f"{PACKAGE}.unavailable",
        "--scratch",
        str(tmp_path),
        "--overlay",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == UNAVAILABLE_EXIT
    assert done.stdout == "this probe needs a thing this machine lacks\n"


def test_probe_main_refuses_an_unknown_probe(tmp_path: Path) -> None:
    done = _probe_main("nope", "--scratch", str(tmp_path), "--overlay", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown 'nope'" in done.stderr and "hpcc" in done.stderr


# -- the schedule ------------------------------------------------------------------------


def test_schedule_interleaves_the_sides_within_each_repetition() -> None:
    steps = schedule(("a", "b"), 2, ("host", "container"))
    assert [(s.probe, s.rep, s.side) for s in steps] == [
        ("a", 1, "host"),
        ("a", 1, "container"),
        ("a", 2, "host"),
        ("a", 2, "container"),
        ("b", 1, "host"),
        ("b", 1, "container"),
        ("b", 2, "host"),
        ("b", 2, "container"),
    ]


# -- runs on the host --------------------------------------------------------------------


def test_host_only_run_writes_every_figure_and_the_report_section(
    probes: Path, tmp_path: Path
) -> None:
    outcome, steps = _run(tmp_path, (f"{PACKAGE}.fixed",), host_only=True)
    assert (outcome.status, outcome.reason) == ("complete", None)
    assert [(s.rep, s.side, n) for s, n in steps] == [
        (1, "host", 2),
        (2, "host", 2),
        (3, "host", 2),
    ]
    raw, table, run = _files(outcome.directory.path)
    assert len(raw) == 6 and set(raw["side"]) == {"host"}
    assert sorted(raw["rep"].unique()) == [1, 2, 3]
    speed = table.set_index("metric").loc["speed"]
    assert speed["host_median"] == 2.0 and speed["host_n"] == 3
    assert pd.isna(speed["container_median"]) and "host only" in speed["ci_note"]
    assert run["status"] == "complete" and run["source"] == "servebench overhead"
    assert run["overhead"]["container_not_measured"] == HOST_ONLY_REASON
    assert outcome.container_reason == HOST_ONLY_REASON

    page = write_report(outcome.directory.path).path.read_text()
    assert 'id="overhead"' in page and "Container vs host" in page
    assert '<td class="text">speed</td>' in page and '<td class="text">latency</td>' in page
    assert "500 ms" in page  # seconds shown as milliseconds, as everywhere people read them
    assert HOST_ONLY_REASON in page
    assert 'id="latency-cdf"' not in page  # no trial sections for a run without trials


def test_unavailable_and_crashing_probes_are_recorded_and_not_repeated(
    probes: Path, tmp_path: Path
) -> None:
    names = (f"{PACKAGE}.fixed", f"{PACKAGE}.unavailable", f"{PACKAGE}.crash")
    outcome, steps = _run(tmp_path, names, host_only=True, repeats=2)
    assert outcome.status == "partial" and "1 probe runs failed" in (outcome.reason or "")
    tried = [(s.probe.rsplit(".", 1)[1], s.rep) for s, _ in steps]
    assert tried == [("fixed", 1), ("fixed", 2), ("unavailable", 1), ("crash", 1)]
    _, _, run = _files(outcome.directory.path)
    block = run["overhead"]
    assert block["unavailable"] == {
        f"{PACKAGE}.unavailable": {"host": "this probe needs a thing this machine lacks"}
    }
    assert "RuntimeError: the tool died" in block["failed"][f"{PACKAGE}.crash"]["host"]


def test_without_an_engine_the_container_side_says_why(
    probes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    outcome, steps = _run(tmp_path, (f"{PACKAGE}.fixed",), repeats=2)
    assert outcome.status == "complete"
    assert outcome.container_reason and "no container engine answers" in outcome.container_reason
    assert [s.side for s, _ in steps] == ["host", "host"]
    _, _, run = _files(outcome.directory.path)
    assert run["overhead"]["container_not_measured"] == outcome.container_reason
    assert run["overhead"]["sides"] == ["host", "container"]


def test_interrupted_run_keeps_what_it_measured(probes: Path, tmp_path: Path) -> None:
    """Ctrl-C during the second repetition, through the command line: exit 130, the first
    repetition's figures on disk, run.json saying why it stopped."""
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "servebench.cli", "overhead", "run", "--probes",
         f"{PACKAGE}.interrupt", "--repeats", "3", "--host-only", "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 130, done.stdout + done.stderr
    (run_dir,) = out.iterdir()
    raw, table, run = _files(run_dir)
    assert raw[["rep", "value"]].values.tolist() == [[1, 1.0]]
    assert table.loc[0, "host_median"] == 1.0
    assert run["status"] == "interrupted" and "Ctrl-C" in run["reason"]
    assert run["ended_at"] is not None
    assert "run interrupted" in done.stdout


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    assert_one_line_error(
        runner.invoke(app, ["overhead", "run", "--probes", "hpcc,nope", "--out", str(tmp_path)]),
        "--probes",
        "nope",
    )
    assert_one_line_error(
        runner.invoke(app, ["overhead", "run", "--repeats", "0", "--out", str(tmp_path)]),
        "--repeats",
    )
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


# -- the container side, for real --------------------------------------------------------

CONTAINER_PROBLEM = container_problem()


def _our_containers() -> list:
    client = connect_docker()
    try:
        return client.containers.list(
            all=True, filters={"label": [f"{OWNER_LABEL}={os.getpid()}", f"{KIND_LABEL}={KIND}"]}
        )
    finally:
        client.close()


def test_a_system_interpreter_prefix_is_not_mounted_over_the_image() -> None:
    """A venv made from Debian's python3.11 has /usr as its base prefix: mounting that would
    hide the image's hpcc, ioping, fio and libraries (the image has the same python3.11)."""
    from servebench.overhead.sides import read_only_folders

    system = read_only_folders(base_prefix="/usr")
    assert not any(Path("/usr").is_relative_to(folder) for folder in system)
    venv = Path(sys.prefix).resolve()
    assert any(venv.is_relative_to(folder) for folder in system)
    assert Path("/opt/python3.11") in read_only_folders(base_prefix="/opt/python3.11")


@pytest.mark.skipif(
    CONTAINER_PROBLEM is not None, reason=f"{CONTAINER_PROBLEM} (run docker/images.sh)"
)
def test_container_side_runs_a_real_probe_interleaved(tmp_path: Path) -> None:
    outcome, steps = _run(tmp_path, ("hpcg",), repeats=2, quick=True)
    assert outcome.status == "complete", outcome.reason
    assert outcome.container_reason is None
    assert [(s.rep, s.side) for s, _ in steps] == [
        (1, "host"), (1, "container"), (2, "host"), (2, "container")
    ]  # fmt: skip
    raw, table, _ = _files(outcome.directory.path)
    assert raw.sort_values("order")["side"].tolist() == ["host", "container", "host", "container"]
    row = table.iloc[0]
    assert row["host_n"] == 2 and row["container_n"] == 2
    assert row["container_median"] > 0 and not pd.isna(row["overhead_pct"])
    assert _our_containers() == []


# -- serving and the report ----------------------------------------------------------------


def test_serving_on_the_host_is_a_scenario_run_read_back(tmp_path: Path) -> None:
    found = {m.metric: m for m in measure_serving("host", tmp_path, 1, quick=True)}
    assert set(found) == {
        "latency_p50", "latency_p99", "throughput", "server_cpu",
        "start_to_ready", "model_load", "first_inference", "to_first_answer",
    }  # fmt: skip
    parts = ("start_to_ready", "model_load", "first_inference")
    assert found["to_first_answer"].value == pytest.approx(sum(found[p].value for p in parts))
    assert 0 < found["latency_p50"].value <= found["latency_p99"].value
    assert found["throughput"].value > 0 and found["throughput"].better == "higher"
    (run,) = [p for p in (tmp_path / SERVING_DIR).iterdir() if p.is_dir()]
    assert found["latency_p50"].detail["run"] == run.name
    assert json.loads((run / RUN_FILE).read_text())["status"] == "complete"


def test_report_shows_overhead_beside_the_seed_figures(tmp_path: Path) -> None:
    host = [Measurement("hpcg", "cg_gflops", v, "GFLOP/s", "higher") for v in (10.0, 10.0, 10.0)]
    container = [Measurement("hpcg", "cg_gflops", v, "GFLOP/s", "higher") for v in (9.0, 9.0, 9.0)]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pd.DataFrame(to_rows(compare_measurements(host, container))).to_csv(
        run_dir / OVERHEAD_FILE, index=False
    )
    run = {
        "run_id": "run",
        "status": "complete",
        "overhead": {"unavailable": {"gpu": {"host": "no GPU here", "container": "no GPU here"}}},
    }
    (run_dir / RUN_FILE).write_text(json.dumps(run))
    page = write_report(run_dir).path.read_text()
    row = page[page.index('<td class="text">cg_gflops</td>') :].split("</tr>")[0]
    assert "10 GFLOP/s" in row and "9 GFLOP/s" in row and "+10.0 %" in row
    assert html.escape(SEED_CPU) in row
    assert "95% interval" in page
    assert "gpu on the host: not measured: no GPU here" in page
