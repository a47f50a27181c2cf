"""Read a scenario file safely and remember the line of every key and list item.

PyYAML's `safe_load` forgets where values came from; composing the node tree first keeps
each node's mark, so a validation error can say `quickstart.yaml:14 workload.rates[2]`.
Duplicate keys are an error here (plain YAML silently keeps the last one, which hides typos
such as two `rates:` lines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Location = tuple[str | int, ...]
_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


class SourceError(ValueError):
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


def format_location(location: Location) -> str:
    """`("workload", "rates", 2)` → `workload.rates[2]`."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_source(path: Path) -> ScenarioSource:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise SourceError(f"{path}: cannot read it ({err.strerror or err})") from None
    return parse_source(text, path)


def parse_source(text: str, path: Path) -> ScenarioSource:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        source = ScenarioSource(path, None)
        source.data = _build(root, (), loader, source) if root is not None else None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise SourceError(f"{path}{line}: not valid YAML: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise SourceError(f"{path}: not valid YAML: {err}") from None
    finally:
        loader.dispose()
    source.lines.setdefault((), 1)
    return source


def _build(node: yaml.Node, location: Location, loader: yaml.SafeLoader, source: ScenarioSource):
    source.lines.setdefault(location, node.start_mark.line + 1)
    if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_TAGS:
        # Building collections by hand must not skip the safe loader's tag check.
        raise SourceError(
            f"{source.path}:{node.start_mark.line + 1}: not valid YAML for a scenario: "
            f"tag {node.tag!r} is not allowed"
        )
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<: *anchor` merges
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                raise SourceError(
                    f"{source.path}:{key_node.start_mark.line + 1}: a key must be a plain value"
                )
            if key in result:
                raise SourceError(
                    f"{source.path}:{key_node.start_mark.line + 1} "
                    f"{format_location((*location, key))}: duplicate key"
                )
            child = (*location, key)
            source.lines[child] = key_node.start_mark.line + 1
            result[key] = _build(value_node, child, loader, source)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*location, i), loader, source) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
