"""Real input data: a user's samples, read from a file and matched to a model's signature.

A load normally sends one seeded random batch (`base.random_inputs`); with real data
(`servebench load --input-data FILE`) it sends the file's samples instead, because the
speed of many models depends on the values they are given. Two formats are read:

- `.npz` (numpy's `savez`): one array per input, keyed by the input's name, the first axis
  the samples; optional expected outputs keyed `expected/<output name>`, with one entry per
  sample too.
- perf_analyzer's `--input-data` JSON (any other file name): `{"data": [step, ...]}`, each
  step an object giving every input as a flat row-major list of numbers,
  `{"content": [...], "shape": [...]}`, `{"b64": "..."}` (the little-endian bytes of the
  model's dtype) or `{"content": {"b64": "..."}, "shape": [...]}`; an optional
  `"validation_data"` list, aligned with `"data"`, gives the expected outputs the same way.
  perf_analyzer's sequence streams (a list of lists of steps) and STRING/BYTES tensors are
  not supported: servebench sends numeric tensors in batches.

A sample is one batch element: its shape is the signature's per-sample shape (the batch
axis aside; a -1 dimension takes any size, the same for every sample, since samples are
batched together). `InputData.match` refuses a file that does not fit the model before
anything is sent: a name the model lacks, an input the file lacks, another dtype, another
shape; each is one line naming the file, the tensor and what is wrong.

A request of batch b takes the next b samples, wrapping round at the end, so a run goes
through the file in order; a cycle has N / gcd(N, b) distinct requests, each encoded once
before the run (`payloads.data_payloads`), as the random batch is.
Answers are compared with the expected outputs as `numpy.allclose` does (`RTOL`, `ATOL`:
float32 results of one model computed by two runtimes differ by about 1e-6 relative;
integers and bools exactly), and a mismatch is an error of kind `wrong_answer`.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servebench.clients.base import ModelSignature, TensorSpec
from servebench.common.errors import ServebenchError
from servebench.common.limits import (
    MAX_INPUT_DATA_BYTES,
    MAX_INPUT_JSON_BYTES,
    MAX_REQUEST_MB,
    MAX_SAMPLE_ELEMENTS,
)
from servebench.common.textfile import read_json_object
from servebench.common.userfile import MIB, ByteLimit, NpzFile, UserFileError, check_file

#: The tolerance an answer is compared with (`numpy.allclose`).
RTOL = 1e-5
ATOL = 1e-4
#: The prefix of an expected output's key in an `.npz` file.
EXPECTED_PREFIX = "expected/"
#: Most bytes of pre-encoded request tensors one cycle may hold; more would be a payload
#: cache larger than most machines want beside the server (and minutes of encoding). The
#: same bound holds a file's samples (`servebench.common.limits`).
MAX_CYCLE_BYTES = MAX_INPUT_DATA_BYTES
_DATA_LIMIT = ByteLimit(MAX_INPUT_DATA_BYTES, "the input-data maximum, docs/scenario-limits.md")
_JSON_LIMIT = ByteLimit(
    MAX_INPUT_JSON_BYTES, "the JSON input-data maximum, docs/scenario-limits.md"
)


class InputDataError(ServebenchError, ValueError):
    """An input-data file that cannot be read or does not fit the model; one line naming
    the file and the tensor."""


@dataclass(frozen=True, slots=True)
class _Step:
    """One tensor of one JSON step, as written: numbers or bytes, and a shape if given."""

    numbers: np.ndarray | None
    raw: bytes | None
    shape: tuple[int, ...] | None


# A tensor's samples: an array with the samples on its first axis (.npz), or one JSON step each.
_Column = np.ndarray | list[_Step]


@dataclass(frozen=True, eq=False)
class Batch:
    """The tensors of one request of a cycle, and the outputs its answer must have."""

    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] | None


@dataclass(frozen=True, eq=False)
class InputData:
    """The samples of a file, read but not yet matched to a model (`match`)."""

    source: str
    count: int
    inputs: Mapping[str, _Column]
    expected: Mapping[str, _Column]

    def match(self, signature: ModelSignature) -> Samples:
        """The samples as arrays of the model's dtypes; InputDataError where they do not fit."""
        _same_names(self.source, "input", set(self.inputs), signature.inputs, signature.name)
        if self.expected:
            _same_names(
                self.source, "output", set(self.expected), signature.outputs, signature.name
            )
        inputs = {
            spec.name: _array(self.source, "input", spec, self.inputs[spec.name])
            for spec in signature.inputs
        }
        expected = {
            spec.name: _array(self.source, "expected output", spec, self.expected[spec.name])
            for spec in signature.outputs
            if spec.name in self.expected
        }
        return Samples(self.source, self.count, inputs, expected or None)


@dataclass(frozen=True, eq=False)
class Samples:
    """A file's samples in the model's dtypes and shapes, ready to batch."""

    source: str
    count: int
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] | None

    def cycle(self, batch_size: int) -> int:
        """How many distinct requests one cycle through the samples makes; InputDataError
        where encoding them all before the run would be too much (a check that encodes
        nothing, for the pre-run check)."""
        cycle = self.count // math.gcd(self.count, batch_size)
        per_sample = sum(a.nbytes for a in self.inputs.values()) // self.count
        total = cycle * batch_size * per_sample
        if total > MAX_CYCLE_BYTES:
            raise InputDataError(
                f"{self.source}: {self.count} samples in batches of {batch_size} make {cycle} "
                f"distinct requests ({total / 2**30:.1f} GiB) to encode before the run, over "
                f"{MAX_CYCLE_BYTES / 2**30:g} GiB; use a batch size that divides {self.count}, "
                "or fewer samples"
            )
        return cycle

    def batches(self, batch_size: int) -> list[Batch]:
        """One cycle of requests: request k takes samples k*b .. k*b+b-1, modulo N."""
        batches = []
        for k in range(self.cycle(batch_size)):
            rows = (np.arange(batch_size) + k * batch_size) % self.count
            inputs = {name: array[rows] for name, array in self.inputs.items()}
            expected = (
                {name: array[rows] for name, array in self.expected.items()}
                if self.expected is not None
                else None
            )
            batches.append(Batch(inputs, expected))
        return batches


def answer_matches(outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> bool:
    """Whether every expected output is in the answer, of its shape and values: floats
    within `numpy.allclose`'s bound |got - want| <= ATOL + RTOL * |want| (NaN never
    matches), integers and bools exactly.

    Runs on the event loop once per answer, so the bound is written out: `np.allclose`
    costs about 100 µs for a 4x4 answer here, this about a quarter of it.
    """
    for name, want in expected.items():
        got = outputs.get(name)
        if got is None or got.shape != want.shape:
            return False
        if want.dtype.kind != "f":
            if not np.array_equal(got, want):
                return False
        elif not (np.abs(got - want) <= ATOL + RTOL * np.abs(want)).all():
            return False
    return True


def read_input_data(path: str | Path, max_request_mb: float = MAX_REQUEST_MB) -> InputData:
    """The samples in an `.npz` or perf_analyzer JSON file; InputDataError (or the text
    reader's `TextFileError`) naming the file and what is wrong.

    Sizes are checked before anything is read (`servebench.common.userfile`): an .npz's
    arrays, as their headers declare them, hold at most `MAX_INPUT_DATA_BYTES`, one
    sample at most `MAX_SAMPLE_ELEMENTS` per array and `max_request_mb` in all (one
    sample is the smallest request: a scenario's `limits.max_request_mb`); a JSON file has
    at most `MAX_INPUT_JSON_BYTES`.
    """
    path = Path(path)
    try:
        if path.suffix.lower() == ".npz":
            return _read_npz(path, ByteLimit(int(max_request_mb * MIB), "limits.max_request_mb"))
        check_file(path, _JSON_LIMIT, "a perf_analyzer JSON file")
    except UserFileError as err:
        raise InputDataError(str(err)) from None
    return _read_json(path)


# -- .npz --------------------------------------------------------------------------------


def _read_npz(path: Path, request: ByteLimit) -> InputData:
    """The arrays of an .npz, each read only once every header passed the checks."""
    with NpzFile(path, _DATA_LIMIT) as npz:
        headers = npz.headers
        for key, header in headers.items():
            if not header.shape:
                raise InputDataError(
                    f"{path}: array {key!r} is a scalar; the first axis must be the samples"
                )
            elements = math.prod(header.shape[1:])
            if elements > MAX_SAMPLE_ELEMENTS:
                raise InputDataError(
                    f"{path}: array {key!r} has {elements:,} elements per sample "
                    f"{list(header.shape[1:])}; the most is {MAX_SAMPLE_ELEMENTS:,} "
                    "(docs/scenario-limits.md)"
                )
        inputs_only = [h for k, h in headers.items() if not k.startswith(EXPECTED_PREFIX)]
        if not inputs_only:
            raise InputDataError(f"{path}: no input arrays (keys are input names)")
        counts = {key: header.shape[0] for key, header in headers.items()}
        count = next(iter(counts.values()))
        if count == 0 or any(n != count for n in counts.values()):
            sizes = ", ".join(f"{key} {n}" for key, n in counts.items())
            raise InputDataError(
                f"{path}: every array needs the same number of samples (> 0) on its first "
                f"axis; found {sizes}"
            )
        request.check(path, sum(h.nbytes for h in inputs_only) // count, "has samples of")
        arrays = {key: npz.read(key) for key in headers}
    inputs: dict[str, _Column] = {}
    expected: dict[str, _Column] = {}
    for key, array in arrays.items():
        if key.startswith(EXPECTED_PREFIX):
            expected[key.removeprefix(EXPECTED_PREFIX)] = array
        else:
            inputs[key] = array
    return InputData(str(path), count, inputs, expected)


# -- perf_analyzer JSON --------------------------------------------------------------------


def _read_json(path: Path) -> InputData:
    document = read_json_object(path)
    steps = document.get("data")
    if not isinstance(steps, list) or not steps:
        raise InputDataError(
            f'{path}: needs a non-empty "data" list of steps (perf_analyzer format)'
        )
    inputs = _steps(path, "data", steps)
    expected: dict[str, _Column] = {}
    validation = document.get("validation_data")
    if validation is not None:
        if not isinstance(validation, list) or len(validation) != len(steps):
            raise InputDataError(
                f'{path}: "validation_data" must be a list with one step per "data" step '
                f"({len(steps)})"
            )
        expected = _steps(path, "validation_data", validation)
    return InputData(str(path), len(steps), inputs, expected)


def _steps(path: Path, field: str, steps: list[Any]) -> dict[str, _Column]:
    columns: dict[str, list[_Step]] = {}
    for i, step in enumerate(steps):
        where = f"{path}: {field}[{i}]"
        if isinstance(step, list):
            raise InputDataError(f"{where}: sequence streams (a list of steps) are not supported")
        if not isinstance(step, dict) or not step:
            raise InputDataError(f"{where}: a step is an object naming each tensor")
        if i and set(step) != set(columns):
            raise InputDataError(
                f"{where}: names {sorted(step)}, but {field}[0] names {sorted(columns)}"
            )
        for name, value in step.items():
            columns.setdefault(name, []).append(_step(f"{where} {name!r}", value))
    return dict(columns)


def _step(where: str, value: Any) -> _Step:
    shape = None
    if isinstance(value, dict) and "content" in value:
        shape = _shape(where, value.get("shape"))
        value = value["content"]
    if isinstance(value, dict):
        text = value.get("b64")
        if not isinstance(text, str) or len(value) != 1:
            raise InputDataError(f'{where}: an object is {{"b64": text}} or {{"content": ...}}')
        try:
            return _Step(None, base64.b64decode(text, validate=True), shape)
        except (binascii.Error, ValueError) as exc:
            raise InputDataError(f"{where}: not base64 ({exc})") from None
    if not isinstance(value, list):
        raise InputDataError(f"{where}: expected a list of numbers, found {type(value).__name__}")
    try:
        numbers = np.asarray(value)
    except ValueError as exc:  # ragged nesting
        raise InputDataError(f"{where}: not a flat list of numbers ({exc})") from None
    if numbers.dtype.kind not in "biuf":
        raise InputDataError(f"{where}: not a list of numbers")
    return _Step(numbers.ravel(), None, shape)


def _shape(where: str, shape: Any) -> tuple[int, ...] | None:
    if shape is None:
        return None
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InputDataError(f'{where}: "shape" must be a list of sizes >= 0, got {shape!r}')
    return tuple(shape)


# -- matching ------------------------------------------------------------------------------


def _same_names(
    source: str, role: str, names: set[str], specs: tuple[TensorSpec, ...], model: str
) -> None:
    known = {spec.name for spec in specs}
    listed = ", ".join(sorted(known))
    unknown = sorted(names - known)
    if unknown:
        raise InputDataError(
            f"{source}: {role} {unknown[0]!r} is not an {role} of model {model!r} "
            f"(its {role}s: {listed})"
        )
    missing = sorted(known - names)
    if role == "input" and missing:
        raise InputDataError(f"{source}: input {missing[0]!r} of model {model!r} is missing")


def _array(source: str, role: str, spec: TensorSpec, column: _Column) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    where = f"{source}: {role} {spec.name!r}"
    if isinstance(column, np.ndarray):
        if column.dtype != dtype:
            raise InputDataError(f"{where} has dtype {column.dtype}, the model's is {dtype}")
        _check_shape(where, column.shape[1:], spec)
        return column
    field = "data" if role == "input" else "validation_data"
    arrays = [
        _step_array(f"{source}: {field}[{i}] {role} {spec.name!r}", step, spec, dtype)
        for i, step in enumerate(column)
    ]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise InputDataError(
            f"{where}: steps have shapes {sorted(shapes)}; samples batched together need one"
        )
    return np.stack(arrays)


def _step_array(where: str, step: _Step, spec: TensorSpec, dtype: np.dtype) -> np.ndarray:
    shape = step.shape
    if shape is None:
        if any(d < 0 for d in spec.shape):
            raise InputDataError(
                f"{where}: the model's shape {list(spec.shape)} has dynamic sizes; give "
                '{"content": ..., "shape": [...]}'
            )
        shape = spec.shape
    if step.raw is not None:
        if len(step.raw) % dtype.itemsize:
            raise InputDataError(
                f"{where}: {len(step.raw)} bytes are not whole {dtype} values "
                f"({dtype.itemsize} bytes each)"
            )
        flat = np.frombuffer(step.raw, dtype.newbyteorder("<")).astype(dtype)
    else:
        assert step.numbers is not None
        flat = _cast(where, step.numbers, dtype)
    if flat.size != math.prod(shape):
        raise InputDataError(
            f"{where}: {flat.size} values, but shape {list(shape)} holds {math.prod(shape)}"
        )
    _check_shape(where, tuple(shape), spec)
    return flat.reshape(shape)


def _cast(where: str, numbers: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """JSON numbers as the model's dtype, refusing what would change their values."""
    if dtype.kind == "b":
        if numbers.dtype.kind != "b":
            raise InputDataError(f"{where}: the model takes bool; give true/false")
        return numbers
    if dtype.kind in "iu" and numbers.dtype.kind == "f":
        raise InputDataError(f"{where}: has fractional numbers, the model takes {dtype}")
    cast = numbers.astype(dtype)
    if dtype.kind in "iu" and not np.array_equal(cast, numbers):
        raise InputDataError(f"{where}: has numbers outside {dtype}'s range")
    return cast


def _check_shape(where: str, shape: tuple[int, ...], spec: TensorSpec) -> None:
    """A sample's shape against the signature's per-sample shape (-1: any size)."""
    if len(shape) != len(spec.shape) or any(
        want >= 0 and got != want for got, want in zip(shape, spec.shape, strict=True)
    ):
        raise InputDataError(
            f"{where} has per-sample shape {list(shape)}, the model's is {list(spec.shape)}"
        )
