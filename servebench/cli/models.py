"""`servebench models`: generate, list, export, check and serve model families."""

from __future__ import annotations

import typer

app = typer.Typer(help="Generate, list, export, check and serve model families.", no_args_is_help=True)
