"""report.html in a real browser: Debian's headless Chromium, driven by Playwright.

Checks what only a browser can: the page renders with no console errors, every plot is
an SVG the browser laid out with a real size, and opening the page fetches nothing but
the file itself (every other request is aborted and counted). The screenshot lands in
the run directory, as a user of the report would want it.
"""

from __future__ import annotations

from pathlib import Path

from test_analysis_report import PLOT_SECTIONS
from test_analysis_rundir import make_run_dir

from servebench.analysis.report import write_report


def open_report(browser, report: Path):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems: list[str] = []
    fetched: list[str] = []
    page.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def gate(route) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:", "about:")):
            route.continue_()
        else:
            fetched.append(url)
            route.abort()

    page.route("**/*", gate)
    page.goto(report.as_uri(), wait_until="load")
    return page, problems, fetched


def test_report_renders_in_chromium(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path)
    report = write_report(run).path
    page, problems, fetched = open_report(browser, report)
    try:
        assert problems == []
        assert fetched == [], f"the report tried to fetch {fetched}"
        assert page.title() == "servebench report — fixture-20261129T120000Z"
        for ident in PLOT_SECTIONS:
            section = page.locator(f"section#{ident}")
            assert section.count() == 1, ident
            plots = section.locator("svg, img")
            assert plots.count() >= 1, f"{ident}: no plot"
            assert section.locator(".no-data, .plot-error").count() == 0, ident
            for i in range(plots.count()):
                box = plots.nth(i).bounding_box()
                assert box and box["width"] > 200 and box["height"] > 100, (ident, box)
        rows = page.locator("section#summary tbody tr")
        assert rows.count() == 17
        assert page.locator("section#summary tr.failed").count() == 1
        shot = run / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 50_000
    finally:
        page.close()


def test_failed_run_banner_visible(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=20, status="failed", reason="tritonserver crashed twice")
    (run / "cold_start.csv").unlink()
    report = write_report(run).path
    page, problems, fetched = open_report(browser, report)
    try:
        assert problems == [] and fetched == []
        banner = page.locator("#run-status")
        assert banner.is_visible()
        assert "Run failed: tritonserver crashed twice" in banner.inner_text()
        assert banner.bounding_box()["y"] < 200  # at the top, not buried under tables
        assert page.locator("section#cold-start .no-data").is_visible()
        page.screenshot(path=str(run / "report.png"), full_page=True)
    finally:
        page.close()
