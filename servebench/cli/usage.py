"""How every `servebench` command says no: one line on stderr, `error: ...`, exit 2.

Two sources of refusals, one way of saying them:
- the command line itself (a value a parameter's type refused, a missing option, an
  unknown one): click raises a usage error, which typer would print as a usage block and a
  framed panel; `OneLineErrors`, the root command's class, prints it as one line naming
  the option instead;
- a command that finds its input unusable (a run directory, a scenario, a server that is
  not there) returns `fail(message)`.

A script reads exit 2 as "fix the input"; a person reads the line.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer._click.exceptions import (  # typer's own copy of click: what its commands raise
    BadParameter,
    ClickException,
    MissingParameter,
    NoArgsIsHelpError,
)
from typer.core import TyperGroup

from servebench.cli.values import BadValue

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print `error: message` (one line, stderr) and return the Exit to raise."""
    say(message)
    return typer.Exit(code=code)


def cannot_write(err: OSError, path: object) -> typer.Exit:
    """`fail` for a write the system refused (a full disk, a read-only folder), exit 1:
    the file it names, else `path`, and its reason."""
    return fail(f"cannot write {err.filename or path}: {err.strerror or err}", code=1)


def say(message: str) -> None:
    """One `error:` line on stderr, for a command that goes on after it (or exits itself)."""
    typer.echo(typer.style("error:", fg="red") + " " + " ".join(message.split()), err=True)


def describe(err: ClickException) -> str:
    """A usage error in one line: the option (or the value given to an argument), then why."""
    param = getattr(err, "param", None)
    name = _name(param) if param is not None else None
    if isinstance(err, BadValue):
        return f"{name} {err.value}: {err.reason}" if _is_option(param) else err.message
    if isinstance(err, MissingParameter) and name:
        return f"{name}: required{_help_hint(err)}"
    if isinstance(err, BadParameter) and name:
        return f"{name}: {err.message.removeprefix('Value error, ')}"
    return err.format_message() + _help_hint(err)


def _name(param: Any) -> str:
    if _is_option(param):
        longs = [o for o in param.opts if o.startswith("--")]
        return (longs or param.opts)[0]
    return (param.metavar or param.name or "argument").upper()


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def _help_hint(err: ClickException) -> str:
    ctx = getattr(err, "ctx", None)
    return f" (see {ctx.command_path} --help)" if ctx is not None else ""


class OneLineErrors(TyperGroup):
    """The root command: usage errors of every sub-command become one `error:` line."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except NoArgsIsHelpError as err:  # the help was printed as it was made
            sys.exit(err.exit_code)
        except ClickException as err:
            say(describe(err))
            sys.exit(err.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        # Not standalone, typer returns what a typer.Exit carried (commands return None).
        sys.exit(code if isinstance(code, int) else 0)
