"""Turn a scenario file into a `Scenario`, or into errors a person can act on.

Every message reads `<file>:<line> <yaml.path>: <value> — <what was expected>`, one per
problem, all problems at once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from model_zoo.counting import count
from model_zoo.export.family import TFS_FORMAT, load_family
from model_zoo.imports import ImportedModel, ModelImportError, ServedModel, ShapeError
from model_zoo.mutate import DEFAULT_INPUT_SHAPES
from model_zoo.spec import INPUT_NAME, MUTABLE_LAYER_TYPES, OUTPUT_NAME, ModelSpec, resnet50_spec
from servebench.clients.base import ModelSignature, TensorSpec, request_bytes
from servebench.clients.input_data import InputDataError
from servebench.common.errors import ServebenchError
from servebench.common.validation import known, value_at
from servebench.load.arrivals import TraceArrivals
from servebench.netem.errors import ProfileError
from servebench.netem.profiles import is_profile_file
from servebench.pricing import load_prices
from servebench.scenario.plan import count_trials, generated_models, model_mix, resolve_models
from servebench.scenario.schema import (
    LIMITS_CONTEXT_KEY,
    Limits,
    ResNetReference,
    Scenario,
    ServerSection,
    infinite_field,
    over_limit,
    renamed_fields,
)
from servebench.scenario.source import (
    Location,
    ScenarioSource,
    SourceError,
    format_location,
    load_source,
)
from servebench.servers.settings import SettingsMatrix, as_list, matrix_size


class ScenarioError(ServebenchError, ValueError):
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
    "finite_number": "must be a finite number",
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
        location = _as_written(location, source)
        owner = _model_at((*location[len(prefix) :], ""), root)
        named = _FIELD_PREFIX.match(error["msg"].removeprefix("Value error, "))
        if error["type"] == "value_error" and named and owner and named[1] in owner.model_fields:
            # A plain ValueError (a link profile's) names the field it blames; point there.
            location = (*location, named[1])
            error = {**error, "msg": named[2], "input": value_at(source.data, location)}
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


def _as_written(location: Location, source: ScenarioSource) -> Location:
    """`location` with a renamed field spelled as the file writes it (its old name), so
    the problem points at that line and says that word."""
    if location in source.lines:
        return location
    for written, new in renamed_fields(source.data):
        if location[: len(written)] == (*written[:-1], new):
            return (*written, *location[len(written) :])
    return location


_FIELD_PREFIX = re.compile(r"^(\w+): (.*)$", re.DOTALL)


def _wrong_union_branch(error: dict[str, Any], errors: list[dict[str, Any]]) -> bool:
    """A scalar branch's complaint about a list or mapping that another union member
    explains better ("must be an integer" for `[1, 0]` when the list branch names item 1)."""
    loc = error["loc"]
    if not isinstance(error.get("input"), dict | list) or not loc or not _is_union_tag(loc[-1]):
        return False
    base = loc[:-1]
    return any(
        e is not error
        and e["loc"][: len(base)] == base
        and (len(e["loc"]) > len(loc) or _is_collection_tag(e["loc"][len(base)]))
        for e in errors
    )


def _is_collection_tag(part: Any) -> bool:
    """A union member that is a list or a model (`list[int]`, `LinkProfile`): its own
    complaint (`[]` too short) is the one that fits a list or mapping the user wrote."""
    return isinstance(part, str) and ("[" in part or part[:1].isupper())


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (
        part[:1].isupper()
        or part in ("str", "int", "bool", "float")
        or part.startswith("constrained-")
        or "[" in part
    )


def validate_source(source: ScenarioSource) -> Scenario:
    """The scenario, or a ScenarioError with every problem: schema, cross-field and files.

    The checks outside the schema run on whatever part of the file did validate (a partial
    scenario, guarded by `known`), so one pass finds them all.
    """
    if not isinstance(source.data, dict):
        raise ScenarioError(
            [f"{source.path}:1 (top level): a scenario must be a mapping of sections"]
        )
    limits = _limits(source.data)
    scenario, err = Scenario.best_effort(source.data, {LIMITS_CONTEXT_KEY: limits})
    problems = _format(err, source, Scenario) if err else []
    if scenario is not None:
        checks = _Checks(source, scenario, limits)
        problems += checks.settings()
        problems += checks.cost()
        problems += checks.links()
        read = checks.files() + checks.model_files() + checks.mix()
        problems += read
        problems += checks.tune()
        problems += checks.inputs_fit(read)
        problems += checks.sizes()
    if problems:
        raise ScenarioError(sorted(dict.fromkeys(problems), key=_line_number))
    assert scenario is not None
    scenario._notes = _renamed_notes(source)
    return scenario


def _renamed_notes(source: ScenarioSource) -> list[str]:
    """One line per field the file writes by its old name (read as the new one)."""
    notes = []
    for location, new in renamed_fields(source.data):
        line = source.line_of(location)
        where = f"{source.path}:{line}" if line else str(source.path)
        notes.append(
            f"{where} {format_location(location)}: now called {new} (the old name still "
            "works, for now)"
        )
    return notes


def _line_number(problem: str) -> int:
    """Problems are listed in file order (stable, so a line's problems keep theirs)."""
    found = re.match(r"^.*?:(\d+) ", problem)
    return int(found[1]) if found else 0


def _limits(data: dict[str, Any]) -> Limits:
    """The file's limits if they validate, else the defaults (their errors come later)."""
    try:
        return Limits.model_validate(data.get("limits") or {})
    except ValidationError:
        return Limits()


class _Checks:
    """What the schema cannot know alone: settings by server kind, files, sizes."""

    def __init__(self, source: ScenarioSource, scenario: Scenario, limits: Limits):
        self.source = source
        self.scenario = scenario
        self.limits = limits
        self.base_dir = source.path.parent
        self.matrices: list[tuple[ServerSection, SettingsMatrix]] = []
        self.family: list[ModelSpec] = []  # the export folder's models, once read
        self.imported: list[tuple[int, ImportedModel]] = []  # models.files[i], once read

    def problem(self, location: Location, value: Any, expected: str) -> str:
        line = self.source.line_of(location)
        where = f"{self.source.path}:{line}" if line else str(self.source.path)
        field = format_location(location) or "(top level)"
        shown = f"{value!r} — " if value is not None and len(repr(value)) <= 60 else ""
        return f"{where} {field}: {shown}{expected}"

    def settings(self) -> list[str]:
        """Each server's settings matrix by its kind, then batch sizes against it."""
        problems = []
        context = {LIMITS_CONTEXT_KEY: self.limits}
        for i, server in enumerate(self.scenario.__dict__.get("servers") or []):
            if server is None or not known(server, "api", "launch", "settings"):
                continue
            settings_type = server.settings_type
            if settings_type is None:  # a kind whose settings are its own, or no kind
                continue
            location = ("servers", i, "settings")
            try:
                matrix = settings_type.model_validate(server.settings, context=context)
            except ValidationError as err:
                problems += _format(err, self.source, settings_type, location)
                continue
            combinations = matrix_size(matrix)
            if combinations > self.limits.max_trials:
                problems.append(
                    self.problem(
                        location, None,
                        f"{combinations:,} combinations; "
                        + over_limit("max_trials", self.limits, " trials"),
                    )
                )  # fmt: skip
                continue
            self.matrices.append((server, matrix))
        if not known(self.scenario, "workload.batch_sizes"):
            return problems
        for server, matrix in self.matrices:
            largest = max(as_list(matrix.max_batch_size))
            name = server.__dict__.get("name", "?")
            for j, batch in enumerate(self.scenario.workload.batch_sizes):
                if batch > largest:
                    problems.append(
                        self.problem(
                            ("workload", "batch_sizes", j), batch,
                            f"batch {batch} > max_batch_size {largest} of server {name!r}",
                        )
                    )  # fmt: skip
        return problems

    def cost(self) -> list[str]:
        cost = self.scenario.__dict__.get("cost")
        if cost is None or not known(self.scenario, "cost.instance", "cost.prices"):
            return []
        known_instances = set(load_prices()) | set(cost.prices)
        if cost.instance in known_instances:
            return []
        return [
            self.problem(
                ("cost", "instance"), cost.instance,
                f"not in the price table ({', '.join(sorted(known_instances))}); "
                "add it under cost.prices",
            )
        ]  # fmt: skip

    def links(self) -> list[str]:
        """Link profile files exist and parse, their numbers are finite, and the profiles'
        names (a file's own, not its path) are distinct, as trials.csv's `link` column needs.

        Each file is read through `Scenario.link_profile`, which keeps the profile for the
        plan's expansion: a run reads it once.
        """
        problems = []
        links = self.source.data.get("links")
        for i, link in enumerate(links if isinstance(links, list) else []):
            if not is_profile_file(link):
                continue  # the schema checks names and inline profiles
            try:
                profile = self.scenario.link_profile(link, self.base_dir)
            except ProfileError as err:
                problems.append(self.problem(("links", i), link, _reason(err, self._path(link))))
                continue
            if name := infinite_field(profile):
                problems.append(self.problem(("links", i), link, f"{name} is not finite"))
        if problems or not known(self.scenario, "links"):
            return problems
        names = [
            self.scenario.link_profile(link, self.base_dir).name for link in self.scenario.links
        ]
        if len(set(names)) != len(names):
            problems.append(
                self.problem(("links",), None, f"link profile names must be distinct, got {names}")
            )
        return problems

    def files(self) -> list[str]:
        """The trace, the input data and the export folder exist and parse (the input
        data's fit to each model is `inputs_fit`'s)."""
        problems = []
        readers: dict[str, Callable[[Path], object]] = {
            "trace": TraceArrivals.from_file,
            # Through the scenario, which keeps the samples for its trials (read once).
            "inputs": lambda _path: self.scenario.input_data(self.base_dir),
        }
        for field, read in readers.items():
            given = known(self.scenario, f"workload.{field}")
            value = getattr(self.scenario.workload, field) if given else None
            if not value:
                continue
            path = self._path(value)
            try:
                read(path)
            except ValueError as err:
                problems.append(self.problem(("workload", field), str(value), _reason(err, path)))
        models = self.scenario.__dict__.get("models")
        if models is not None and known(models, "repository") and models.repository:
            path = self._path(models.repository)
            try:
                self.family = load_family(path)[0]
            except (OSError, ValueError) as err:
                problems.append(
                    self.problem(
                        ("models", "repository"), str(models.repository), _reason(err, path)
                    )
                )
        return problems

    def model_files(self) -> list[str]:
        """Each of `models.files` exists, reads (`Scenario.imported_model`, which keeps it
        for the plan), has every dimension, a name no other model has, and can be served
        by every server of the scenario (TF Serving needs a SavedModel; a model without a
        batch axis takes neither batches nor the dynamic batcher)."""
        models = self.scenario.__dict__.get("models")
        if models is None or not known(models, "files"):
            return []
        problems = []
        taken = self._generated_ids()
        for i, entry in enumerate(models.files):
            where = ("models", "files", i)
            path = self._path(entry.path)
            if not path.exists():
                problems.append(
                    self.problem((*where, "path"), str(entry.path), f"{path}: no such file")
                )
                continue
            try:
                model = self.scenario.imported_model(entry, self.base_dir)
            except ShapeError as err:
                problems.append(self.problem((*where, "input_shapes"), None, _reason(err, path)))
                continue
            except (ModelImportError, OSError, ValueError) as err:
                problems.append(self.problem((*where, "path"), str(entry.path), _reason(err, path)))
                continue
            named = (*where, "name") if entry.name else (*where, "path")
            if model.id in taken:
                problems.append(
                    self.problem(
                        named, entry.name or str(entry.path),
                        f"model name {model.id!r} is already {taken[model.id]}; "
                        "give this file another name",
                    )
                )  # fmt: skip
                continue
            taken[model.id] = f"models.files[{i}]'s"
            self.imported.append((i, model))
            problems += self._servable(where, model)
        return problems

    @functools.cached_property
    def generated(self) -> list[ModelSpec] | None:
        """The models servebench generates (an export folder's included), resolved once for
        every check that needs their ids; None where the section is broken (a broken export
        folder: `files` names it)."""
        models = self.scenario.models
        if not known(models, "specs", "grid", "mutate", "resnet50", "repository"):
            return None
        try:
            return generated_models(self.scenario, self.base_dir)
        except (OSError, ValueError):
            return None

    def _models(self) -> list[ServedModel] | None:
        """Every model the plan will have (`plan.resolve_models`), or None where some
        source is broken (its own check reports it)."""
        if self.generated is None:
            return None
        try:
            return resolve_models(self.scenario, self.base_dir, generated=self.generated)
        except (OSError, ValueError):
            return None

    def _generated_ids(self) -> dict[str, str]:
        """The ids of the models servebench generates, with where each comes from."""
        return {spec.id: "a generated model's" for spec in self.generated or []}

    def _servable(self, where: Location, model: ImportedModel) -> list[str]:
        """What no server of the scenario can do with `model`, one problem each."""
        problems = []
        for server in self.scenario.__dict__.get("servers") or []:
            if server is None or not known(server, "api", "launch"):
                continue
            kind = server.server_kind
            if kind.export_format == TFS_FORMAT and not model.to_savedmodel:
                problems.append(
                    self.problem(
                        (*where, "path"), None,
                        f"model {model.id!r} ({model.source_format}) cannot be served by "
                        f"server {server.name!r} ({kind.api.title}): only a SavedModel or "
                        "Keras file converts to TF Serving here",
                    )
                )  # fmt: skip
        if model.batched:
            return problems
        why = f"model {model.id!r} has no batch axis (max_batch_size 0), so Triton cannot batch it"
        if known(self.scenario, "workload.batch_sizes"):
            for j, batch in enumerate(self.scenario.workload.batch_sizes):
                if batch > 1:
                    problems.append(
                        self.problem(
                            ("workload", "batch_sizes", j), batch,
                            f"{why}; give this model a scenario with batch_sizes [1]",
                        )
                    )  # fmt: skip
        for server, matrix in self.matrices:
            if True in as_list(getattr(matrix, "dynamic_batching", False)):
                k = self.scenario.servers.index(server)
                problems.append(
                    self.problem(
                        ("servers", k, "settings", "dynamic_batching"), None,
                        f"{why}; set dynamic_batching: false",
                    )
                )  # fmt: skip
        return problems

    def mix(self) -> list[str]:
        """Each model of `workload.mix` is one of the scenario's models, named by its id
        (`scenario plan` lists them). Checked once the models section is valid: the ids
        are those the plan resolves (`plan.resolve_models`)."""
        workload = self.scenario.__dict__.get("workload")
        mix = workload.__dict__.get("mix") if workload is not None else None
        models = self._models() if mix and known(self.scenario, "models") else None
        if models is None:
            return []  # no mix, or the models' own problem is reported where it is
        ids = [model.id for model in models]
        problems = []
        for i, entry in enumerate(mix):
            model = entry.__dict__.get("model")  # None where the schema refused it
            if isinstance(model, str) and model not in ids:
                shown = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
                problems.append(
                    self.problem(
                        ("workload", "mix", i, "model"), model,
                        f"not a model of this scenario (its ids: {shown}; "
                        "`servebench scenario plan` lists them)",
                    )
                )  # fmt: skip
        return problems

    def inputs_fit(self, unread: list[str]) -> list[str]:
        """`workload.inputs` fits every model its trials send to (the mix's, or all of
        them): the names, dtypes and per-sample shapes each model is served with — a
        generated model's `input`/`output`, a user's file's own signature — so a misfit is
        refused here, before any server starts, not as failed trials an hour in. The trial
        checks again against what the server reports (`InputData.match`, the same check).
        Skipped where a file it needs could not be read (`unread`: those checks' problems)
        or the parts it reads did not validate; other problems of the file do not hide it."""
        if unread or not known(self.scenario, "workload.inputs", "workload.mix", "models"):
            return []
        data = self.scenario.input_data(self.base_dir)
        if data is None:
            return []
        models = self._models() or []
        mix = model_mix(self.scenario, models)
        for model in mix.specs if mix is not None else models:
            try:
                data.match(_served_signature(model))
            except InputDataError as err:
                where = ("workload", "inputs")
                value = str(self.scenario.workload.inputs)
                return [self.problem(where, value, f"does not fit model {model.id!r}: {err}")]
        return []

    def tune(self) -> list[str]:
        """A tuned server varies something, quick's start names values its matrix lists, a
        race over every setting can afford its first block of rounds, and one model is
        tuned (or one mix): the search compares one trial per setting."""
        tune = self.scenario.__dict__.get("tune")
        if tune is None or not known(self.scenario, "tune"):
            return []
        problems = []
        for server, matrix in self.matrices:
            i = self.scenario.servers.index(server)
            axes = matrix.axes()
            if not axes:
                problems.append(
                    self.problem(
                        ("servers", i, "settings"), None,
                        "nothing to tune: give a list of values for at least one setting",
                    )
                )  # fmt: skip
                continue
            settings = len(matrix.combinations())
            first_block = tune.first_rounds * settings
            if (
                tune.method == "race"
                and tune.over == "all"
                and tune.budget_trials is not None
                and tune.budget_trials < first_block
            ):
                problems.append(
                    self.problem(
                        ("tune", "budget_trials"), tune.budget_trials,
                        f"less than the race's first block on server {server.name!r}: "
                        f"{tune.first_rounds} rounds of {settings} settings "
                        f"= {first_block} replicate trials",
                    )
                )  # fmt: skip
            for name, value in tune.start.items():
                if name not in axes:
                    problems.append(
                        self.problem(
                            ("tune", "start", name), value,
                            f"not a setting server {server.name!r} varies "
                            f"(it varies {', '.join(axes)})",
                        )
                    )  # fmt: skip
                elif value not in axes[name]:
                    problems.append(
                        self.problem(
                            ("tune", "start", name), value,
                            f"not one of the values server {server.name!r} lists: {axes[name]}",
                        )
                    )  # fmt: skip
        models = self.scenario.__dict__.get("models")
        mixed = known(self.scenario, "workload.mix") and bool(self.scenario.workload.mix)
        if models is not None and not mixed and models.size + len(self.family) > 1:
            problems.append(
                self.problem(
                    ("models",), None,
                    "tune compares one trial per setting: give one model (or a workload.mix)",
                )
            )  # fmt: skip
        return problems

    def sizes(self) -> list[str]:
        """Models within the byte caps; models and trials within their counts.

        Each is checked wherever the parts it reads validated, whatever else the file
        gets wrong, so one pass reports them with the schema's problems (`_countable`).
        """
        if not known(self.scenario, "models", "workload.batch_sizes"):
            return []
        models = self.scenario.models
        batch = max(self.scenario.workload.batch_sizes)
        problems = []
        for location, spec in self._largest_models():
            problems += self._model_bytes(location, spec, batch)
        for i, model in self.imported:
            problems += self._imported_bytes(("models", "files", i), model, batch)
        total = models.size + len(self.family)
        if self.family and total > self.limits.max_models:
            problems.append(
                self.problem(
                    ("models", "repository"), None,
                    f"{total:,} models with the export folder's {len(self.family):,}; "
                    + over_limit("max_models", self.limits),
                )
            )  # fmt: skip
        if self._countable():
            trials = count_trials(self.scenario, total)
            if trials > self.limits.max_trials:
                problems.append(
                    self.problem(
                        (), None,
                        f"up to {trials:,} trials; "
                        + over_limit("max_trials", self.limits)
                        + " (or shorten a list: models, settings, links, batch sizes, levels)",
                    )
                )  # fmt: skip
        return problems

    def _countable(self) -> bool:
        """Whether everything `count_trials` reads validated: the models, links, load
        levels, batch sizes and mix, and each server's launch and settings matrix."""
        levels = ("mode", "rates", "trace", "concurrency", "search", "batch_sizes", "mix")
        if not known(
            self.scenario, "models", "links", "servers", *(f"workload.{n}" for n in levels)
        ):
            return False
        matrices = {id(server) for server, _ in self.matrices}
        return all(
            server is not None
            and known(server, "launch", "api", "settings")
            and (server.launch == "remote" or id(server) in matrices)
            for server in self.scenario.servers
        )

    def _largest_models(self) -> Iterator[tuple[Location, ModelSpec]]:
        """Each model source's largest models, which bound its request and weight bytes.

        Built unvalidated (`model_construct`): only their sizes are read, and a grid's
        extremes may not be a valid combination (heads must divide the width).
        """
        models = self.scenario.models
        for i, spec in enumerate(models.specs):
            yield ("models", "specs", i), spec
        if models.grid:
            g = models.grid
            for layer_type in dict.fromkeys(g.types):
                shape = g.input_shapes.get(layer_type, DEFAULT_INPUT_SHAPES[layer_type])
                written = ("models", "grid", "input_shapes", layer_type)
                yield (written if written in self.source.lines else ("models", "grid")), _sized(
                    layer_type, max(g.depths), max(g.widths), shape,
                    seq_len=g.seq_len, kernel_size=g.kernel_size, num_outputs=g.num_outputs,
                )  # fmt: skip
        if models.mutate:
            m = models.mutate
            yield ("models", "mutate", "base"), m.base
            for layer_type in MUTABLE_LAYER_TYPES:
                same_rank = len(m.base.input_shape) == len(DEFAULT_INPUT_SHAPES[layer_type])
                shape = m.base.input_shape if same_rank else DEFAULT_INPUT_SHAPES[layer_type]
                outputs = m.base.num_outputs
                largest = _sized(layer_type, m.max_depth, m.max_width, shape, num_outputs=outputs)
                yield ("models", "mutate"), largest
        if models.resnet50:
            size = (
                models.resnet50.image_size if isinstance(models.resnet50, ResNetReference) else 224
            )
            yield ("models", "resnet50"), resnet50_spec(size)
        for spec in self.family:
            yield ("models", "repository"), spec

    def _model_bytes(self, location: Location, spec: ModelSpec, batch: int) -> list[str]:
        problems = []
        request = request_bytes(_served_signature(spec).inputs, batch)
        if request > self.limits.max_request_mb * MIB:
            problems.append(
                self.problem(
                    location, None,
                    f"{spec.layer_type} input {list(spec.served_input_shape)} x batch {batch} "
                    f"is {request / MIB:,.0f} MiB per request; "
                    + over_limit("max_request_mb", self.limits, " MiB"),
                )
            )  # fmt: skip
        weights = count(spec).weight_bytes
        if weights > self.limits.max_model_mb * MIB:
            problems.append(
                self.problem(
                    location, None,
                    f"{spec.layer_type} depth {spec.depth} width {spec.width} has "
                    f"{weights / MIB:,.0f} MiB of weights; "
                    + over_limit("max_model_mb", self.limits, " MiB"),
                )
            )  # fmt: skip
        return problems

    def _imported_bytes(self, location: Location, model: ImportedModel, batch: int) -> list[str]:
        """A user's model within the same byte caps as a generated one (its weights where
        its graph was counted)."""
        inputs = (
            TensorSpec(t.name, t.dtype, model.input_shapes[t.name]) for t in model.signature.inputs
        )
        request = request_bytes(inputs, batch if model.batched else 1)
        problems = []
        if request > self.limits.max_request_mb * MIB:
            problems.append(
                self.problem(
                    location, None,
                    f"model {model.id!r} input x batch {batch} is {request / MIB:,.0f} MiB per "
                    "request; " + over_limit("max_request_mb", self.limits, " MiB"),
                )
            )  # fmt: skip
        weights = model.counts.weight_bytes or 0
        if weights > self.limits.max_model_mb * MIB:
            problems.append(
                self.problem(
                    location, None,
                    f"model {model.id!r} has {weights / MIB:,.0f} MiB of weights; "
                    + over_limit("max_model_mb", self.limits, " MiB"),
                )
            )  # fmt: skip
        return problems

    def _path(self, path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.base_dir / path


MIB = 2**20


def _sized(layer_type: str, depth: int, width: int, shape: Any, **knobs: Any) -> ModelSpec:
    data = {"layer_type": layer_type, "depth": depth, "width": width, **knobs}
    data = {k: v for k, v in data.items() if v is not None}
    filled = ModelSpec._prepare({**data, "input_shape": tuple(shape)})
    return ModelSpec.model_construct(**filled)


def _served_signature(model: ServedModel) -> ModelSignature:
    """The signature `model` is served with, as a server's metadata will state it: a
    generated model's named tensors (`model_zoo.export`), a file's own (per-sample dims
    where it batches; -1 where a dimension is open)."""
    if isinstance(model, ModelSpec):
        return ModelSignature(
            model.id,
            (TensorSpec(INPUT_NAME, model.dtype, model.served_input_shape),),
            (TensorSpec(OUTPUT_NAME, model.dtype, model.served_output_shape),),
        )
    signature = model.signature

    def tensors(found: tuple) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(t.name, t.dtype, signature.served_dims(t)) for t in found)

    return ModelSignature(model.id, tensors(signature.inputs), tensors(signature.outputs))


def _reason(err: Exception, path: Path) -> str:
    """An error about a file, starting with the path the scenario's folder resolves to."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text if str(path) in text else f"{path}: {text}"


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; raise ScenarioError listing every problem."""
    try:
        source = load_source(Path(path))
    except SourceError as err:
        raise ScenarioError([str(err)]) from None
    return validate_source(source)
