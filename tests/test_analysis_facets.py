"""Faceted figures show every facet (wrapped into rows), or name what they left out.

The figures were capped at 4 panels without a word: a 5-type mutation sweep's heatmap
lost `attention`, a 6-link study's CDFs lost 2 links, throughput-vs-p99 showed 4 of 20
models. The SVG keeps text as text, so a panel's title in the SVG is a panel drawn.
"""

from __future__ import annotations

import re

import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_analysis_rundir import make_run_dir

from servebench.analysis import figures
from servebench.analysis.figures import latency_cdf, p99_heatmap, throughput_vs_p99

LINKS = ("direct", "wifi", "lte", "5g", "dsl", "satellite")
TYPES = ("conv", "dense", "residual", "rnn", "attention")


def texts(svg: str) -> list[str]:
    """The SVG's text elements (titles, labels), in drawing order."""
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame]:
    run = make_run_dir(tmp_path_factory.mktemp("facets"), duration=10)
    trials = pd.read_csv(run / "trials.csv", dtype={"trial_id": str})
    records = pq.read_table(run / "records.parquet").to_pandas()
    return trials, records


def _relabel(trials: pd.DataFrame, records: pd.DataFrame, column: str, values, suffix: str):
    """Copies of the run's trials, one per value of `column`, under new trial ids."""
    t_parts, r_parts = [], []
    for k, value in enumerate(values):
        ids = {t: f"{t}-{suffix}{k}" for t in trials["trial_id"]}
        t_parts.append(trials.assign(trial_id=trials["trial_id"].map(ids), **{column: value}))
        r_parts.append(records.assign(trial_id=records["trial_id"].map(ids)))
    return pd.concat(t_parts, ignore_index=True), pd.concat(r_parts, ignore_index=True)


def test_six_links_get_six_cdf_panels(fixture_run) -> None:
    trials, records = fixture_run
    six, six_records = _relabel(trials, records, "link", LINKS, "l")
    svg = latency_cdf(six, six_records)
    for link in LINKS:
        assert f"link: {link}" in texts(svg), link
    assert "not shown" not in svg


def test_five_layer_types_share_one_colour_scale(fixture_run) -> None:
    trials, _ = fixture_run
    sweep = pd.concat(
        [
            trials.assign(
                layer_type=kind,
                depth=d,
                width=w,
                model=f"{kind}-d{d}-w{w}",
                latency_p99=trials["latency_p99"] * (1 + i) * d,
            )
            for i, kind in enumerate(TYPES)
            for d in (2, 4)
            for w in (32, 64)
        ],
        ignore_index=True,
    )
    # A user's imported model beside the sweep: no family, depth or width, so no panel.
    imported = trials.assign(layer_type=None, depth=None, width=None, format="onnx", model="net")
    svg, caption = p99_heatmap(pd.concat([sweep, imported], ignore_index=True))
    titles = texts(svg)
    for kind in TYPES:
        assert kind in titles, kind
    assert "all" not in titles and "onnx" not in titles
    # One colour bar for all panels: one shared scale, so equal colours mean equal p99.
    assert titles.count("p99 (ms)") == 1
    assert "one panel per layer type" in caption


def test_twenty_models_get_twenty_panels(fixture_run) -> None:
    trials, _ = fixture_run
    models = [f"model-{k:02d}" for k in range(20)]
    many = pd.concat([trials.assign(model=m) for m in models], ignore_index=True)
    svg = throughput_vs_p99(many)
    for model in models:
        assert f"{model} (link direct)" in texts(svg), model


def test_past_the_limit_the_figure_says_what_it_left_out(fixture_run) -> None:
    trials, _ = fixture_run
    count = figures.MAX_PANELS + 3
    models = [f"model-{k:02d}" for k in range(count)]
    many = pd.concat([trials.assign(model=m) for m in models], ignore_index=True)
    svg = throughput_vs_p99(many)
    assert f"3 more models not shown (over {figures.MAX_PANELS} panels)" in svg
    assert all(m in svg for m in models[-3:])  # named in the note


def test_grid_wraps_into_rows() -> None:
    assert figures._grid_shape(1) == (1, 1)
    assert figures._grid_shape(4) == (1, 4)
    assert figures._grid_shape(6) == (2, 4)
    assert figures._grid_shape(20) == (5, 4)
