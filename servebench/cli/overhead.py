"""`servebench overhead run`: the same probes on the host and in a container, compared."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servebench.cli.scenario import end_run
from servebench.cli.usage import fail
from servebench.cli.values import Number, OutputDir
from servebench.overhead.probes import PROBES

app = typer.Typer(
    help="Container vs host: CPU, disk I/O, GPU, training and serving, measured side by side.",
    no_args_is_help=True,
)
console = Console(width=None if sys.stdout.isatty() else 160)

# The registry imports no probe; the runner (numpy, pandas) is imported only to run.
PROBE_NAMES = ", ".join([*PROBES, "serving"])


@app.command()
def run(
    probes: Annotated[
        str | None,
        typer.Option(help=f"comma-separated probes (default: all of {PROBE_NAMES})"),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            help="repetitions per side, interleaved host/container",
            parser=Number(int, ge=1, le=1000),
        ),
    ] = 5,
    quick: Annotated[
        bool, typer.Option("--quick", help="small problem sizes: a smoke test, not a measurement")
    ] = False,
    host_only: Annotated[bool, typer.Option("--host-only", help="run the host side only")] = False,
    out: Annotated[Path, typer.Option("--out", help="results root", parser=OutputDir())] = Path(
        "results"
    ),
    report: Annotated[bool, typer.Option(help="write report.html at the end")] = True,
) -> None:
    """Run each probe on the host and in a container of the servebench image, interleaved
    (host, container, host, …); results go to OUT/overhead-<time>/ (overhead.csv,
    overhead_raw.csv, run.json).

    Exit status: 0 complete, 1 some probe runs failed, 2 bad input, 3 nothing measured or
    the run stopped on an error, 130 interrupted."""
    from servebench.analysis.report import write_report
    from servebench.overhead.runner import ALL_PROBES, OverheadRunner, OverheadSettings, Step
    from servebench.results import ResultDirError

    names = tuple(p.strip() for p in probes.split(",") if p.strip()) if probes else ALL_PROBES
    try:
        settings = OverheadSettings(
            probes=names, repeats=repeats, quick=quick, host_only=host_only, output=out
        )
    except ValueError as err:
        raise fail(str(err)) from None

    def on_step(step: Step, outcome: int | str) -> None:
        what = f"{outcome} figures" if isinstance(outcome, int) else outcome
        style = "" if isinstance(outcome, int) else "yellow"
        line = f"{step.probe:<9} rep {step.rep}/{repeats}  {step.side:<9}  {what}"
        console.print(escape(line), style=style, highlight=False, soft_wrap=True)

    try:
        outcome = OverheadRunner(settings, on_step=on_step).run()
    except ResultDirError as err:
        raise fail(str(err)) from None
    print_overhead(outcome.directory.path)
    if report:
        written = write_report(outcome.directory.path)
        console.print(f"report: {escape(str(written.path))}", highlight=False)
    end_run(console, outcome.status, outcome.reason, outcome.directory.path)


def print_overhead(run_dir: Path) -> None:
    """The overhead table of a run (the report's columns), and what was not measured."""
    from servebench.analysis.loader import read_run_json
    from servebench.analysis.overhead import (
        SEED_NOTE,
        TEXT_COLUMNS,
        overhead_headers,
        overhead_notes,
        overhead_rows,
        read_overhead,
    )
    from servebench.results import RUN_FILE

    frame = read_overhead(run_dir)
    if frame is not None and not frame.empty:
        table = Table(title="container vs host (overhead > 0: container worse)")
        for i, header in enumerate(overhead_headers(frame)):
            text = i in TEXT_COLUMNS
            table.add_column(header, justify="left" if text else "right", overflow="fold")
        for row in overhead_rows(frame):
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
        console.print(f"[dim]{escape(SEED_NOTE)}[/dim]", highlight=False)
    for note in overhead_notes(read_run_json(run_dir / RUN_FILE)):
        console.print(f"[yellow]{escape(note)}[/yellow]", highlight=False, soft_wrap=True)
