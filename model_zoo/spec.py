"""What a generated model is: a small, validated, content-addressed description.

A spec is the unit every other part of servebench talks about (export, serve, count,
report), so it is frozen, hashable and has an id derived from its content: two people who
write the same spec get the same id, and results stay joinable across runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError

from model_zoo.errors import ModelZooError

# Hard ceilings (servebench.common.limits holds them, for the command line too).
from servebench.common.limits import (
    MAX_DEPTH,
    MAX_HEADS,
    MAX_KERNEL_SIZE,
    MAX_OUTPUTS,
    MAX_SAMPLE_ELEMENTS,
    MAX_SEQ_LEN,
    MAX_WIDTH,
)
from servebench.common.textfile import TextFileError, load_yaml
from servebench.common.validation import OnePassModel, Problem, rule

LayerType = Literal["dense", "conv", "lstm", "gru", "attention", "resnet50"]
MUTABLE_LAYER_TYPES: tuple[str, ...] = ("dense", "conv", "lstm", "gru", "attention")
SEQUENCE_TYPES: frozenset[str] = frozenset({"lstm", "gru", "attention"})

INPUT_NAME = "input"
OUTPUT_NAME = "output"

# Per-type knobs and their defaults; a knob given to a type that has none is an error, so a
# typo like `heads: 8` on a conv model is not silently ignored.
KNOB_DEFAULTS: dict[str, dict[str, Any]] = {
    "dense": {},
    "conv": {"kernel_size": 3, "residual": False},
    "lstm": {"seq_len": 16},
    "gru": {"seq_len": 16},
    "attention": {"seq_len": 16, "heads": 4},
    "resnet50": {},
}
_KNOBS = ("kernel_size", "residual", "heads", "seq_len")


class SpecError(ModelZooError, ValueError):
    """A spec that cannot describe a model; the message names the field and the reason."""


class ModelSpec(OnePassModel):
    """One model of a family.

    `input_shape` is per sample, without the batch dimension: `(features,)` for dense and
    for each time step of lstm/gru/attention (whose sequence length is `seq_len`), and
    `(height, width, channels)` — channels-last, as TF Serving clients send images — for
    conv and resnet50. Every number has a ceiling (the `MAX_*` constants above).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    layer_type: LayerType
    depth: int = Field(
        ge=1, le=MAX_DEPTH, description="hidden layers (dense, recurrent, attention) or conv layers"
    )
    width: int = Field(ge=1, le=MAX_WIDTH, description="units, channels or model dimension")
    input_shape: tuple[Annotated[int, Field(ge=1, le=MAX_SAMPLE_ELEMENTS)], ...]
    num_outputs: int = Field(default=10, ge=1, le=MAX_OUTPUTS)
    dtype: Literal["float32"] = "float32"
    kernel_size: int | None = Field(default=None, ge=1, le=MAX_KERNEL_SIZE)
    residual: bool | None = None
    heads: int | None = Field(default=None, ge=1, le=MAX_HEADS)
    seq_len: int | None = Field(default=None, ge=1, le=MAX_SEQ_LEN)

    @classmethod
    def _prepare(cls, data: Any) -> Any:
        """Fill the knobs of the spec's type with their defaults (see `KNOB_DEFAULTS`)."""
        if not isinstance(data, dict) or data.get("layer_type") not in KNOB_DEFAULTS:
            return data
        filled = dict(data)
        for knob, default in KNOB_DEFAULTS[data["layer_type"]].items():
            if filled.get(knob) is None:
                filled[knob] = default
        return filled

    @rule("layer_type", *_KNOBS)
    def _knobs_of_the_type(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        # Defaults are only filled for the type's own knobs, so any other one was written.
        for knob in _KNOBS:
            if knob not in KNOB_DEFAULTS[self.layer_type] and getattr(self, knob) is not None:
                yield (knob,), f"not a setting of {self.layer_type} models"

    @rule("layer_type", "input_shape")
    def _rank(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        rank = len(self.input_shape)
        kind = self.layer_type
        if kind in ("conv", "resnet50") and rank != 3:
            yield ("input_shape",), f"{kind} takes (height, width, channels), got {rank} dims"
        elif kind == "dense" and rank != 1:
            yield ("input_shape",), f"dense takes (features,), got {rank} dims"
        elif kind in SEQUENCE_TYPES and rank != 1:
            per_step = "(features,) per time step (the length is seq_len)"
            yield ("input_shape",), f"{kind} takes {per_step}, got {rank} dims"
        elif self.layer_type == "resnet50" and min(self.input_shape[:2]) < 32:
            yield ("input_shape",), "resnet50 needs at least 32x32 pixels"

    @rule("layer_type", "input_shape", "seq_len")
    def _sample_size(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        elements = math.prod(self.served_input_shape)
        if elements > MAX_SAMPLE_ELEMENTS:
            counted = (
                "seq_len x input_shape" if self.layer_type in SEQUENCE_TYPES else "input_shape"
            )
            limit = f"at most {MAX_SAMPLE_ELEMENTS:,} (256 MiB of float32)"
            yield ("input_shape",), f"{elements:,} elements per sample ({counted}); {limit}"

    @rule("layer_type", "width", "heads")
    def _heads_divide_width(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.layer_type == "attention" and self.width % (self.heads or 1):
            yield ("heads",), f"width {self.width} is not divisible by heads {self.heads}"

    @rule("layer_type", "kernel_size")
    def _odd_kernel(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.layer_type == "conv" and (self.kernel_size or 1) % 2 == 0:
            yield ("kernel_size",), f"must be odd for 'same' padding, got {self.kernel_size}"

    @rule("layer_type", "depth", "width")
    def _resnet50_is_fixed(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.layer_type == "resnet50" and (self.depth, self.width) != (50, 64):
            yield ("depth",), "resnet50 is fixed at depth 50, base width 64"

    @property
    def served_input_shape(self) -> tuple[int, ...]:
        """Per-sample shape of the tensor named `input` at the served interface."""
        if self.layer_type in SEQUENCE_TYPES:
            return (self.seq_len or 1, *self.input_shape)
        return self.input_shape

    @property
    def served_output_shape(self) -> tuple[int, ...]:
        return (self.num_outputs,)

    def to_dict(self) -> dict[str, Any]:
        """The canonical form: knobs that do not apply to this type are left out."""
        data = self.model_dump(mode="json")
        return {k: v for k, v in data.items() if v is not None}

    @property
    def id(self) -> str:
        """`<type>-d<depth>-w<width>-<6 hex of the content hash>`, stable across runs."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:6]
        if self.layer_type == "resnet50":
            return f"resnet50-{self.input_shape[0]}-{digest}"
        return f"{self.layer_type}-d{self.depth}-w{self.width}-{digest}"

    def replace(self, **changes: Any) -> ModelSpec:
        """A validated copy with some fields changed (knobs re-derived for a new type)."""
        data = self.to_dict()
        if "layer_type" in changes and changes["layer_type"] != self.layer_type:
            data = {k: v for k, v in data.items() if k not in _KNOBS}
        data.update(changes)
        return parse_spec(data)


def resnet50_spec(image_size: int = 224, num_outputs: int = 1000) -> ModelSpec:
    """The paper's cold-start reference: standard bottleneck ResNet-50, random weights."""
    return ModelSpec(
        layer_type="resnet50",
        depth=50,
        width=64,
        input_shape=(image_size, image_size, 3),
        num_outputs=num_outputs,
    )


def format_validation_error(err: ValidationError, where: str = "") -> str:
    """One line per problem: `<where>field: reason (got value)`."""
    lines = []
    for problem in err.errors():
        loc = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        got = problem.get("input")
        field = f"{loc}: " if loc and not message.startswith(f"{loc}:") else ""
        suffix = f" (got {got!r})" if loc and not isinstance(got, dict) else ""
        lines.append(f"{where}{field}{message}{suffix}")
    return "\n".join(lines)


def parse_spec(data: Any, where: str = "") -> ModelSpec:
    """Validate a mapping into a spec, turning pydantic's report into a `SpecError`."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}a model spec must be a mapping, got {type(data).__name__}")
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(err, where)) from None


def save_specs(specs: list[ModelSpec], path: Path) -> None:
    """Write specs as YAML (`.yaml`/`.yml`) or JSON (anything else), as a list."""
    payload = [spec.to_dict() for spec in specs]
    if path.suffix in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(payload, sort_keys=False))
    else:
        path.write_text(json.dumps(payload, indent=2) + "\n")


def load_specs(path: Path) -> list[ModelSpec]:
    """Read one spec or a list of specs from a YAML or JSON file.

    JSON is YAML, so one reader takes both: the bounded one every user file goes through
    (`servebench.common.textfile`), so bad bytes or an alias bomb give one line, not a traceback or
    a runaway parse.
    """
    try:
        raw = load_yaml(path)
    except TextFileError as err:
        raise SpecError(str(err)) from None
    items = raw if isinstance(raw, list) else [raw]
    return [parse_spec(item, where=f"{path}[{i}] ") for i, item in enumerate(items)]
