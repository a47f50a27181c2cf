"""The per-trial summary table: printed in the terminal at the end of every run, and the
first table of the HTML report (both from `summary_table`, so they never disagree)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servebench.analysis.labels import missing, money, ms, number, trial_label
from servebench.analysis.loader import REPORT_FILE, RunData, load_run

# (header, column, formatter); optional columns appear only when some trial has a value.
_ALWAYS = (
    ("req/s", "throughput_rps", lambda v: number(v, 1)),
    ("inf/s", "throughput_ips", lambda v: number(v, 1)),
    ("p50 ms", "latency_p50", ms),
    ("p99 ms", "latency_p99", ms),
    ("errors", "errors", lambda v: number(v, 0)),
)
_OPTIONAL = (
    ("max rate/s", "max_rate", lambda v: number(v, 1)),
    ("SLO", "slo_met", lambda v: "–" if missing(v) else ("met" if v else "missed")),
    # Telemetry's units: server CPU in cores (CPU-seconds per second), GPU busy 0-1.
    ("server cpu cores", "server_cpu_mean", lambda v: number(v, 2)),
    ("gpu %", "gpu_util_mean", lambda v: "–" if missing(v) else number(100 * v, 0)),
    ("$/M inf", "cost_per_million", money),
)


def summary_table(trials: pd.DataFrame) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, formatted rows, and each row's state ("ok", "invalid" or "failed")."""
    columns = list(_ALWAYS) + [
        c for c in _OPTIONAL if trials[c[1]].map(lambda v: not missing(v)).any()
    ]
    headers = ["#", "trial", "status", *(h for h, _, _ in columns)]
    rows, states = [], []
    for i, row in enumerate(trials.to_dict("records"), start=1):
        status = row.get("status") or "ok"
        verdict = row.get("verdict")
        if status != "ok":
            state = "failed"
            text = f"{status}: {row.get('reason') or 'no reason recorded'}"
        elif verdict == "INVALID":
            state = "invalid"
            text = f"INVALID: {row.get('verdict_reasons') or ''}".rstrip(": ")
        else:
            state = "ok"
            text = "ok" if missing(verdict) else str(verdict)
        cells = [fmt(row.get(col)) for _, col, fmt in columns]
        rows.append([str(i), trial_label(row), text, *cells])
        states.append(state)
    return headers, rows, states


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


def print_summary(run_dir: str | Path, console: Console) -> RunData:
    """Print the run's trial table, its status and where the report is; returns the data."""
    data = load_run(run_dir, records=False)
    table = Table(title=f"run {data.run_id}", title_justify="left", show_lines=False)
    headers, rows, states = summary_table(data.trials)
    for header in headers:
        numeric = header not in ("trial", "status")
        table.add_column(header, justify="right" if numeric else "left", overflow="fold")
    for row, state in zip(rows, states, strict=True):
        table.add_row(*(escape(c) for c in row), style=_STYLE[state])
    console.print(table)
    status = data.status
    planned = data.run.get("trials_planned")
    plan = f" ({planned} planned)" if planned else ""
    line = f"{status}: {run_counts(data.trials)}{plan}"
    if data.run.get("reason"):
        line += f" — {data.run['reason']}"
    style = "green" if status == "complete" else "bold red"
    console.print(f"[{style}]{escape(line)}[/{style}]")
    report = data.path / REPORT_FILE
    if report.is_file():
        console.print(f"report: {escape(str(report))}", highlight=False)
    return data
