"""Turn a scenario file into a `Scenario`, or into errors a person can act on.

Every message reads `<file>:<line> <yaml.path>: <value> — <what was expected>`, one per
problem, all problems at once.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from servebench.analysis.cost import load_prices
from servebench.scenario.schema import Scenario, TfsSettingsMatrix, TritonSettingsMatrix
from servebench.scenario.source import (
    Location,
    ScenarioSource,
    SourceError,
    format_location,
    load_source,
)


class ScenarioError(ValueError):
    """A scenario that cannot run; `problems` holds one formatted line each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


_TEMPLATES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "missing": "required field is missing",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "too_short": "must have at least {min_length} item(s)",
    "string_pattern_mismatch": "must be letters, digits, '_', '.', '-' (starting with a letter or digit)",
}


def _message(error: dict[str, Any], model: type[BaseModel] | None) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key" + (f" (allowed: {', '.join(model.model_fields)})" if model else "")
    if kind == "literal_error":
        return f"must be one of {error['ctx']['expected']}"
    template = _TEMPLATES.get(kind)
    if template:
        ctx = {k: f"{v:g}" if isinstance(v, float) else v for k, v in error.get("ctx", {}).items()}
        return template.format(**ctx)
    return error["msg"].removeprefix("Value error, ")


def _model_at(location: Location, root: type[BaseModel]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of `location`, for 'allowed keys' hints."""
    model: Any = root
    for part in location[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _format(
    err: ValidationError, source: ScenarioSource, root: type[BaseModel], prefix: Location = ()
) -> list[str]:
    problems = []
    errors = err.errors()
    for error in errors:
        if _wrong_union_branch(error, errors):
            continue
        # Union members add their type name to the location (e.g. "str", "LinkProfile");
        # the user never wrote those, so they are dropped.
        location = (*prefix, *(p for p in error["loc"] if not _is_union_tag(p)))
        owner = _model_at((*location[len(prefix) :], ""), root)
        named = _FIELD_PREFIX.match(error["msg"].removeprefix("Value error, "))
        if error["type"] == "value_error" and named and owner and named[1] in owner.model_fields:
            # A rule across fields names the field it blames; point at that field's line.
            location = (*location, named[1])
            error = {**error, "msg": named[2], "input": source_value(source, location)}
        line = source.line_of(location)
        where = f"{source.path}:{line}" if line else str(source.path)
        field = format_location(location) or "(top level)"
        value = error.get("input")
        written = tuple(location) in source.lines
        shown = f"{value!r} — " if written and error["type"] != "missing" else ""
        if len(shown) > 60:
            shown = ""  # a whole section is not worth repeating back
        model = _model_at(location[len(prefix) :], root)
        problems.append(f"{where} {field}: {shown}{_message(error, model)}")
    return list(dict.fromkeys(problems))


_FIELD_PREFIX = re.compile(r"^(\w+): (.*)$", re.DOTALL)


def source_value(source: ScenarioSource, location: Location) -> Any:
    value = source.data
    for part in location:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _wrong_union_branch(error: dict[str, Any], errors: list[dict[str, Any]]) -> bool:
    """A "must be a string" for a mapping that another union member explains better."""
    if error["type"] != "string_type" or not isinstance(error.get("input"), dict):
        return False
    base = error["loc"][:-1]
    return any(
        e is not error and e["loc"][: len(base)] == base and len(e["loc"]) > len(error["loc"])
        for e in errors
    )


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (
        part[:1].isupper() or part in ("str", "int", "bool", "float") or "[" in part
    )


def validate_source(source: ScenarioSource) -> Scenario:
    if not isinstance(source.data, dict):
        raise ScenarioError(
            [f"{source.path}:1 (top level): a scenario must be a mapping of sections"]
        )
    try:
        scenario = Scenario.model_validate(source.data)
    except ValidationError as err:
        raise ScenarioError(_format(err, source, Scenario)) from None
    problems = []
    for i, server in enumerate(scenario.servers):
        model = TritonSettingsMatrix if server.kind == "triton" else TfsSettingsMatrix
        try:
            settings = model.model_validate(server.settings)
        except ValidationError as err:
            problems += _format(err, source, model, ("servers", i, "settings"))
            continue
        too_big = [
            b for b in scenario.workload.batch_sizes
            if all(c["max_batch_size"] < b for c in settings.combinations())
        ]  # fmt: skip
        if too_big and server.launch != "remote":
            location = ("workload", "batch_sizes")
            problems.append(
                f"{source.path}:{source.line_of(location)} {format_location(location)}: "
                f"{too_big} — larger than server {server.name!r}'s max_batch_size"
            )
    if scenario.cost is not None:
        known = set(load_prices()) | set(scenario.cost.prices)
        if scenario.cost.instance not in known:
            location = ("cost", "instance")
            problems.append(
                f"{source.path}:{source.line_of(location)} {format_location(location)}: "
                f"{scenario.cost.instance!r} — not in the price table "
                f"({', '.join(sorted(known))}); add it under cost.prices"
            )
    if problems:
        raise ScenarioError(problems)
    return scenario


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; raise ScenarioError listing every problem."""
    try:
        source = load_source(Path(path))
    except SourceError as err:
        raise ScenarioError([str(err)]) from None
    return validate_source(source)
