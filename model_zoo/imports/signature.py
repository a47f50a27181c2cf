"""A model's interface as its file states it, and the shapes the user fills in for it.

An imported model is known only by what its file says: input and output names, dtypes
and shapes, some dimensions of which may be dynamic. Everything after the import (the
Triton config, parity's random inputs, later the load generator's requests) needs concrete
shapes, so the dynamic ones are named here, with the input and the dimension, until the
user gives them (`--input-shape NAME=DIMS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model_zoo.errors import ModelZooError
from servebench.common.limits import MAX_SAMPLE_ELEMENTS
from servebench.common.userfile import UserFileError

DYNAMIC = -1  # a dimension the file leaves open (ONNX dim_param, TF None, Triton -1)


class ModelImportError(ModelZooError, ValueError):
    """A model file that cannot be read, converted or checked; the message names it."""


class Unconvertible(ModelImportError):
    """One direction (a format) this source cannot be converted to; the other may still."""


@dataclass(frozen=True)
class Tensor:
    """One input or output: `dims` are the whole shape, the batch axis included."""

    name: str
    dtype: str  # numpy's name: float32, int64, ...
    dims: tuple[int, ...]

    @property
    def sample_dims(self) -> tuple[int, ...]:
        return self.dims[1:]


@dataclass(frozen=True)
class Signature:
    """What the file says; `batched`: every tensor's first axis is dynamic, the batch."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def batched(self) -> bool:
        tensors = (*self.inputs, *self.outputs)
        return bool(tensors) and all(t.dims and t.dims[0] == DYNAMIC for t in tensors)

    def served_dims(self, tensor: Tensor) -> tuple[int, ...]:
        """The dims a Triton config lists: per sample when batched, else the whole shape."""
        return tensor.sample_dims if self.batched else tensor.dims


def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`NAME=DIMS` items (DIMS like 3x224x224: one sample, no batch axis) into a mapping."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        try:
            dims = tuple(int(part) for part in text.lower().split("x"))
        except ValueError:
            dims = ()
        if not sep or not name or not dims or min(dims) < 1:
            raise ModelImportError(
                f"--input-shape: expected NAME=DIMS with positive dims like input=3x224x224, "
                f"got {item!r}"
            )
        if name in shapes:
            raise ModelImportError(f"--input-shape: {name!r} is given twice")
        shapes[name] = check_sample_shape(f"--input-shape {name}", dims)
    return shapes


def check_sample_shape(where: str, dims: Sequence[int]) -> tuple[int, ...]:
    """`dims` (one sample of an input) if its elements are within `MAX_SAMPLE_ELEMENTS`,
    the bound every served input has; a `ShapeError` naming `where` otherwise. Checked
    before any shape reaches a library: torch and numpy turn 10^20 elements into a C++
    stack or a failed allocation, not a sentence."""
    elements = math.prod(dims)
    if elements > MAX_SAMPLE_ELEMENTS:
        shown = "x".join(str(d) for d in dims)
        raise ShapeError(
            f"{where}: {shown} is {elements:,} elements per sample; the most is "
            f"{MAX_SAMPLE_ELEMENTS:,} (2^26, docs/scenario-limits.md)"
        )
    return tuple(dims)


def check_sample_shapes(
    given: Mapping[str, Sequence[int]], option: str = "--input-shape"
) -> dict[str, tuple[int, ...]]:
    """Every shape a user gives (`option`: the command's flag or a scenario's field)
    within `check_sample_shape`'s bound."""
    return {name: check_sample_shape(f"{option} {name}", dims) for name, dims in given.items()}


class ShapeError(ModelImportError):
    """The shapes given for a model do not fit its inputs, or a dynamic one is not given."""


def resolve_shapes(
    signature: Signature,
    given: Mapping[str, tuple[int, ...]],
    source: str,
    option: str = "--input-shape",
) -> dict[str, tuple[int, ...]]:
    """Each input's sample shape: the file's, with the user's dims where it has dynamic
    ones (or none at all, as a torch file). Unknown names and unmatched dims are refused
    (a `ShapeError` naming `option`, where the user gives shapes: the command's flag or a
    scenario's field)."""
    names = [t.name for t in signature.inputs]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ShapeError(
            f"{option}: {source} has no input {unknown[0]!r} (inputs: {', '.join(names)})"
        )
    shapes = {}
    for tensor in signature.inputs:
        dims = signature.served_dims(tensor)
        if tensor.name in given:
            want = given[tensor.name]
            if len(want) != len(dims):
                raise ShapeError(
                    f"{option}: {source} input {tensor.name!r} has {len(dims)} dims per "
                    f"sample {_show(dims)}, got {len(want)}"
                )
            for index, (have, new) in enumerate(zip(dims, want, strict=True)):
                if have != DYNAMIC and have != new:
                    raise ShapeError(
                        f"{option}: {source} input {tensor.name!r} dim {index} is "
                        f"{have} in the file, got {new}"
                    )
            shapes[tensor.name] = check_sample_shape(f"{option} {tensor.name}", want)
            continue
        for index, have in enumerate(dims):
            if have == DYNAMIC:
                raise ShapeError(
                    f"{source}: input {tensor.name!r} dim {index} of {_show(dims)} is dynamic; "
                    f"give it with {ask_for_shape(option, tensor.name)}"
                )
        shapes[tensor.name] = check_sample_shape(f"{source}: input {tensor.name!r}", dims)
    return shapes


def ask_for_shape(option: str, name: str) -> str:
    """How the user writes one input's shape: `--input-shape x=DIMS` on the command line,
    `input_shapes: {x: [DIMS]}` in a scenario."""
    return f"{option} {name}=DIMS" if option.startswith("--") else f"{option}: {{{name}: [DIMS]}}"


def random_feeds(
    signature: Signature, shapes: Mapping[str, tuple[int, ...]], batch: int = 2, seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded inputs for parity: normal floats, small non-negative integers (indices)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for tensor in signature.inputs:
        shape = (batch, *shapes[tensor.name]) if signature.batched else shapes[tensor.name]
        dtype = np.dtype(tensor.dtype)
        if dtype.kind == "f":
            feeds[tensor.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[tensor.name] = rng.integers(0, 2, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[tensor.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise ModelImportError(f"input {tensor.name!r}: dtype {tensor.dtype} is not numeric")
    return feeds


def first_line(err: BaseException) -> str:
    """An exception's first sentence: libraries' load errors run to pages of context."""
    text = str(err).strip()
    return text.splitlines()[0].split(". ")[0] if text else type(err).__name__


@contextmanager
def refused_as(path: Path, what: str) -> Iterator[None]:
    """Whatever a library raises while reading `path` becomes one ModelImportError line,
    "PATH: not WHAT (the first sentence of why)": every reader refuses a damaged or foreign
    file in the same words. The libraries raise many unrelated classes (DecodeError,
    OpError, BadZipFile, RuntimeError from a zip reader), hence the broad except."""
    try:
        yield
    except ModelImportError:
        raise
    except UserFileError as err:  # the user-file checks' own line, already naming the file
        raise ModelImportError(str(err)) from None
    except Exception as err:
        raise ModelImportError(f"{path}: not {what} ({first_line(err)})") from None


@contextmanager
def user_file_refused() -> Iterator[None]:
    """A user-file check's refusal (`servebench.common.userfile`) as a ModelImportError,
    its line unchanged; anything else (a full disk) passes as it is."""
    try:
        yield
    except UserFileError as err:
        raise ModelImportError(str(err)) from None


def _show(dims: Sequence[int]) -> str:
    return "(" + ", ".join("?" if d == DYNAMIC else str(d) for d in dims) + ")"
