"""Pydantic models that report every problem in one pass.

pydantic runs a model's cross-field checks (`after` validators) only when every field
validated, so a person fixing a file meets its errors in stages: the typos first, then the
rules between fields, then the next section's rules. Here a cross-field rule is a method
marked `@rule("field", "section.field", ...)` with the values it reads; it runs on whatever
did validate and is skipped only when something it reads is itself invalid (that value
already has its own error, and blaming it twice would mislead).

It lives in `servebench.common`, the bottom of the import graph, because both model specs
and scenario files use it; it knows nothing about either.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Self, get_args, get_origin

from pydantic import (
    BaseModel,
    ModelWrapValidatorHandler,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

Loc = tuple[str | int, ...]
#: Where a rule found a problem (relative to its model; () is the model itself) and what
#: was expected there.
Problem = tuple[Loc, str]
RuleMethod = Callable[[Any, Mapping[str, Any]], Iterable[Problem]]


def rule(*reads: str) -> Callable[[RuleMethod], RuleMethod]:
    """Mark `method(self, context) -> problems` as a cross-field rule that reads `reads`.

    A read is a field name or a dotted path through sub-models ("workload.batch_sizes");
    `context` is the validation context (scenario limits travel in it). A rule that makes
    several checks over different fields names none and guards each with `known`.
    """

    def mark(method: RuleMethod) -> RuleMethod:
        method.__rule_reads__ = reads  # type: ignore[attr-defined]
        return method

    return mark


class OnePassModel(BaseModel):
    """A model whose validation error holds every field error and every broken rule."""

    # Fields that failed, on a partial model (see `best_effort`); empty on a valid one.
    _broken: frozenset[str] = PrivateAttr(default_factory=frozenset)

    @classmethod
    def _prepare(cls, data: Any) -> Any:
        """Normalize raw input before validation (a subclass fills derived defaults)."""
        return data

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
        data = cls._prepare(data)
        context = info.context or {}
        errors: list[ErrorDetails] = []
        try:
            model: Self | None = handler(data)
        except ValidationError as err:
            errors = err.errors()
            model = cls._partial(data, errors, context)
        problems = _run_rules(model, data, context) if model is not None else []
        if errors or problems:
            details = [_init_details(e) for e in errors] + problems
            raise ValidationError.from_exception_data(cls.__name__, details)
        assert model is not None
        return model

    @classmethod
    def best_effort(
        cls, data: Any, context: Mapping[str, Any] | None = None
    ) -> tuple[Self | None, ValidationError | None]:
        """The valid model and None, or a partial model and the error.

        The partial model holds the values that did validate (sub-models partial in turn),
        so checks outside the model can run on them, guarded by `known`; it is None when
        the input is not even a mapping.
        """
        try:
            return cls.model_validate(data, context=context), None
        except ValidationError as err:
            return cls._partial(cls._prepare(data), err.errors(), context or {}), err

    @classmethod
    def _partial(
        cls, data: Any, errors: list[ErrorDetails], context: Mapping[str, Any]
    ) -> Self | None:
        if not isinstance(data, Mapping) or any(not e["loc"] for e in errors):
            return None
        by_key: dict[Any, list[ErrorDetails]] = {}
        for error in errors:
            by_key.setdefault(error["loc"][0], []).append(
                {**error, "loc": error["loc"][1:]}  # type: ignore[typeddict-item]
            )
        values: dict[str, Any] = {}
        broken: set[str] = set()
        for name, field in cls.model_fields.items():
            key = field.alias or name
            if key in by_key:
                broken.add(name)
                if key in data:
                    partial = _partial_value(field.annotation, data[key], by_key[key], context)
                    if partial is not None:
                        values[name] = partial
            elif key in data:
                values[name] = _adapter(field.annotation, tuple(field.metadata)).validate_python(
                    data[key], context=context
                )
        model = cls.model_construct(**values)
        model._broken = frozenset(broken)
        return model


def known(model: Any, *paths: str) -> bool:
    """Whether every dotted path validated on `model` (always, on a valid model).

    A path through a broken sub-model is still known where that part of it validated; an
    absent optional section is known (it reads as None).
    """
    return all(_known(model, path.split(".")) for path in paths)


def _known(model: Any, parts: list[str]) -> bool:
    value = model
    for i, part in enumerate(parts):
        if not isinstance(value, BaseModel):
            return True
        inner = value.__dict__.get(part)
        if part in _broken_of(value) and (
            i == len(parts) - 1 or not isinstance(inner, OnePassModel)
        ):
            return False
        value = inner
    return True


def _broken_of(model: BaseModel) -> frozenset[str]:
    # Read directly: a private attribute through getattr takes pydantic's slow path, and
    # every rule of every valid spec asks.
    private = getattr(model, "__pydantic_private__", None) or {}
    return private.get("_broken", frozenset())


def _partial_value(
    annotation: Any, raw: Any, errors: list[ErrorDetails], context: Mapping[str, Any]
) -> Any:
    """A partial sub-model (or list of them) for a field that failed, else None."""
    model = _one_model(annotation)
    if model is not None:
        return model._partial(model._prepare(raw), errors, context)
    item = _list_of_model(annotation)
    if item is None or not isinstance(raw, list):
        return None
    by_index: dict[Any, list[ErrorDetails]] = {}
    for error in errors:
        if error["loc"]:
            by_index.setdefault(error["loc"][0], []).append(
                {**error, "loc": error["loc"][1:]}  # type: ignore[typeddict-item]
            )
    items = []
    for i, value in enumerate(raw):
        if i in by_index:
            items.append(item._partial(item._prepare(value), by_index[i], context))
        else:
            items.append(item.model_validate(value, context=context))
    return items


def _one_model(annotation: Any) -> type[OnePassModel] | None:
    """`Model` or `Model | None` (an optional section); None for anything else."""
    if isinstance(annotation, type) and issubclass(annotation, OnePassModel):
        return annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    if len(args) == 1 and len(get_args(annotation)) == 2:
        return _one_model(args[0])
    return None


def _list_of_model(annotation: Any) -> type[OnePassModel] | None:
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if isinstance(item, type) and issubclass(item, OnePassModel):
            return item
    return None


def _adapter(annotation: Any, metadata: tuple[Any, ...]) -> TypeAdapter[Any]:
    """A validator for one field on its own, its constraints included."""
    return TypeAdapter(Annotated[annotation, *metadata] if metadata else annotation)


@functools.cache
def _rules_of(cls: type) -> tuple[tuple[tuple[str, ...], RuleMethod], ...]:
    found: dict[str, tuple[tuple[str, ...], RuleMethod]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            reads = getattr(value, "__rule_reads__", None)
            if reads is not None:
                found[name] = (reads, value)
    return tuple(found.values())


def _run_rules(model: BaseModel, data: Any, context: Mapping[str, Any]) -> list[InitErrorDetails]:
    problems: list[InitErrorDetails] = []
    partial = bool(_broken_of(model))  # a valid model's every value is known
    for reads, method in _rules_of(type(model)):
        if partial and not known(model, *reads):
            continue
        for loc, message in method(model, context):
            problems.append(
                InitErrorDetails(
                    type="value_error",
                    loc=loc,
                    input=value_at(data, loc),
                    ctx={"error": ValueError(message)},
                )
            )
    return problems


def value_at(data: Any, loc: Sequence[str | int | float]) -> Any:
    """What the raw input (parsed YAML or JSON) holds at `loc`, None where nothing is: the
    value an error message shows back."""
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


_CORE_ERROR_TYPES = frozenset(get_args(ErrorType))


def _init_details(error: ErrorDetails) -> InitErrorDetails:
    """An error as it was, to raise again; pydantic's own python-side kinds (e.g. a path
    that is not one) cannot be rebuilt by name, so they keep their kind and message."""
    if error["type"] not in _CORE_ERROR_TYPES:
        custom = PydanticCustomError(error["type"], "{message}", {"message": error["msg"]})
        return InitErrorDetails(type=custom, loc=error["loc"], input=error.get("input"))
    details = InitErrorDetails(type=error["type"], loc=error["loc"], input=error.get("input"))
    if "ctx" in error:
        details["ctx"] = error["ctx"]
    return details
