"""A command whose options are one dataclass's fields.

A command with dozens of options written as typer parameters is one function as long as
its options; here the options are the fields of a dataclass (each `Annotated` with its
`typer.Option` or `typer.Argument`, as a parameter would be), and the command is a
function of that object: typer reads the fields as the command's parameters, in their
order, and the values it parsed arrive as one instance.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

Options = TypeVar("Options")


def with_options(
    options: type[Options],
) -> Callable[[Callable[[Options], None]], Callable[..., None]]:
    """Make `run(options)` a typer command whose parameters are `options`' fields."""
    hints = typing.get_type_hints(options, include_extras=True)
    parameters = [
        inspect.Parameter(
            field.name,
            # Keyword-only: a subclass's required field may follow its base's defaults.
            inspect.Parameter.KEYWORD_ONLY,
            annotation=hints[field.name],
            default=_default(field),
        )
        for field in dataclasses.fields(options)  # type: ignore[arg-type]
    ]

    def wrap(run: Callable[[Options], None]) -> Callable[..., None]:
        def command(**given: Any) -> None:
            run(options(**given))

        command.__name__, command.__doc__ = run.__name__, run.__doc__
        command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        return command

    return wrap


def _default(field: dataclasses.Field) -> Any:
    """A field's default as typer takes it (a factory's value: a fresh list), or none."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty
