"""Read a scenario file safely and remember the line of every key and list item.

PyYAML's `safe_load` forgets where values came from; the shared reader in
`servebench.common.textfile` keeps each node's line, so a validation error can say
`quickstart.yaml:14 workload.rates[2]`. That reader also refuses non-UTF-8 text, duplicate
keys, alias bombs and deep nesting with one-line errors (its docstring lists the limits),
and resolves merge keys (`<<: *anchor`) by YAML's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servebench.common.errors import ServebenchError
from servebench.common.textfile import (
    Location,
    TextFileError,
    format_location,
    parse_yaml,
    read_text,
)

__all__ = [
    "Location",
    "ScenarioSource",
    "SourceError",
    "format_location",
    "load_source",
    "parse_source",
]


class SourceError(ServebenchError, ValueError):
    """The file cannot be read as YAML; the message has the file and line."""


@dataclass
class ScenarioSource:
    """The parsed data, where it came from, and the 1-based line of each path in it."""

    path: Path
    data: Any
    lines: dict[Location, int] = field(default_factory=dict)

    def line_of(self, location: Location) -> int | None:
        """The line of `location`, or of its nearest ancestor that has one."""
        for end in range(len(location), -1, -1):
            line = self.lines.get(tuple(location[:end]))
            if line is not None:
                return line
        return None


def load_source(path: Path) -> ScenarioSource:
    path = Path(path)
    try:
        text = read_text(path)
    except TextFileError as err:
        raise SourceError(str(err)) from None
    return parse_source(text, path)


def parse_source(text: str, path: Path) -> ScenarioSource:
    source = ScenarioSource(path, None)
    try:
        source.data = parse_yaml(text, str(path), source.lines)
    except TextFileError as err:
        raise SourceError(str(err)) from None
    source.lines.setdefault((), 1)
    return source
