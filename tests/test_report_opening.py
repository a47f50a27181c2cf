"""report.html opens with the answer: the Recommendation box (the cheapest setting per
link, checked here against trials.csv by other means), what was not measured, the
cost-against-latency chart, and a summary sorted by cost within the SLO that the browser
filters and sorts with nothing fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from test_analysis_report import sections
from test_analysis_rundir import make_run_dir
from test_report_browser import open_report

from servebench.analysis.loader import load_run
from servebench.analysis.opening import not_measured, report_order
from servebench.analysis.report import write_report


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_run_dir(tmp_path_factory.mktemp("opening"), duration=20)
    write_report(path)
    return path


def expected_best(trials: pd.DataFrame, link: str, batch: int) -> str:
    """The cheapest setting by hand: every setting's highest offered rate among its VALID
    trials within the SLO (200 ms p99); one instance type, so the highest rate is the
    cheapest per inference, and of settings that held the same rate the one with the
    larger latency margin (the lower p99 there) wins."""
    ok = trials[
        (trials.status == "ok")
        & (trials.verdict == "VALID")
        & (trials.link == link)
        & (trials.batch_size == batch)
        & (trials.latency_p99 <= trials.slo_bound_s)
    ]
    best = ok.groupby("setting").target_rate.max()
    top = ok[ok.target_rate == best.max()]
    return str(top.loc[top.latency_p99.idxmin(), "setting"])


def test_the_box_names_the_cheapest_setting_per_link(run: Path) -> None:
    page = (run / "report.html").read_text()
    box = sections(page)["recommendation"]
    trials = pd.read_csv(run / "trials.csv")
    rows = re.findall(
        r"<tr><td class=text>(\w+)</td><td class='text model'>(.*?)</td>(.*?)</tr>", box
    )
    found = {(link, what): cells for link, what, cells in rows}
    assert len(found) == 4  # direct and wifi × batch 1 and 16, one model
    for link in ("direct", "wifi"):
        for batch in (1, 16):
            cells = found[(link, f"conv-d3-w64 · b{batch}")]  # the hash left out
            assert f"<td class=text>{expected_best(trials, link, batch)}</td>" in cells
    assert "For p99 ≤ 200 ms, priced as c6i.large ($0.0850/h" in box
    # The answer comes before the summary table, the chart between them.
    assert page.index('id="recommendation"') < page.index('id="cost-latency"')
    assert page.index('id="cost-latency"') < page.index('<section id="summary">')
    assert "<svg" in sections(page)["cost-latency"]


def test_what_was_not_measured_is_said(run: Path, tmp_path: Path) -> None:
    data = load_run(run, records=False)
    assert not_measured(data) == ["No GPU telemetry on this machine: GPU utilisation not measured."]
    remote = make_run_dir(tmp_path, duration=5)
    trials = pd.read_csv(remote / "trials.csv")
    trials["launch"] = "remote"
    trials[["server_queue_s", "server_compute_s", "client_send_s"]] = None
    trials.to_csv(remote / "trials.csv", index=False)
    (remote / "cold_start.csv").unlink()
    lines = not_measured(load_run(remote, records=False))
    assert "Remote server: cold start not measured." in lines
    assert "Server queue and compute times not measured (no server metrics read)." in lines
    assert "Client send time not measured: gRPC does not say when a request leaves." in lines
    page = write_report(remote).path.read_text()
    assert "Remote server: cold start not measured." in sections(page)["recommendation"]


def test_without_slo_or_instance_the_box_says_why(tmp_path: Path) -> None:
    for column, why in (
        ("slo_bound_s", "the scenario set no SLO"),
        ("instance", "the scenario named no cloud instance"),
    ):
        path = make_run_dir(tmp_path / column, duration=5)
        trials = pd.read_csv(path / "trials.csv")
        trials[column] = None
        if column == "instance":
            trials[["usd_per_hour", "cost_per_million"]] = None
        trials.to_csv(path / "trials.csv", index=False)
        report = write_report(path)
        box = sections(report.path.read_text())["recommendation"]
        assert f"No recommendation: {why}" in box
        assert "cost-latency" in report.empty


def test_summary_lists_met_and_cheapest_first_failed_last(run: Path) -> None:
    ordered = report_order(load_run(run, records=False).trials)
    met = ordered["slo_met"].tolist()
    assert met[: met.count(True)] == [True] * met.count(True)
    costs = ordered.loc[ordered["slo_met"] == True, "cost_per_million"].tolist()  # noqa: E712
    assert costs == sorted(costs)
    assert ordered["status"].iloc[-1] == "failed"


def test_first_screen_filter_and_sort_in_chromium(browser, run: Path) -> None:
    page, problems, fetched = open_report(browser, run / "report.html")
    try:
        page.set_viewport_size({"width": 1400, "height": 900})
        box = page.locator("#recommendation").bounding_box()
        assert box is not None and box["y"] < 900  # on the first screen
        rows = page.locator("section#summary tbody tr")
        assert rows.count() == 17
        page.fill("#summary-filter", "wifi b16")
        visible = [r for r in range(rows.count()) if rows.nth(r).is_visible()]
        assert len(visible) == 4  # 2 settings × 2 rates on wifi at batch 16
        page.fill("#summary-filter", "")
        headers = page.locator("section#summary thead th")
        p99 = [headers.nth(i).inner_text() for i in range(headers.count())].index("p99 ms")
        headers.nth(p99).click()
        cells = page.locator(f"section#summary tbody tr td:nth-child({p99 + 1})")
        values = [float(cells.nth(i).inner_text().replace(",", "")) for i in range(16)]
        assert values == sorted(values)  # the failed trial's "–" sorts last
        assert cells.nth(16).inner_text() == "–"
        assert problems == [] and fetched == []
    finally:
        page.close()


def test_the_box_never_claims_a_failure_that_was_not_measured(tmp_path: Path) -> None:
    """Issue 33: over wifi the trials were too short to bound p99 (175 of the 368
    requests that bound it at 95 %), over lte the only trial was INVALID: the box says
    undecided and no valid measurement, with why — never "none meets the SLO" — and
    what each link added to the median latency, from the run's own trials."""
    from test_recommend import trial, write_run

    from servebench.analysis.opening import link_recommendations, recommendation_html

    def row(setting: str, link: str, p50: float, p99: float, high: float | None, **extra):
        return trial(
            setting, 3000.0 if link == "direct" else 175.0, p99, link=link,
            load_kind="concurrency", load_level=4.0, mode="closed", latency_p50=p50 / 1e3,
            confidence_level=0.95, latency_p99_low=(p99 - 1) / 1e3,
            latency_p99_high=None if high is None else high / 1e3, ok=175, slo_bound_s=0.2,
            **extra,
        )  # fmt: skip

    rows = [
        row("A", "direct", 1.0, 3.0, 3.5),
        row("B", "direct", 1.2, 3.2, 3.6),
        row("A", "wifi", 21.0, 32.0, None),
        row("B", "wifi", 23.0, 33.0, None),
        row("A", "lte", 71.0, 90.0, 95.0, verdict="INVALID",
            verdict_reasons="generator fell behind: lag p99 60 ms is 67% of latency p99"),
    ]  # fmt: skip
    data = load_run(write_run(tmp_path, "short", rows), records=False)
    box = recommendation_html(data, *link_recommendations(data))
    assert "none meets" not in box
    assert "undecided — too few requests (175 of 368): p99 32.0 ms at 175 req/s" in box
    assert "(2 of 2 settings undecided)" in box
    assert "no valid measurement — generator fell behind: lag p99 60 ms" in box
    # A (21 - 1) and B (23 - 1.2): their median; the INVALID lte trial adds nothing.
    assert 'id="link-added">wifi adds 20.9 ms to the median latency. <small' in box


def test_the_box_and_recommend_name_the_same_tie(tmp_path: Path) -> None:
    """Equal cost per inference and overlapping p99 intervals: the box lists every tied
    setting, as `recommend` does (`Ranking.tied`, one rule)."""
    from test_recommend import run_cli, trial, write_run

    from servebench.analysis.opening import link_recommendations, recommendation_html

    rows = [
        trial(name, 3000.0, 6.0, confidence_level=0.95, latency_p99_low=low / 1e3,
              latency_p99_high=high / 1e3, ok=20000, slo_bound_s=0.2)
        for name, low, high in (("A", 5.0, 6.6), ("B", 5.1, 6.7), ("C", 20.0, 30.0))
    ]  # fmt: skip
    run = write_run(tmp_path, "tie", rows)
    data = load_run(run, records=False)
    box = recommendation_html(data, *link_recommendations(data))
    assert "<td class=text>tie: A, B <small>" in box
    text = run_cli(str(run)).output
    assert "A tie for the cheapest conv-d2-w32-abcdef (batch 1)" in text
    assert "between 2 settings: #1 A ($0.01574 per million inferences at 3,000 req/s" in text
