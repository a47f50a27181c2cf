"""The per-trial summary table: printed in the terminal at the end of every run, and the
first table of the HTML report (both from `summary_table`, so they never disagree)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servebench.analysis.labels import load_text, money, number, short_settings, trial_label
from servebench.analysis.loader import RunData, load_run
from servebench.common.readable import missing, ms, ms_interval

# (header, terminal header, column, formatter of (row, column)); optional columns appear
# only when some trial has a value. The terminal's headers are short because a column is
# as wide as its header and a number must never wrap.
Formatter = Callable[[Mapping[str, Any], str], str]


def _value(show: Callable[[Any], str]) -> Formatter:
    """A formatter of the column's own value."""
    return lambda row, column: show(row.get(column))


def _with_interval(row: Mapping[str, Any], column: str) -> str:
    """A latency with its confidence interval, `42.9 (41.8–44.6)` (columns `<column>_low`
    and `_high`; older runs, without them, show the value alone); a setting's row, over
    its replicates, adds how many and how much they vary: `42.9 (41.8–44.6, R=5, cv 3 %)`."""
    shown = ms_interval(row.get(column), row.get(f"{column}_low"), row.get(f"{column}_high"))
    replicates = row.get("replicates")
    if missing(replicates) or not replicates or "replicates_planned" not in row:
        return shown
    cv = row.get(f"{column}_cv")
    spread = f"R={int(replicates)}" + ("" if missing(cv) else f", cv {100 * cv:.0f} %")
    return f"{shown[:-1]}, {spread})" if shown.endswith(")") else f"{shown} ({spread})"


_ALWAYS: tuple[tuple[str, str, str, Formatter], ...] = (
    ("req/s", "req/s", "throughput_rps", _value(lambda v: number(v, 1))),
    ("inf/s", "inf/s", "throughput_ips", _value(lambda v: number(v, 1))),
    ("p50 ms", "p50 ms", "latency_p50", _value(ms)),
    ("p99 ms", "p99 ms", "latency_p99", _with_interval),
    ("errors", "errors", "errors", _value(lambda v: number(v, 0))),
)
_OPTIONAL: tuple[tuple[str, str, str, Formatter], ...] = (
    ("max rate/s", "max/s", "max_rate", _value(lambda v: number(v, 1))),
    ("SLO", "SLO", "slo_met", _value(lambda v: "–" if missing(v) else str(v))),
    # Telemetry's units: server CPU in cores (CPU-seconds per second), GPU busy 0-1.
    ("server cpu cores", "cpu", "server_cpu_mean", _value(lambda v: number(v, 2))),
    (
        "gpu %",
        "gpu %",
        "gpu_util_mean",
        _value(lambda v: "–" if missing(v) else number(100 * v, 0)),
    ),
    ("$/M inf", "$/M inf", "cost_per_million", _value(money)),
)
# What the terminal's abbreviated headers mean, printed once under the table.
_TERMINAL_NOTES = {
    "max/s": "max/s = highest rate meeting the SLO",
    "cpu": "cpu = server CPU cores busy",
    "$/M inf": "$/M inf = USD per million inferences at the trial's inf/s",
}


def _metrics(trials: pd.DataFrame) -> list[tuple[str, str, str, Formatter]]:
    return list(_ALWAYS) + [
        c
        for c in _OPTIONAL
        if c[2] in trials.columns and trials[c[2]].map(lambda v: not missing(v)).any()
    ]


def _state(row: dict[str, Any]) -> tuple[str, str, str]:
    """(state, status word, why): state is "ok", "invalid" or "failed". A setting's row
    (settings.csv) is failed when no replicate counted, and names what to read with care."""
    status = row.get("status") or "ok"
    if "replicates_planned" in row:
        if status == "failed":
            failed, planned = row.get("replicates_failed"), row.get("replicates_planned")
            return (
                "failed",
                "failed",
                f"no replicate counted: {failed:g} of {planned:g} "
                "failed or INVALID (trials.csv says why)",
            )
        codes = "" if missing(row.get("warning_codes")) else str(row["warning_codes"])
        return "ok", str(status), codes.replace(";", ", ")
    verdict = row.get("verdict")
    if status != "ok":
        return "failed", str(status), str(row.get("reason") or "no reason recorded")
    if verdict == "INVALID":
        return "invalid", "INVALID", str(row.get("verdict_reasons") or "")
    return "ok", "ok" if missing(verdict) else str(verdict), ""


def summary_table(trials: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, formatted rows, and each row's state ("ok", "invalid" or "failed")."""
    columns = _metrics(trials)
    headers = ["#", "trial", "status", *(h for h, _, _, _ in columns)]
    rows, states = [], []
    for i, row in enumerate(trials.to_dict("records"), start=1):
        state, word, why = _state(row)
        text = f"{word}: {why}" if why else word
        cells = [fmt(row, col) for _, _, col, fmt in columns]
        rows.append([str(i), trial_label(row), text, *cells])
        states.append(state)
    return headers, rows, states


@dataclass(eq=False)  # identity: two columns may hold equal cells
class _Column:
    """One column of the terminal table: cells as text, and how it may shrink."""

    header: str
    cells: list[str]
    numeric: bool  # right-aligned
    keep: int  # lower is kept longer when the terminal is too narrow for every column
    floor: int | None = None  # a name may be cut to this width (with "…"); None: never

    @property
    def natural(self) -> int:
        return max([len(self.header), *(len(c) for c in self.cells)])

    @property
    def least(self) -> int:
        return self.natural if self.floor is None else min(self.natural, self.floor)


_GAP = 2  # columns are two spaces apart (box SIMPLE_HEAD, padding collapsed)
_ESSENTIAL = 8  # `keep` of the last column never dropped for a name's room (inf/s)
_HASH_SUFFIX = re.compile(r"-[0-9a-f]{6}$")


@dataclass
class TerminalSummary:
    """The trial table fitted to a width, and the lines that go with it."""

    table: Table
    shared: str  # coordinates every trial has in common, said once above the table
    legend: list[str]  # what short labels and headers mean
    notes: list[str]  # why each failed or invalid trial is so, numbered in the table
    left_out: list[str]  # columns that did not fit


def terminal_summary(trials: pd.DataFrame, width: int) -> TerminalSummary:
    """The summary as a rich table no wider than `width`, one line per trial.

    Coordinates every trial shares move above the table, settings get short labels
    (legend below), reasons become numbered notes, and columns are dropped from the
    least needed (`keep`) until the rest fit at full width: a number is never wrapped or
    cut; only names (setting, model, link) may end in "…".
    """
    rows = trials.to_dict("records")
    names = _setting_names(rows)
    labels, legend = short_settings(names)
    coordinates = [
        _Column(
            "setting",
            [labels[name] for name in names],
            False,
            1,
            8,
        ),
        _Column("model", [_text(r.get("model")) for r in rows], False, 2, 10),
        _Column("batch", [_batch(r.get("batch_size")) for r in rows], False, 3),
        _Column("link", [_text(r.get("link")) for r in rows], False, 4, 6),
        _Column("load", [load_text(r, compact=True) or "–" for r in rows], False, 5),
    ]
    shared = [
        f"{c.header} {c.cells[0]}"
        for c in coordinates
        if rows and len(set(c.cells)) == 1 and c.cells[0] not in ("", "–")
    ]
    if any(s.startswith("setting ") for s in shared):
        legend = []  # one setting: its label is the server's name, nothing to explain
    coordinates = [c for c in coordinates if len(set(c.cells)) > 1]
    for column in coordinates:
        if column.header == "model":
            column.cells = _short_models(column.cells)

    notes: list[str] = []
    status_cells, states = [], []
    for row in rows:
        state, word, why = _state(row)
        if why:
            note = f"{word}: {why}"
            if note not in notes:
                notes.append(note)
            word = f"{word} [{notes.index(note) + 1}]"
        status_cells.append(word)
        states.append(state)

    metrics = _metrics(trials)
    keep = {"p99 ms": 7, "inf/s": 8, "errors": 9, "max/s": 10, "SLO": 11, "p50 ms": 12}
    columns = [
        _Column("#", [str(i) for i in range(1, len(rows) + 1)], True, 0),
        *coordinates,
        _Column("status", status_cells, False, 6),
        *(
            _Column(short, [fmt(r, col) for r in rows], True, keep.get(short, 13 + n))
            for n, (_, short, col, fmt) in enumerate(metrics)
        ),
    ]
    chosen = _fit(columns, width)
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for column, size in chosen.items():
        table.add_column(
            column.header,
            justify="right" if column.numeric else "left",
            width=size,
            no_wrap=True,
            overflow="ellipsis",
        )
    for i, state in enumerate(states):
        table.add_row(*(escape(c.cells[i]) for c in chosen), style=_STYLE[state])
    shown = {c.header for c in chosen}
    legend += [text for header, text in _TERMINAL_NOTES.items() if header in shown]
    clients = [r["load_level"] for r in rows if r.get("load_kind") == "concurrency"]
    if clients and not missing(clients[0]):
        legend.append(f"c{clients[0]:g} = {clients[0]:g} closed-loop clients")
    return TerminalSummary(
        table=table,
        shared=" · ".join(shared),
        legend=legend,
        notes=[f"[{n}] {note}" for n, note in enumerate(notes, start=1)],
        left_out=[c.header for c in columns if c not in chosen],
    )


def _setting_names(rows: list[dict[str, Any]]) -> list[str]:
    """Each trial's setting as the table labels it (the server's name where it has none)."""
    return [str(r.get("setting") or r.get("server") or "") for r in rows]


def _fit(columns: list[_Column], width: int) -> dict[_Column, int]:
    """Columns that fit in `width`, in display order, with their widths.

    Columns are taken by `keep` at their least width while they fit; the room left goes
    to cut names. A name cut short weighs more than an extra figure, so while one is,
    the least needed figure past p99 and inf/s gives its room back.
    """
    picked: list[_Column] = []
    for column in sorted(columns, key=lambda c: c.keep):
        trial = [*picked, column]
        if sum(c.least for c in trial) + _GAP * (len(trial) - 1) <= width:
            picked.append(column)
    while True:
        sizes = {c: c.least for c in picked}
        room = width - sum(sizes.values()) - _GAP * (len(picked) - 1)
        for column in sorted(picked, key=lambda c: c.keep):
            extra = min(room, column.natural - sizes[column])
            sizes[column] += extra
            room -= extra
        optional = [c for c in picked if c.keep > _ESSENTIAL]
        if not optional or all(sizes[c] == c.natural for c in picked):
            return {c: sizes[c] for c in columns if c in sizes}
        picked.remove(max(optional, key=lambda c: c.keep))


def _pack(items: list[str], width: int, indent: str = "") -> list[str]:
    """Items joined by '; ' into lines of at most `width`, never splitting an item; lines
    after the first start with `indent`."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= width:
            lines[-1] += f"; {item}"
        else:
            lines.append(f"{indent}{item}" if lines else item)
    return lines


def _short_models(names: list[str]) -> list[str]:
    """Model ids without their 6-hex content hash (`conv-d2-w32`) where that still tells
    every model apart; the hash only matters between models of one shape."""
    short = {n: _HASH_SUFFIX.sub("", n) for n in set(names)}
    return [short[n] for n in names] if len(set(short.values())) == len(short) else names


def _text(value: Any) -> str:
    return "–" if missing(value) or value == "" else str(value)


def _batch(value: Any) -> str:
    return "–" if missing(value) else f"b{int(value)}"


def run_counts(trials: pd.DataFrame) -> str:
    """'12 ok, 1 invalid, 1 failed of 14' — invalid counts among the ok ones."""
    total = len(trials)
    ok = int((trials["status"] == "ok").sum())
    invalid = int(((trials["status"] == "ok") & (trials["verdict"] == "INVALID")).sum())
    failed = total - ok
    parts = [f"{ok - invalid} ok"]
    if invalid:
        parts.append(f"{invalid} invalid")
    if failed:
        parts.append(f"{failed} failed/skipped")
    return f"{', '.join(parts)} of {total} trials"


_STYLE = {"ok": "", "invalid": "yellow", "failed": "red"}

_COLD_WORDS = {"container_start": "container", "server_ready": "ready", "model_load": "load",
               "first_inference": "first", "warm_median": "warm"}  # fmt: skip


def cold_start_stats(cold: pd.DataFrame) -> pd.DataFrame:
    """Median, min and max of each cold-start phase over its repeats, per setting and model.

    Columns `setting` (the server's name where a row has none), `model` ("" for the
    server's own phase), `phase`, `n`, `median`, `min`, `max`; groups in the order the run
    measured them. The report's figure and the terminal lines both read this, so they
    never disagree.
    """
    data = cold.dropna(subset=["seconds"])
    data = data.assign(
        setting=data["setting"].where(data["setting"].notna(), data["server"]).fillna(""),
        model=data["model"].fillna(""),
    )
    grouped = data.groupby(["setting", "model", "phase"], sort=False)["seconds"]
    return grouped.agg(n="count", median="median", min="min", max="max").reset_index()


def cold_start_lines(
    cold: pd.DataFrame | None, width: int, settings: Sequence[str] = ()
) -> list[str]:
    """The cold start in a few lines, one per setting and model (wrapped between phases,
    never inside one): each phase's median and, over more than one repeat, its min–max.
    The server's own phase (ready) is that setting's, shown with each of its models.
    `settings`: the trial table's, so that a setting has the same short label in both."""
    if cold is None or cold["seconds"].dropna().empty:
        return []
    stats = cold_start_stats(cold)
    labels, _ = short_settings([*settings, *stats["setting"]])
    names = list(dict.fromkeys(stats["model"]))
    short = dict(zip(names, _short_models(names), strict=True))
    repeats = int(stats["n"].max())
    head = "cold start, median" + (f" (min–max) of {repeats} repeats" if repeats > 1 else "")
    lines = [f"{head}:"]
    for setting, of_setting in stats.groupby("setting", sort=False):
        server = of_setting[of_setting["model"] == ""]
        for model, group in of_setting[of_setting["model"] != ""].groupby("model", sort=False):
            items = [_cold_item(r) for r in pd.concat([server, group]).itertuples()]
            items[0] = f"{labels[setting]} · {short[model]}: {items[0]}"
            lines += ["  " + line for line in _pack(items, width - 2, "  ")]
        if len(of_setting) == len(server):  # no model was timed (none was loaded)
            lines.append(f"  {labels[setting]}: " + "; ".join(map(_cold_item, server.itertuples())))
    return lines


def _cold_item(stat: Any) -> str:
    """'load 1.45 s (1.40–1.50 s)': a phase's median and, over repeats, its range."""
    word = _COLD_WORDS.get(stat.phase, stat.phase)
    if stat.n < 2:
        return f"{word} {_seconds(stat.median)}"
    low, high = _seconds(stat.min), _seconds(stat.max)
    if low.split()[1] == high.split()[1]:
        low = low.split()[0]
    return f"{word} {_seconds(stat.median)} ({low}–{high})"


def _seconds(value: float) -> str:
    """Cold-start times span microseconds to minutes: milliseconds below one second."""
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.2f} s"


def print_summary(run_dir: str | Path, console: Console) -> RunData:
    """Print the run's trial table and its status; returns the data (the command that
    writes the report says where it is).

    The table fits the console's width (one line per trial, numbers never wrapped);
    what it abbreviates or leaves out is said once below it.
    """
    data = load_run(run_dir, records=False)
    # A replicated run is read setting by setting: each row its replicates' median.
    shown = data.settings if data.replicated and data.settings is not None else data.trials
    summary = terminal_summary(shown, console.width)
    console.print(f"run {escape(data.run_id)}", highlight=False)
    if summary.shared:
        console.print(f"all trials: {escape(summary.shared)}", highlight=False)
    console.print(summary.table)
    for line in summary.notes:
        console.print(escape(line), highlight=False)
    for line in _pack(summary.legend, console.width):
        console.print(f"[dim]{escape(line)}[/dim]", highlight=False)
    if summary.left_out:
        console.print(
            f"[dim]left out at {console.width} columns: {escape(', '.join(summary.left_out))} "
            "(a wider terminal shows them; report.html has every column)[/dim]",
            highlight=False,
        )
    settings = _setting_names(data.trials.to_dict("records"))
    for line in cold_start_lines(data.cold_start, console.width, settings):
        console.print(escape(line), highlight=False)
    status = data.status
    planned = data.run["trials_planned"]
    plan = f" ({planned} planned)" if planned else ""
    line = f"{status}: {run_counts(data.trials)}{plan}"
    if data.run["reason"]:
        line += f" — {data.run['reason']}"
    style = "green" if status == "complete" else "bold red"
    console.print(f"[{style}]{escape(line)}[/{style}]")
    return data
