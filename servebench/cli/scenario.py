"""`servebench scenario`: validate, plan and run scenario files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(help="Validate, plan and run scenario files.", no_args_is_help=True)
console = Console(width=None if sys.stdout.isatty() else 160)


def _load(path: Path):
    from servebench.scenario.validate import ScenarioError, load_scenario

    try:
        return load_scenario(path)
    except ScenarioError as err:
        for problem in err.problems:
            console.print(f"[red]error:[/red] {problem}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None


def _plan(path: Path):
    from model_zoo.spec import SpecError
    from servebench.scenario.plan import expand

    scenario = _load(path)
    try:
        return expand(scenario, path.parent)
    except (SpecError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {path}: models: {err}", highlight=False)
        raise typer.Exit(code=2) from None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="scenario files")]) -> None:
    """Check scenario files; every problem is reported with file, line and field."""
    failed = 0
    for path in files:
        try:
            plan = _plan(path)
        except typer.Exit:
            failed += 1
            continue
        console.print(
            f"{path}: valid — {len(plan.trials)} trials, {len(plan.models)} models, "
            f"{len(plan.settings)} server settings",
            highlight=False,
        )
    if failed:
        raise typer.Exit(code=2)


@app.command()
def plan(
    file: Annotated[Path, typer.Argument(help="scenario file")],
    limit: Annotated[int, typer.Option(help="trials to list (0: all)")] = 50,
) -> None:
    """Print the trials a run would do, their count and the estimated wall time."""
    result = _plan(file)
    table = Table("#", "trial", "setting", "model", "link", "batch", "load", "est. s")
    shown = result.trials if limit <= 0 else result.trials[:limit]
    for trial in shown:
        table.add_row(
            str(trial.index), trial.id, escape(trial.setting.id), trial.model.id, trial.link_name,
            str(trial.batch_size), trial.level.label, f"{trial.estimated_s:.0f}",
        )  # fmt: skip
    console.print(table)
    if len(shown) < len(result.trials):
        console.print(f"… {len(result.trials) - len(shown)} more (use --limit 0 to list all)")
    console.print(
        f"{len(result.trials)} trials over {len(result.settings)} server settings and "
        f"{len(result.models)} models; estimated wall time {_duration(result.estimated_s)}",
        highlight=False,
    )


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="scenario file")],
    output: Annotated[
        Path | None, typer.Option(help="results root (default: the scenario's)")
    ] = None,
    resume: Annotated[
        Path | None, typer.Option(help="an earlier run directory: run only its missing trials")
    ] = None,
    report: Annotated[bool, typer.Option(help="write report.html at the end")] = True,
) -> None:
    """Run every trial of a scenario; results go to results/<run-id>/."""
    from servebench.analysis.report import write_report
    from servebench.analysis.summary import print_summary
    from servebench.scenario.runner import ScenarioRunner

    _load(file)  # validation errors print the same way as `validate`
    runner = ScenarioRunner(file, output=output, resume=resume, console=console)
    outcome = runner.run()
    print_summary(outcome.directory.path, console)
    if report:
        written = write_report(outcome.directory.path)
        console.print(f"report: {written.path}", highlight=False)
        for problem in written.errors:
            console.print(f"[red]report plot failed:[/red] {problem}", highlight=False)
    console.print(
        f"run {outcome.status}"
        + (f": {outcome.reason}" if outcome.reason else "")
        + f" — results in {outcome.directory.path}",
        highlight=False,
    )
    if outcome.status == "failed":
        raise typer.Exit(code=1)
    if outcome.status == "interrupted":
        raise typer.Exit(code=130)
