"""The `servebench` command: one typer app, one sub-app per command group.

Each group lives in its own module and imports its heavy libraries inside the commands,
so `servebench --help` stays fast. Every parameter's value is checked where it is parsed
(`servebench.cli.values`), and every refusal is one `error:` line, exit 2
(`servebench.cli.usage`).
"""

from __future__ import annotations

import typer

from servebench.cli import (
    cluster,
    export,
    load,
    models,
    netem,
    overhead,
    recommend,
    report,
    scenario,
    ui,
)
from servebench.cli.usage import OneLineErrors

app = typer.Typer(
    cls=OneLineErrors,
    name="servebench",
    help="Find the model-serving setup that meets your latency goal at the lowest cost.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(cluster.app, name="cluster")
app.add_typer(models.app, name="models")
app.add_typer(netem.app, name="netem")
app.add_typer(overhead.app, name="overhead")
app.add_typer(scenario.app, name="scenario")
app.add_typer(report.app, name="report")
app.command(name="export")(export.export)
app.command(name="load")(load.load)
app.command(name="recommend")(recommend.recommend)
app.command(name="ui", context_settings=ui.CONTEXT_SETTINGS)(ui.ui)


def main() -> None:
    app()
