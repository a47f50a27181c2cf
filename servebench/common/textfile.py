"""Read the files people write by hand (scenarios, model specs, link profiles, traces) safely.

The loaders of those files (`servebench.scenario.source`, `model_zoo.spec.load_specs`,
`servebench.netem.profiles`/`trace`, `servebench.load.arrivals.TraceArrivals.from_file`) read
them through this module, and so do the readers of JSON-object files (a run's run.json, the
files Locust's options name: `read_json_object`), so a broken or hostile file gets the same
one-line error everywhere (`file:line: what is wrong`) instead of a traceback, an endless
parse or gigabytes of memory:

- Text must be UTF-8: `file:LINE: not UTF-8 text (byte 0xe9 at offset N)`, N counted in
  bytes from the start of the file.
- YAML is composed by PyYAML's safe loader with limits on what a small file can make it do:

  * at most `MAX_DEPTH` (100) levels of nesting, counted through aliases too (PyYAML
    composes recursively, so 5,000 levels of `[` used to end in a RecursionError);
  * aliases (`*name`) may add at most `MAX_ALIAS_NODES` (100,000) nodes to a document in
    all: ten lines of nested aliases ("billion laughs") otherwise expand to 10⁹ nodes;
  * an alias inside its own anchor (`a: &a [*a]`) is refused: it has no finite expansion;
  * an integer may have at most `MAX_INT_DIGITS` (4,300) decimal digits, Python's limit for
    converting one to text: PyYAML reads `0x` + 5,000 `f`s, but no error message could then
    show it.

  None of these limits is near what a real scenario, spec family or profile needs; a file
  of any size without aliases is read as written.
- Duplicate keys are an error (plain YAML silently keeps the last one, which hides typos
  such as two `rates:` lines). Merge keys follow YAML's merge rules: keys written in the
  mapping override merged ones, and an earlier source in `<<: [*a, *b]` overrides a later
  one; only two *written* equal keys are duplicates. Keys compare by type and value, so
  `1:` and `true:` are different keys (Python's `1 == True` made them "duplicates"); the
  returned dict, being a Python dict, then holds one value for the two, which every mapping
  the project reads would refuse anyway, since all of them take string keys.

Why here, in `servebench.common`: it is the bottom of the import graph.
`model_zoo.spec.load_specs` needs the same reader as the scenario loader and
`servebench.netem`/`servebench.load`. This module imports only the standard library and
PyYAML, so the low layers that take it from here (netem, load) depend on nothing above
them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from servebench.common.errors import ServebenchError

#: Most levels of lists and mappings inside each other (aliases expanded) in a YAML file.
MAX_DEPTH = 100
#: Most nodes that aliases may add to one YAML document, over all its aliases.
MAX_ALIAS_NODES = 100_000
#: Most decimal digits of an integer (Python's default `sys.get_int_max_str_digits()`).
MAX_INT_DIGITS = 4_300
_MAX_INT = 10**MAX_INT_DIGITS

Location = tuple[str | int | float, ...]

_PLAIN_COLLECTION_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"


class TextFileError(ServebenchError, ValueError):
    """A file cannot be read as UTF-8 text, YAML or a JSON object; the message is one line
    naming it."""


def read_text(path: str | Path) -> str:
    """The file's text, or a `TextFileError` saying why it cannot be read or decoded."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TextFileError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TextFileError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})"
        ) from None
    return text.removeprefix("\ufeff")


def read_json_object(path: str | Path) -> dict[str, Any]:
    """The JSON object in a file (a run's run.json, a file a Locust option names), or a
    `TextFileError` naming the file: unreadable, not UTF-8, not JSON, or not an object."""
    text = read_text(path)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: nested past Python's stack
        raise TextFileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(document, dict):
        raise TextFileError(f"{path}: expected a JSON object, found {type(document).__name__}")
    return document


def load_yaml(path: str | Path, lines: dict[Location, int] | None = None) -> Any:
    """Read and parse one YAML (or JSON) file within the limits above."""
    return parse_yaml(read_text(path), str(path), lines)


def parse_yaml(text: str, origin: str, lines: dict[Location, int] | None = None) -> Any:
    """Parse YAML text; `origin` names it in errors.

    If `lines` is given, it receives the 1-based line of every key and list item, so a
    later validation error can say `quickstart.yaml:14 workload.rates[2]`.
    """
    try:
        loader = _BoundedLoader(text, origin)  # the reader checks every character here
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        raise TextFileError(
            f"{origin}:{line}: not valid YAML: character {err.character:#x} is not "
            "allowed in YAML text"
        ) from None
    try:
        root = loader.get_single_node()
        return None if root is None else _Builder(loader, origin, lines).build(root, ())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f":{mark.line + 1}" if mark else ""
        reason = " ".join(str(err.problem or err.context or err).split())
        raise TextFileError(f"{origin}{where}: not valid YAML: {reason}") from None
    except yaml.YAMLError as err:
        raise TextFileError(f"{origin}: not valid YAML: {' '.join(str(err).split())}") from None
    finally:
        loader.dispose()


def format_location(location: Location) -> str:
    """`("workload", "rates", 2)` → `workload.rates[2]`."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, measuring each node as it is composed and stopping at a limit.

    A node's size with aliases expanded and its height are known as soon as its children
    are composed (an alias can only name a node already composed, or one still open, which
    is a recursive alias), so a limit is hit before any expansion is built.
    """

    def __init__(self, text: str, origin: str):
        super().__init__(text)
        self.origin = origin
        self.depth = 0  # lists and mappings around the node being composed, as written
        self.written = 0  # nodes composed from text so far (an alias adds none)
        self.open_anchors: set[str] = set()
        # id(node) → (nodes, levels of lists and mappings), both with aliases expanded
        self.measure: dict[int, tuple[int, int]] = {}

    def _fail(self, mark: yaml.Mark, message: str) -> TextFileError:
        return TextFileError(f"{self.origin}:{mark.line + 1}: {message}")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise self._fail(
                    event.start_mark,
                    f"recursive alias *{event.anchor} (it is inside the node it names)",
                )
            return super().compose_node(parent, index)
        nests = isinstance(event, yaml.CollectionStartEvent)
        if nests and self.depth >= MAX_DEPTH:
            raise self._fail(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
        written_before = self.written
        self.written += 1
        self.depth += nests
        anchor = event.anchor
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= nests
            if anchor is not None:
                self.open_anchors.discard(anchor)
        self._check(node, self.written - written_before)
        return node

    def _check(self, node: yaml.Node, written: int) -> None:
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            self.measure[id(node)] = (1, 0)
            return
        sizes = [self.measure[id(child)] for child in children]
        expanded = 1 + sum(size for size, _ in sizes)
        height = 1 + max((h for _, h in sizes), default=0)
        if expanded - written > MAX_ALIAS_NODES:
            raise self._fail(
                node.start_mark,
                f"aliases expand the document past {MAX_ALIAS_NODES:,} nodes here "
                f"({expanded:,} from {written:,} written; a 'billion laughs' file?)",
            )
        if self.depth + height > MAX_DEPTH:
            raise self._fail(
                node.start_mark, f"nested deeper than {MAX_DEPTH} levels (through aliases)"
            )
        self.measure[id(node)] = (expanded, height)


_Entry = tuple[Any, yaml.Node, yaml.Node]  # (key, key node, value node)


class _Builder:
    """Plain Python data from a composed node tree, recording lines and refusing duplicates.

    Built by hand rather than by PyYAML's constructor so that every key keeps its line and
    merge keys get the rules in the module docstring without mutating shared anchor nodes.
    """

    def __init__(self, loader: _BoundedLoader, origin: str, lines: dict[Location, int] | None):
        self.loader = loader
        self.origin = origin
        self.lines = lines

    def _fail(self, node: yaml.Node, message: str) -> TextFileError:
        return TextFileError(f"{self.origin}:{node.start_mark.line + 1}{message}")

    def build(self, node: yaml.Node, location: Location) -> Any:
        if self.lines is not None:
            self.lines.setdefault(location, node.start_mark.line + 1)
        if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_COLLECTION_TAGS:
            # Building collections by hand must not skip the safe loader's tag check.
            raise self._fail(node, f": not valid YAML here: tag {node.tag!r} is not allowed")
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*location, i)) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key, key_node, value_node in self._pairs(node, location).values():
                child = (*location, key)
                if self.lines is not None:
                    self.lines[child] = key_node.start_mark.line + 1
                result[key] = self.build(value_node, child)
            return result
        return self._scalar(node)

    def _pairs(self, node: yaml.MappingNode, location: Location) -> dict[tuple[type, Any], _Entry]:
        """The mapping's entries by (key type, key), merges resolved, in written order."""
        merged: dict[tuple[type, Any], _Entry] = {}
        written: dict[tuple[type, Any], _Entry] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise self._fail(source, ": not valid YAML: << merges only mappings")
                    for identity, entry in self._pairs(source, location).items():
                        merged.setdefault(identity, entry)  # an earlier source wins
                continue
            key = self._scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or not isinstance(key, str | int | float):
                raise self._fail(key_node, ": a key must be a plain value")
            identity = (type(key), key)
            if identity in written:
                raise self._fail(key_node, f" {format_location((*location, key))}: duplicate key")
            written[identity] = (key, key_node, value_node)
        return merged | written

    def _scalar(self, node: yaml.Node) -> Any:
        too_long = f": not valid YAML: an integer of more than {MAX_INT_DIGITS:,} digits"
        try:
            value = self.loader.construct_object(node, deep=True)
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            # PyYAML's constructors fail this way on e.g. `!!int abc`, `!!bool x`,
            # `2001-13-45`, or a decimal integer past Python's digit limit.
            if node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
                raise self._fail(node, too_long) from None
            text = node.value if isinstance(node.value, str) else ""
            shown = repr(text) if len(text) <= 40 else repr(text[:40]) + "…"
            tag = node.tag.rsplit(":", 1)[-1]
            reason = " ".join(str(err).split())[:200]
            raise self._fail(
                node, f": not valid YAML: {shown} cannot be read as {tag} ({reason})"
            ) from None
        if isinstance(value, int) and abs(value) >= _MAX_INT:  # hex, octal, binary, 1:2:3
            raise self._fail(node, too_long)
        return value
