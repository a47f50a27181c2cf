"""`servebench scenario`: validate, plan and run scenario files."""

from __future__ import annotations

import sys
from collections.abc import Sized
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servebench.cli.usage import fail, say
from servebench.cli.values import Number, OutputDir, RunDir, ScenarioFile

app = typer.Typer(help="Validate, plan and run scenario files.", no_args_is_help=True)
console = Console(width=None if sys.stdout.isatty() else 160)


def _load(path: Path):
    from servebench.scenario.validate import ScenarioError, load_scenario

    try:
        scenario = load_scenario(path)
    except ScenarioError as err:
        for problem in err.problems:
            say(problem)
        raise typer.Exit(code=2) from None
    for note in scenario.notes:  # valid, but written with an old field name
        console.print(f"[yellow]warning:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    return scenario


def _plan(path: Path):
    from model_zoo.spec import SpecError
    from servebench.scenario.plan import expand

    scenario = _load(path)
    try:
        return expand(scenario, path.parent)
    except (SpecError, FileNotFoundError) as err:
        raise fail(f"{path}: models: {err}") from None


# `scenario run`'s exit status by run status (docs/scenarios.md, "Exit status"): CI jobs
# tell a run with some failed trials (1) from one that measured nothing or stopped on an
# error (3); 2 is bad input, as for every command.
RUN_EXIT_CODES = {"complete": 0, "partial": 1, "failed": 3, "interrupted": 130}


def end_run(console: Console, status: str, reason: str | None, path: Path) -> None:
    """The last line of every run command (scenario, overhead): how it ended, where its
    results are, and the exit code a script can test."""
    code = RUN_EXIT_CODES.get(status, RUN_EXIT_CODES["failed"])
    console.print(
        escape(
            f"run {status}"
            + (f": {reason}" if reason else "")
            + f" — results in {path}"
            + (f" (exit {code})" if code else "")
        ),
        highlight=False,
        soft_wrap=True,
    )
    if code:
        raise typer.Exit(code=code)


def _warn(path: Path, plan) -> None:
    """Say what makes a valid plan unusually big, so a slip is seen before a long run."""
    for warning in plan.warnings():
        console.print(f"[yellow]warning:[/yellow] {escape(f'{path}: {warning}')}", highlight=False)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="scenario files", parser=ScenarioFile())],
) -> None:
    """Check scenario files; every problem is reported with file, line and field."""
    failed = 0
    for path in files:
        try:
            plan = _plan(path)
        except typer.Exit:
            failed += 1
            continue
        console.print(
            escape(
                f"{path}: valid — {_count(plan.trials, 'trial')}, "
                f"{_count(plan.models, 'model')}, {_count(plan.settings, 'server setting')}"
            ),
            highlight=False,
        )
        _warn(path, plan)
    if failed:
        raise typer.Exit(code=2)


def _count(items: Sized, noun: str) -> str:
    """`1 model`, `4 models`: what validate and plan print about a plan's size."""
    return f"{len(items):,} {noun}{'' if len(items) == 1 else 's'}"


@app.command()
def plan(
    file: Annotated[Path, typer.Argument(help="scenario file", parser=ScenarioFile())],
    limit: Annotated[
        int,
        typer.Option(help="trials to list (0: all)", parser=Number(int, ge=0, le=1_000_000)),
    ] = 50,
) -> None:
    """Print the trials a run would do, their count and the estimated wall time."""
    result = _plan(file)
    table = Table("#", "trial", "setting", "model", "link", "batch", "load", "est. s")
    shown = result.trials if limit <= 0 else result.trials[:limit]
    for trial in shown:
        table.add_row(
            str(trial.index), trial.id, escape(trial.setting.id), trial.model.id, trial.link.name,
            str(trial.batch_size), trial.level.label, f"{trial.estimated_s:.0f}",
        )  # fmt: skip
    console.print(table)
    if len(shown) < len(result.trials):
        console.print(f"… {len(result.trials) - len(shown)} more (use --limit 0 to list all)")
    repeats = result.scenario.workload.repeats
    replicated = (
        f", each measured {repeats} times in {repeats} interleaved rounds "
        f"({len(result.trials) * repeats:,} trials in all)"
        if repeats > 1
        else ""
    )
    console.print(
        f"{_count(result.trials, 'trial')} over {_count(result.settings, 'server setting')} "
        f"and {_count(result.models, 'model')}{replicated}; "
        f"estimated wall time {_duration(result.estimated_s)}"
        + (
            " (workload.stop: each trial until its SLO is decided, at most duration_s)"
            if result.scenario.workload.stop is not None
            else ""
        ),
        highlight=False,
    )
    _warn(file, result)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="scenario file", parser=ScenarioFile())],
    output: Annotated[
        Path | None,
        typer.Option(help="results root (default: the scenario's)", parser=OutputDir()),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="an earlier run directory: run only its missing trials", parser=RunDir()),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(help="resume even a run of a different scenario (noted in run.json)"),
    ] = False,
    report: Annotated[bool, typer.Option(help="write report.html at the end")] = True,
) -> None:
    """Run every trial of a scenario; results go to results/<run-id>/.

    Exit status: 0 every trial ok, 1 some trials failed, 2 bad input (scenario, --output,
    --resume), 3 the run failed (every trial failed, or it stopped on an error), 130
    interrupted."""
    from servebench.results import ResultDirError
    from servebench.scenario.runner import ScenarioRunner

    _load(file)  # validation errors print the same way as `validate`
    runner = ScenarioRunner(file, output=output, resume=resume, force=force, console=console)
    try:
        outcome = runner.run()
    except ResultDirError as err:
        raise fail(str(err)) from None
    path = outcome.directory.path
    try:
        _summary_and_report(path, report, paused=outcome.paused)
    except (ResultDirError, OSError) as err:  # what was measured stays; say why, go on
        console.print(f"[red]summary or report not written:[/red] {escape(str(err))}")
    if outcome.status == "interrupted" and not outcome.paused:
        # A pause is a cluster's: its leader resumes the run on its next attempt.
        console.print(
            escape(f"resume it: servebench scenario run {file} --resume {path}"),
            highlight=False,
            soft_wrap=True,
        )
    end_run(console, outcome.status, outcome.reason, path)  # always the last line


def _summary_and_report(path: Path, report: bool, *, paused: bool) -> None:
    """The trial table, then report.html (not for a pause: a cluster's preemption, whose
    resumed run writes it; writing one now — seconds of plotting — would only lengthen
    every pause)."""
    from servebench.analysis.report import write_report
    from servebench.analysis.summary import print_summary

    print_summary(path, console)
    if report and paused:
        console.print("report: not written (paused; the resumed run writes it)", highlight=False)
    elif report:
        written = write_report(path)
        console.print(f"report: {escape(str(written.path))}", highlight=False)
        for problem in written.errors:
            console.print(f"[red]report plot failed:[/red] {escape(problem)}", highlight=False)
