"""What a generated model is: a small, validated, content-addressed description.

A spec is the unit every other part of servebench talks about (export, serve, count,
report), so it is frozen, hashable and has an id derived from its content: two people who
write the same spec get the same id, and results stay joinable across runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from model_zoo.textfile import TextFileError, load_yaml

LayerType = Literal["dense", "conv", "lstm", "gru", "attention", "resnet50"]
MUTABLE_LAYER_TYPES: tuple[str, ...] = ("dense", "conv", "lstm", "gru", "attention")
SEQUENCE_TYPES: frozenset[str] = frozenset({"lstm", "gru", "attention"})

INPUT_NAME = "input"
OUTPUT_NAME = "output"

# Per-type knobs and their defaults; a knob given to a type that has none is an error, so a
# typo like `heads: 8` on a conv model is not silently ignored.
_KNOB_DEFAULTS: dict[str, dict[str, Any]] = {
    "dense": {},
    "conv": {"kernel_size": 3, "residual": False},
    "lstm": {"seq_len": 16},
    "gru": {"seq_len": 16},
    "attention": {"seq_len": 16, "heads": 4},
    "resnet50": {},
}
_KNOBS = ("kernel_size", "residual", "heads", "seq_len")


class SpecError(ValueError):
    """A spec that cannot describe a model; the message names the field and the reason."""


class ModelSpec(BaseModel):
    """One model of a family.

    `input_shape` is per sample, without the batch dimension: `(features,)` for dense and
    for each time step of lstm/gru/attention (whose sequence length is `seq_len`), and
    `(height, width, channels)` — channels-last, as TF Serving clients send images — for
    conv and resnet50.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    layer_type: LayerType
    depth: int = Field(
        ge=1, description="hidden layers (dense, recurrent, attention) or conv layers"
    )
    width: int = Field(ge=1, description="units, channels or model dimension")
    input_shape: tuple[int, ...]
    num_outputs: int = Field(default=10, ge=1)
    dtype: Literal["float32"] = "float32"
    kernel_size: int | None = Field(default=None, ge=1)
    residual: bool | None = None
    heads: int | None = Field(default=None, ge=1)
    seq_len: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _fill_knobs(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("layer_type") not in _KNOB_DEFAULTS:
            return data
        layer_type = data["layer_type"]
        defaults = _KNOB_DEFAULTS[layer_type]
        filled = dict(data)
        for knob in _KNOBS:
            if knob in defaults:
                if filled.get(knob) is None:
                    filled[knob] = defaults[knob]
            elif filled.get(knob) is not None:
                raise ValueError(f"{knob}: not a setting of {layer_type} models")
        return filled

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        if any(d < 1 for d in self.input_shape):
            raise ValueError(f"input_shape: every dimension must be >= 1, got {self.input_shape}")
        rank = len(self.input_shape)
        if self.layer_type in ("conv", "resnet50") and rank != 3:
            raise ValueError(
                f"input_shape: {self.layer_type} takes (height, width, channels), "
                f"got {rank} dims {self.input_shape}"
            )
        if self.layer_type == "dense" and rank != 1:
            raise ValueError(f"input_shape: dense takes (features,), got {rank} dims")
        if self.layer_type in SEQUENCE_TYPES and rank != 1:
            raise ValueError(
                f"input_shape: {self.layer_type} takes (features,) per time step "
                f"(the length is seq_len), got {rank} dims {self.input_shape}"
            )
        if self.layer_type == "attention" and self.width % (self.heads or 1):
            raise ValueError(f"heads: width {self.width} is not divisible by heads {self.heads}")
        if self.layer_type == "conv" and (self.kernel_size or 1) % 2 == 0:
            raise ValueError(f"kernel_size: must be odd for 'same' padding, got {self.kernel_size}")
        if self.layer_type == "resnet50":
            if (self.depth, self.width) != (50, 64):
                raise ValueError("depth/width: resnet50 is fixed at depth 50, base width 64")
            if min(self.input_shape[:2]) < 32:
                raise ValueError("input_shape: resnet50 needs at least 32x32 pixels")
        return self

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
    (`model_zoo.textfile`), so bad bytes or an alias bomb give one line, not a traceback or
    a runaway parse.
    """
    try:
        raw = load_yaml(path)
    except TextFileError as err:
        raise SpecError(str(err)) from None
    items = raw if isinstance(raw, list) else [raw]
    return [parse_spec(item, where=f"{path}[{i}] ") for i, item in enumerate(items)]
