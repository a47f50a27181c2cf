"""report.html, the terminal summary and `servebench report` on a realistic run dir."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from test_analysis_rundir import make_run_dir, run_without_trials
from typer.testing import CliRunner

from servebench.analysis.report import LOCUST_NOTE, write_report
from servebench.analysis.summary import print_summary
from servebench.cli import app

PLOT_SECTIONS = (
    "latency-cdf",
    "throughput-p99",
    "heatmap",
    "roofline",
    "cost",
    "cold-start",
    "transfer",
)
# A resource the browser would fetch: src/href/url()/@import pointing off the page.
REMOTE = re.compile(
    r"""(?:\b(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)"""
    r"""|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:@import)""",
    re.IGNORECASE,
)


def sections(page: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', page, re.DOTALL))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = make_run_dir(tmp_path_factory.mktemp("report"))
    result = write_report(run)
    assert result.errors == [] and result.empty == []
    return run, result.path.read_text()


def test_every_section_has_its_plot(report) -> None:
    run, page = report
    found = sections(page)
    assert set(found) >= {"summary", *PLOT_SECTIONS}
    for ident in PLOT_SECTIONS:
        assert found[ident].count("<svg") >= 1, ident
        assert "no-data" not in found[ident] and "plot-error" not in found[ident], ident
    assert (run / "report.html").is_file()


def test_report_is_self_contained(report) -> None:
    _, page = report
    assert REMOTE.search(page) is None, REMOTE.search(page)
    # One inline script (the summary's filter and sort), loading nothing.
    assert page.count("<script") == 1 and "<script>" in page and "<link" not in page
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page  # remote DTD reference gone


def test_summary_section(report) -> None:
    _, page = report
    summary = sections(page)["summary"]
    assert summary.count("<tr") == 18  # header + 17 trials
    assert 'class="failed"' in summary
    assert "server crashed: tritonserver exited with code -9" in summary
    assert (
        "triton[dynamic_batching=on,instance_count=2] · conv-d3-w64-1a9df3 · b16 · wifi · rate 8/s"
        in summary
    )
    assert "run-status" not in page  # a complete run gets no status banner
    assert "load-source" not in page


def test_transfer_section_shows_the_finding(report) -> None:
    _, page = report
    transfer = sections(page)["transfer"]
    rows = re.findall(r"<tr><td class=\"text\">wifi</td><td>(\d+)</td>.*?<td>(\d+)%</td>", transfer)
    shares = {int(b): int(s) for b, s in rows}
    assert shares[1] > 70 and shares[16] < 50


def test_roofline_and_cost_sections(report) -> None:
    _, page = report
    found = sections(page)
    assert "60 GFLOP/s" in found["roofline"] and "no memory-bandwidth slope" in found["roofline"]
    assert "c6i.large" in found["cost"] and "$0.0850" in found["cost"]


def test_interrupted_locust_run_says_so(tmp_path: Path) -> None:
    run = make_run_dir(
        tmp_path,
        duration=20,
        status="interrupted",
        reason="stopped by the user (SIGINT) during trial 17",
        source="locust",
    )
    page = write_report(run).path.read_text()
    banner = re.search(r'<div class="banner interrupted" id="run-status">(.*?)</div>', page)
    assert banner and "Run interrupted: stopped by the user (SIGINT) during trial 17" in banner[1]
    assert "closed-loop Locust users" in page and LOCUST_NOTE.split(":")[0] in page
    # The banner comes before the first table.
    assert page.index("run-status") < page.index('<section id="summary">')


def test_missing_inputs_become_sentences(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=20)
    (run / "records.parquet").unlink()
    for part in (run / "records").glob("*.parquet"):
        part.unlink()
    (run / "cold_start.csv").unlink()
    trials = pd.read_csv(run / "trials.csv")
    trials["cost_per_million"] = None
    trials = trials[trials["link"] == "direct"]  # no emulated link at all
    trials.to_csv(run / "trials.csv", index=False)
    result = write_report(run)
    assert result.errors == []
    assert set(result.empty) == {"latency-cdf", "cold-start", "cost", "cost-latency", "transfer"}
    found = sections(result.path.read_text())
    assert "No per-request records" in found["latency-cdf"]
    assert "No cold-start measurements" in found["cold-start"]
    assert "No trial has a cost" in found["cost"]
    assert "No emulated-link trial" in found["transfer"]
    for ident in ("throughput-p99", "heatmap", "roofline"):
        assert "<svg" in found[ident]


def test_run_with_no_trials_still_reports(tmp_path: Path) -> None:
    result = write_report(run_without_trials(tmp_path, "r", "failed", "tritonserver not found"))
    page = result.path.read_text()
    assert "Run failed: tritonserver not found" in page
    assert result.errors == []
    assert len(result.empty) == len(PLOT_SECTIONS)


def test_heatmap_uses_depth_by_width_for_a_sweep(tmp_path: Path) -> None:
    from servebench.analysis.figures import heatmap_axes, p99_heatmap

    run = make_run_dir(tmp_path, duration=10)
    trials = pd.read_csv(run / "trials.csv")
    assert heatmap_axes(trials) == ("link", "batch_size")
    sweep = pd.concat(
        [trials.assign(depth=d, width=w, model=f"conv-d{d}-w{w}") for d in (2, 4) for w in (32, 64)]
    )
    assert heatmap_axes(sweep) == ("depth", "width")
    svg, caption = p99_heatmap(sweep)
    assert svg.startswith("<svg") and "depth × width" in caption


def test_print_summary(report) -> None:
    run, _ = report
    console = Console(record=True, width=240)
    print_summary(run, console)
    text = console.export_text()
    assert "run fixture-20261129T120000Z" in text
    assert "complete: 16 ok, 1 failed/skipped of 17 trials (17 planned)" in text
    assert "failed: server crashed" in text
    assert "report:" not in text  # said once, by the command that wrote it
    # One model in the run: named once above the table, not on each of the 17 rows.
    assert "all trials: model conv-d3-w64-1a9df3" in text


def test_cli_report_and_errors(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=10)
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert f"report: {run / 'report.html'}" in result.output.replace("\n", "")
    assert (run / "report.html").is_file()
    missing = runner.invoke(app, ["report", str(tmp_path / "absent")])
    assert missing.exit_code == 2
    assert f"{tmp_path / 'absent'}: no such run directory" in missing.output.replace("\n", "")
    other = tmp_path / "elsewhere.html"
    assert runner.invoke(app, ["report", "html", str(run), "-o", str(other)]).exit_code == 0
    assert other.is_file()


def test_cost_at_slo_and_ceiling_from_run_json(tmp_path: Path) -> None:
    """Columns the runner adds beyond the contract show up; a peak kept only in run.json
    still gives the roofline its ceiling."""
    run = make_run_dir(tmp_path, duration=10)
    trials = pd.read_csv(run / "trials.csv")
    trials["cost_per_million_at_slo"] = trials["cost_per_million"] * 1.5
    trials.drop(columns="host_peak_flops").to_csv(run / "trials.csv", index=False)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "host_peak_flops": 42e9}))
    found = sections(write_report(run).path.read_text())
    assert "USD per million at the best rate meeting the SLO" in found["cost"]
    assert "42 GFLOP/s" in found["roofline"]
