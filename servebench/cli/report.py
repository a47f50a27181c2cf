"""`servebench report`: the HTML report of a run, and run-to-run comparison.

`servebench report RUN_DIR` is the common case, so it needs no sub-command name; the
group routes a first argument that is not a sub-command to `html`.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from servebench.cli.usage import fail
from servebench.cli.values import Number, OutputDir, OutputFile, RunDir

console = Console(width=None if sys.stdout.isatty() else 160)


class _DefaultToHtml(TyperGroup):
    """`report RUN_DIR` means `report html RUN_DIR` (a folder named like a sub-command
    can still be given as `./compare`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["html", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_DefaultToHtml,
    help="Write a run's HTML report (servebench report RUN_DIR), or compare two runs.",
    no_args_is_help=True,
)


@app.command()
def html(
    run_dir: Annotated[
        Path, typer.Argument(help="a run directory, results/<run-id>", parser=RunDir())
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="where to write (default RUN_DIR/report.html)",
            parser=OutputFile(),
        ),
    ] = None,
) -> None:
    """Write RUN_DIR/report.html: one self-contained page, no network needed to open it."""
    from servebench.analysis.loader import ResultDirError
    from servebench.analysis.report import write_report

    try:
        report = write_report(run_dir, output)
    except ResultDirError as err:
        raise fail(str(err)) from None
    except OSError as err:  # no space, no permission: say where, without a traceback
        target = err.filename or output or run_dir
        raise fail(f"cannot write {target}: {err.strerror or err}", code=1) from None
    for ident in report.empty:
        console.print(f"[dim]{ident}: no data for this plot[/dim]", highlight=False)
    for problem in report.errors:
        console.print(f"[red]plot failed:[/red] {escape(problem)}", highlight=False)
    console.print(f"report: {escape(str(report.path))}", highlight=False)
    if report.errors:
        raise typer.Exit(code=1)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="the baseline run directory", parser=RunDir())],
    run_b: Annotated[Path, typer.Argument(help="the run to compare with it", parser=RunDir())],
    floor: Annotated[
        float,
        typer.Option(
            help="smallest relative difference ever flagged (run-to-run drift)",
            parser=Number(float, ge=0, le=10),
        ),
    ] = 0.10,
    all_trials: Annotated[
        bool, typer.Option("--all/--flagged", help="list every trial, or only flagged ones")
    ] = True,
) -> None:
    """Trial-by-trial ratios B/A of throughput, p50 and p99; flags what exceeds the noise."""
    from servebench.analysis.compare import (
        BANDS,
        METRICS,
        REPLICATE_BANDS,
        compare_settings,
        compare_trials,
        scenario_difference,
    )
    from servebench.analysis.loader import ResultDirError, load_run

    try:
        a, b = load_run(run_a, trials=True), load_run(run_b, trials=True)
    except ResultDirError as err:
        raise fail(str(err)) from None
    differs = scenario_difference(a, b)
    if differs:
        console.print(
            f"[yellow]warning:[/yellow] {escape(differs)}", highlight=False, soft_wrap=True
        )
    # Replicated runs compare setting by setting on their replicates; otherwise trial by
    # trial on each trial's requests (a bootstrap and the noise floor).
    replicated = a.replicated and b.replicated
    if replicated:
        result = compare_settings(a, b)
    else:
        result = compare_trials(a.trials, b.trials, a.records, b.records, floor=floor)
    table = Table(title=f"B/A: {b.run_id} vs {a.run_id}", title_justify="left")
    table.add_column("trial")
    table.add_column("what", overflow="fold")
    for metric in METRICS:
        table.add_column(f"{metric.name} B/A", justify="right")
        table.add_column("verdict" if replicated else "noise ±", justify="right", style="dim")
    table.add_column("verdict")
    flagged = 0
    for row in result.to_dict("records"):
        flags = [f"{m.name} {row[f'{m.name}_flag']}" for m in METRICS if row[f"{m.name}_flag"]]
        flagged += bool(flags)
        if not all_trials and not flags:
            continue
        cells = []
        for metric in METRICS:
            cells += [
                _ratio(row[f"{metric.name}_ratio"], row[f"{metric.name}_flag"]),
                row[f"{metric.name}_said"] if replicated else _band(row[f"{metric.name}_band"]),
            ]
        verdict = ", ".join(flags) or (
            row["note"] or ("" if row["presence"] == "both" else row["presence"])
        )
        style = "red" if any("regression" in f for f in flags) else ("green" if flags else "")
        table.add_row(row["trial_id"], escape(row["label"]), *cells, escape(verdict), style=style)
    console.print(table)
    both = int((result["presence"] == "both").sum()) if len(result) else 0
    what = "settings" if replicated else "trials"
    noise = REPLICATE_BANDS if replicated else f"noise: at least {floor:.0%}; {BANDS}"
    console.print(f"{both} {what} in both runs, {flagged} beyond noise ({noise})", highlight=False)


@app.command("host-peak")
def host_peak(
    remeasure: Annotated[
        bool, typer.Option("--remeasure", help="measure again and replace the cached roofs")
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            help="where host_peak.json lives (default $SERVEBENCH_CACHE_DIR or ~/.cache/servebench)",
            parser=OutputDir(),
        ),
    ] = None,
) -> None:
    """The roofline's roofs for this machine (GEMM FLOP/s, copy bytes/s): cached, or measured."""
    from servebench.analysis.labels import si
    from servebench.telemetry.host_peak import cache_path, host_peaks

    with console.status("measuring the host's GEMM and copy peaks …"):
        peaks = host_peaks(remeasure=remeasure, cache_dir=cache_dir)
    spread = ", ".join(f"{v / 1e9:.0f}" for v in peaks.flops_rounds)
    console.print(f"machine          {escape(peaks.machine)}", highlight=False)
    console.print(
        f"GEMM peak        {si(peaks.flops.value, 'FLOP/s')}  (rounds, GFLOP/s: {spread})",
        highlight=False,
    )
    console.print(f"copy bandwidth   {si(peaks.bw.value, 'B/s')}", highlight=False)
    load = "" if peaks.load_average is None else f", load average {peaks.load_average:.1f}"
    origin = "from the cache" if peaks.cached else "just measured"
    console.print(f"measured         {peaks.measured_at}{load} ({origin})", highlight=False)
    console.print(f"cache            {escape(str(cache_path(cache_dir)))}", highlight=False)
    if peaks.load_average is not None and peaks.load_average >= peaks.threads:
        console.print(
            f"[yellow]the host was busy when measured (load {peaks.load_average:.1f} on "
            f"{peaks.threads} threads): the roofs may read low; re-measure when it is quiet "
            "(--remeasure)[/yellow]",
            highlight=False,
        )


def _ratio(value: float, flag: str) -> str:
    if not math.isfinite(value):
        return "–"
    text = f"{value:.2f}x"
    return f"[bold]{text}[/bold]" if flag else text


def _band(value: float) -> str:
    if math.isinf(value):
        return "too few"
    return f"{value:.0%}"
