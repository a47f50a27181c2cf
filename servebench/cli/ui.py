"""`servebench ui`: live load tests in Locust's web UI, on servebench's user classes.

Imports nothing of Locust: the launcher runs it as a subprocess (see
`servebench.locust.launch` for why).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servebench.cli.command import with_options
from servebench.cli.usage import fail, say
from servebench.cli.values import (
    Address,
    InputFile,
    Number,
    OutputDir,
    Port,
    ScenarioFile,
    Timespan,
    Url,
)
from servebench.clients.registry import model_protocols
from servebench.common.limits import MAX_BATCH, MAX_CONCURRENCY

if TYPE_CHECKING:
    from servebench.cli.ui_launcher import UiSetup

# Unknown options after the known ones go to Locust (`servebench ui s.yaml -- --processes 2`).
CONTEXT_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}
# Each Locust user is one connection with requests in flight, as a closed-loop level is.
USERS = Number(int, ge=1, le=MAX_CONCURRENCY, limit="max_concurrency")


@dataclass(frozen=True)
class UiOptions:
    """`servebench ui`'s arguments and options, as parsed (`cli.command`); the unknown
    options after them, for Locust, are in `ctx.args`."""

    ctx: typer.Context
    scenario: Annotated[
        Path | None,
        typer.Argument(
            help="scenario file: its first server (started as a run starts it; a remote "
            "one is only addressed), model, batch size, link and input data preconfigure "
            "the users",
            parser=ScenarioFile(),
        ),
    ] = None
    host: Annotated[
        str | None,
        typer.Option(help="server's HTTP/REST base URL (instead of the scenario's)", parser=Url()),
    ] = None
    grpc_host: Annotated[
        str | None, typer.Option(help="server's gRPC host:port", parser=Address())
    ] = None
    model: Annotated[str | None, typer.Option(help="served model name")] = None
    model_version: Annotated[str | None, typer.Option(help="model version")] = None
    protocol: Annotated[str | None, typer.Option(help=f"one of {', '.join(model_protocols())}")] = (
        None
    )
    batch_size: Annotated[
        int | None,
        typer.Option(help="samples per request", parser=Number(int, ge=1, le=MAX_BATCH)),
    ] = None
    link: Annotated[
        str | None, typer.Option(help="emulated link: a built-in profile or a YAML file")
    ] = None
    input_data: Annotated[
        Path | None,
        typer.Option(
            help="send the samples of this file (.npz, or perf_analyzer's JSON) in order "
            "instead of random data (default: the scenario's workload.inputs); expected "
            "outputs in it are checked (wrong_answer)",
            parser=InputFile(text=False),
        ),
    ] = None
    server: Annotated[
        str | None, typer.Option(help="which of the scenario's servers (default: the first)")
    ] = None
    port: Annotated[
        int | None,
        typer.Option(help="web UI port on 127.0.0.1 (default: a free one)", parser=Port()),
    ] = None
    headless: Annotated[bool, typer.Option(help="run without the web UI")] = False
    users: Annotated[int, typer.Option("--users", "-u", help="Locust users", parser=USERS)] = 4
    spawn_rate: Annotated[
        float | None,
        typer.Option(
            "--spawn-rate",
            "-r",
            help="users started per second",
            parser=Number(float, gt=0, le=MAX_CONCURRENCY),
        ),
    ] = None
    run_time: Annotated[
        str | None,
        typer.Option(
            "--run-time", "-t", help="stop after, e.g. 30s, 2m (headless)", parser=Timespan()
        ),
    ] = None
    results: Annotated[
        Path | None,
        typer.Option(help="results folder (default: the scenario's output)", parser=OutputDir()),
    ] = None

    def setup(self, workdir: Path) -> UiSetup:
        """What to start: the scenario's first trial (or none), with what the command line
        gives over it (`ui_launcher.resolve` checks the result)."""
        from servebench.cli.ui_launcher import UiSetup, resolve, setup_from_scenario
        from servebench.locust.launch import Target

        scenario = self.scenario
        setup = setup_from_scenario(scenario, self.server, workdir) if scenario else None
        overrides = {
            "host": self.host,
            "grpc_host": self.grpc_host,
            "model": self.model,
            "version": self.model_version,
            "protocol": self.protocol,
            "batch_size": self.batch_size,
            "link": self.link,
            "input_data": str(self.input_data) if self.input_data is not None else None,
        }
        setup = resolve(setup or UiSetup(Target()), overrides)
        return replace(setup, results_dir=self.results) if self.results is not None else setup


@with_options(UiOptions)
def ui(options: UiOptions) -> None:
    """Start Locust's web UI (or a headless run) preconfigured for a model; print its URL.

    When Locust ends, its requests are in servebench's result format, for `servebench report`.
    """
    if options.headless and not options.run_time:
        raise fail("--headless needs --run-time (e.g. -t 30s)")
    with tempfile.TemporaryDirectory(prefix="servebench-ui-") as tmp:
        code, run_path = _launch(options, Path(tmp))
    if (run_path / "run.json").is_file():
        typer.echo(f"results: {run_path}  (servebench report {run_path})")
    raise typer.Exit(code=code)


def _launch(o: UiOptions, workdir: Path) -> tuple[int, Path]:
    """Run Locust for the options (`ui_launcher.launch`): its exit code and run folder; a
    scenario's problems, or an input that cannot start, end the command with exit 2."""
    from servebench.cli.ui_launcher import launch
    from servebench.locust.launch import LaunchError, plan_session
    from servebench.scenario.validate import ScenarioError
    from servebench.servers.base import ServerError

    try:
        setup = o.setup(workdir)
        session = plan_session(
            setup.results_dir,
            setup.run_prefix,
            port=o.port,
            headless=o.headless,
            users=o.users,
            spawn_rate=o.spawn_rate,
            run_time=o.run_time,
            extra=list(o.ctx.args),
        )
        return launch(setup, session, workdir, say=typer.echo)
    except ScenarioError as err:
        for problem in err.problems:
            say(problem)
        raise typer.Exit(code=2) from None
    except (LaunchError, ServerError) as err:
        raise fail(str(err)) from None
