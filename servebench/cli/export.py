"""`servebench export`: a run's trials as perf_analyzer's CSV files, as LoadGen's summary
(Server scenario, one file per open-loop trial), or as a plain table (CSV, Parquet, JSON)
with each column's unit (servebench.analysis.export).

Exit status: 0 written, 1 a file could not be written, 2 bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape

from servebench.cli.usage import cannot_write, fail
from servebench.cli.values import OutputPath, RunDir

console = Console(width=None if sys.stdout.isatty() else 160)

Format = Literal["perf_analyzer", "loadgen", "csv", "parquet", "json"]
# Formats written as several files in a folder, never into one file.
FOLDER_FORMATS = ("perf_analyzer", "loadgen")


def export(
    run_dir: Annotated[
        Path, typer.Argument(help="a run directory, results/<run-id>", parser=RunDir())
    ],
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            help="perf_analyzer: its CSV, one file per configuration; loadgen: LoadGen's "
            "summary (Server scenario) per open-loop trial, not an MLPerf result; csv, "
            "parquet, json: the trial table with units",
        ),
    ] = "perf_analyzer",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="a folder (default RUN_DIR/export); csv, parquet and json also take a file",
            parser=OutputPath(),
        ),
    ] = None,
) -> None:
    """Write RUN_DIR's trials in a form other tools read."""
    from servebench.analysis.export import export as write
    from servebench.analysis.loader import ResultDirError, load_run

    try:
        # perf_analyzer's: an SLO search's records date its chosen step's server times.
        data = load_run(run_dir, records=fmt in ("loadgen", "perf_analyzer"), trials=True)
    except ResultDirError as err:
        raise fail(str(err)) from None
    out = output if output is not None else data.path / "export"
    if out.exists() and not out.is_dir() and fmt in FOLDER_FORMATS:
        raise fail(f"--output {out}: {fmt} files go in a folder; {out} is a file")
    try:
        result = write(data, fmt, out)
    except ValueError as err:
        raise fail(str(err)) from None
    except OSError as err:
        raise cannot_write(err, out) from None
    for path in result.paths:
        console.print(f"wrote {escape(str(path))}", highlight=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False, soft_wrap=True)
