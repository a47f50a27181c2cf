"""The terminal summary at 80 columns: one line per trial, no number ever wrapped or cut.

At 80 columns the table used to wrap every cell ("6,92 / 2.9", "VALI / D"): a trial took
28 lines and the quickstart's table about 1,000. Now settings get short labels (legend
printed once), coordinates every trial shares are said once above the table, reasons
become numbered notes, and columns are chosen by width.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from test_analysis_rundir import make_run_dir

from servebench.analysis.labels import number, parse_setting, short_settings
from servebench.analysis.summary import print_summary, terminal_summary
from servebench.common.readable import ms

QUICKSTART_SETTINGS = [
    f"triton[dynamic_batching={b},max_queue_delay_us={0 if b == 'off' else 500},instance_count={i}]"
    for b in ("off", "on")
    for i in (1, 2)
]
ROW = re.compile(r"^\s*\d+  ")  # a table row: its number, then the column gap
QUICKSTART_MODELS = ["dense-d2-w32-5c1e0a", "conv-d2-w32-8f2b41", "attention-d2-w32-0d9c7e"]


@pytest.fixture(scope="module")
def quickstart_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """36 closed-loop trials shaped like the quickstart's: 4 settings × 3 models × 3 links,
    one trial INVALID and one failed, with large numbers where they are widest."""
    run = make_run_dir(tmp_path_factory.mktemp("quickstart"), duration=10)
    base = pd.read_csv(run / "trials.csv").iloc[0]
    rows = []
    for s, setting in enumerate(QUICKSTART_SETTINGS):
        for m, model in enumerate(QUICKSTART_MODELS):
            for k, link in enumerate(("direct", "wifi", "lte")):
                row = base.copy()
                row["trial_id"] = f"t{s}{m}{k}"
                row["setting"], row["model"], row["link"] = setting, model, link
                row["load_kind"], row["load_level"] = "concurrency", 4
                row["throughput_rps"] = 6922.93 / (1 + s + m + k)
                row["throughput_ips"] = row["throughput_rps"]
                row["latency_p99"] = 0.0029 * (1 + 10 * k)
                rows.append(row)
    rows[5]["verdict"] = "INVALID"
    rows[5]["verdict_reasons"] = "generator fell behind: 3.2 % of sends more than 1 ms late"
    rows[7]["status"], rows[7]["reason"] = "failed", "server crashed: exit -9"
    pd.DataFrame(rows).to_csv(run / "trials.csv", index=False)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "trials_planned": 36}))
    return run


def _print(run: Path, width: int) -> list[str]:
    console = Console(record=True, width=width)
    print_summary(run, console)
    return console.export_text().splitlines()


def _cold_start_block(lines: list[str]) -> list[str]:
    """The cold-start lines under the table: a heading, then indented lines."""
    start = next(i for i, line in enumerate(lines) if line.startswith("cold start"))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


@pytest.mark.parametrize("width", [80, 100, 60])
def test_narrow_terminal_one_line_per_trial(quickstart_like: Path, width: int) -> None:
    lines = _print(quickstart_like, width)
    assert max(len(line) for line in lines) <= width
    trials = pd.read_csv(quickstart_like / "trials.csv")
    rows = [line for line in lines if ROW.match(line)]
    assert [int(r.split()[0]) for r in rows] == list(range(1, len(trials) + 1))
    cold = _cold_start_block(lines)
    assert cold and all(len(line) <= width for line in cold)
    # the header, notes, legend and status around the table, besides the cold start
    assert len(lines) - len(rows) - len(cold) <= 16
    for row, trial in zip(rows, trials.to_dict("records"), strict=True):
        assert ms(trial["latency_p99"]) in row.split()  # p99 is whole, never cut
    if width >= 80:  # room for every name in full, model ids without their hash
        assert not any("…" in row for row in rows)
        assert sum("attention-d2-w32 " in row for row in rows) == 12


def test_numbers_are_never_wrapped_or_cut(quickstart_like: Path) -> None:
    lines = _print(quickstart_like, 80)
    header = next(line for line in lines if " p99 ms" in line)
    rows = [line for line in lines if ROW.match(line)]
    trials = pd.read_csv(quickstart_like / "trials.csv")
    if "inf/s" in header:  # the widest numbers: 6,922.9 and the like
        for row, trial in zip(rows, trials.to_dict("records"), strict=True):
            assert number(trial["throughput_ips"], 1) in row.split()
    assert not any(re.search(r"\d…|…\d", row) for row in rows)


def test_short_setting_labels_and_legend_once(quickstart_like: Path) -> None:
    lines = _print(quickstart_like, 80)
    text = "\n".join(lines)
    assert "b-off qd0 i1" in text and "b-on qd500 i2" in text
    assert "triton[" not in text
    legend = [line for line in lines if "b = dynamic_batching" in line]
    assert len(legend) == 1 and "qd = max_queue_delay_us" in legend[0]
    assert "all trials: batch b1 · load c4" in text and "c4 = 4 closed-loop clients" in text


def test_reasons_are_numbered_notes(quickstart_like: Path) -> None:
    text = "\n".join(_print(quickstart_like, 80))
    assert "INVALID [1]" in text and "failed [2]" in text
    assert "[1] INVALID: generator fell behind" in text
    assert "[2] failed: server crashed: exit -9" in text


def test_shared_coordinates_said_once(tmp_path: Path) -> None:
    lines = _print(make_run_dir(tmp_path, duration=10), 80)
    assert "all trials: model conv-d3-w64-1a9df3" in lines
    assert sum("conv-d3-w64-1a9df3" in line for line in lines) == 1


def test_wide_terminal_shows_every_column(quickstart_like: Path) -> None:
    lines = _print(quickstart_like, 200)
    header = next(line for line in lines if " p99 ms" in line)
    for name in ("setting", "model", "link", "status", "req/s", "inf/s", "p50 ms", "$/M inf"):
        assert name in header
    assert not any("left out" in line for line in lines)


def test_left_out_columns_are_named(quickstart_like: Path) -> None:
    trials = pd.read_csv(quickstart_like / "trials.csv")
    summary = terminal_summary(trials, 60)
    assert summary.left_out and "p99 ms" not in summary.left_out
    assert any(
        f"left out at 60 columns: {summary.left_out[0]}" in line
        for line in _print(quickstart_like, 60)
    )


def test_parse_and_shorten_settings() -> None:
    assert parse_setting("triton[dynamic_batching=on,preferred_batch_sizes=[4, 8]]") == (
        "triton",
        {"dynamic_batching": "on", "preferred_batch_sizes": "[4, 8]"},
    )
    assert parse_setting("tfs") == ("tfs", {})
    labels, legend = short_settings(
        [
            "triton[dynamic_batching=on,preferred_batch_sizes=[4, 8]]",
            "tfs[enable_batching=off,new_knob=3]",
            "tfs",
            "triton[instance_kind=KIND_GPU]",
        ]
    )
    assert labels == {
        "triton[dynamic_batching=on,preferred_batch_sizes=[4, 8]]": "triton b-on pb4+8",
        "tfs[enable_batching=off,new_knob=3]": "tfs b-off nk3",
        "tfs": "tfs",
        "triton[instance_kind=KIND_GPU]": "triton k-gpu",
    }
    assert "b = dynamic_batching / enable_batching" in legend and "nk = new_knob" in legend
