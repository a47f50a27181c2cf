"""The one seam between the load engine and every inference protocol.

The load engine sees only `InferenceClient`: it hands over a `Payload` built before the
run and gets back an `InferResult` or an `InferenceError` with a classified kind. Adding
a protocol therefore never touches the engine (the shape Locust's contrib clients have).
What a payload carries (a seeded random batch, a file's samples) is chosen above the
protocol (`clients.payloads`); a client only encodes the tensors it is given (`encode`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from time import perf_counter
from typing import Any, Protocol, runtime_checkable

import numpy as np

from servebench.common.errors import ServebenchError


class ErrorKind(StrEnum):
    """Why a request failed; the value is what lands in the `error_kind` record column."""

    TIMEOUT = "timeout"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    HTTP_STATUS = "http_status"
    GRPC_STATUS = "grpc_status"
    SERVER_ERROR = "server_error"
    BAD_RESPONSE = "bad_response"
    CLIENT_ERROR = "client_error"
    # An answer that differs from the expected output given with real input data
    # (`input_data`); judged by the load engine, since the transport cannot know it.
    WRONG_ANSWER = "wrong_answer"


class InferenceError(ServebenchError):
    """A failed request, already classified so the generator can count it and go on."""

    def __init__(self, kind: ErrorKind, detail: str = "", status: int | str | None = None):
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor at the served interface; -1 marks a dynamic dimension.

    `shape` excludes the batch dimension, as Triton's config does with max_batch_size > 0.
    """

    name: str
    dtype: str  # numpy dtype name, e.g. "float32"
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelSignature:
    """What a served model takes and returns, read from the server's metadata.

    `max_batch_size` is the largest batch the server accepts, 0 when it states none.
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    version: str = ""
    max_batch_size: int = 0


@dataclass(frozen=True)
class Payload:
    """A request body built once before the run and reused for every request.

    `inputs` keeps the arrays for checking; `encoded` is whatever the protocol sends on the
    wire (a JSON body, a protobuf message, tritonclient InferInput objects), built by the
    client's `encode` so that no encoding happens on the hot path. `expected` holds the
    outputs its answer must have, where real input data gave them (`input_data`).
    """

    batch_size: int
    inputs: Mapping[str, np.ndarray]
    encoded: Any = None
    request_bytes: int = 0
    expected: Mapping[str, np.ndarray] | None = None


@dataclass
class InferResult:
    """A successful answer; outputs are already checked for shape and dtype.

    `send_s` and `receive_s` split the request's time the way perf_analyzer's client
    does, so that network+server time is what is left of the latency: `send_s` from the
    call's start until the request's last byte was handed to the socket (pool wait and
    headers included), `receive_s` from the answer's arrival (HTTP: its headers were read;
    gRPC: its whole message was read) until it was read, decoded and checked. NaN where
    the transport cannot tell (sends on grpcio: grpc.aio has no hook for the moment a
    request leaves; the lean gRPC transport times them).
    """

    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)
    request_bytes: int = 0
    response_bytes: int = 0
    send_s: float = math.nan
    receive_s: float = math.nan

    @classmethod
    def timed(
        cls,
        start: float,
        sent_at: float,
        arrived: float,
        request_bytes: int,
        response_bytes: int,
        outputs: Mapping[str, np.ndarray] | None = None,
    ) -> InferResult:
        """An answer timed by a transport that says when the request's last byte left
        (`sent_at`, NaN where it cannot tell) and when the answer arrived (`arrived`), for a
        call that started at `start` (all `perf_counter`). Made once the answer is decoded and
        checked, which is where `receive_s` ends: one definition of the split for every
        client."""
        return cls(
            outputs if outputs is not None else {},
            request_bytes,
            response_bytes,
            sent_at - start,
            perf_counter() - arrived,
        )


@runtime_checkable
class InferenceClient(Protocol):
    """Something that can infer: connect, read the signature, encode a batch, infer it, close."""

    async def connect(self) -> None: ...

    async def signature(self) -> ModelSignature: ...

    def encode(self, batch_size: int, inputs: Mapping[str, np.ndarray]) -> Payload:
        """The request carrying `inputs` (the signature's input tensors, `batch_size` samples
        each), encoded once before the run for every send; `clients.payloads` chooses them."""
        ...

    async def infer(self, payload: Payload) -> InferResult:
        """Send one request; raise `InferenceError` (never anything else) on failure."""
        ...

    async def close(self) -> None: ...


def random_inputs(
    specs: tuple[TensorSpec, ...], batch_size: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random data of the right dtype and shape; dynamic dims become 1."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = (batch_size, *_filled(spec.shape))
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            # Drawn in the input's own dtype: an int8 request is not built as int64 first
            # (8x its size, ~2 GiB at the request-size limit).
            arrays[spec.name] = rng.integers(0, 100, size=shape, dtype=dtype)
        elif dtype.kind == "b":
            arrays[spec.name] = rng.integers(0, 2, size=shape, dtype=np.uint8).astype(bool)
        else:
            raise ValueError(f"input {spec.name!r}: unsupported dtype {spec.dtype!r}")
    return arrays


def request_bytes(specs: Iterable[TensorSpec], batch_size: int) -> int:
    """The bytes of input tensors in a request of `batch_size` samples, a dynamic dimension
    counted as 1 (as `random_inputs` fills it): the size a scenario's
    `limits.max_request_mb` bounds, which `scenario validate` checks for the models it
    knows and `servebench load` for the signature a server reports, before either builds
    a payload (a model that declares 1e9 elements would otherwise be allocated)."""
    per_sample = sum(
        math.prod(_filled(spec.shape)) * np.dtype(spec.dtype).itemsize for spec in specs
    )
    return per_sample * batch_size


def _filled(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d if d > 0 else 1 for d in shape)


def check_batch_size(signature: ModelSignature, batch_size: int) -> None:
    """Refuse, before a run starts, a batch the model cannot take."""
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if 0 < signature.max_batch_size < batch_size:
        raise ValueError(
            f"batch_size: {batch_size} exceeds model {signature.name!r}'s "
            f"max_batch_size {signature.max_batch_size}"
        )


def check_outputs(
    outputs: Mapping[str, np.ndarray], specs: tuple[TensorSpec, ...], batch_size: int
) -> None:
    """Raise BAD_RESPONSE when an answer has the wrong outputs, shape or dtype.

    A wrong answer counted as a success would make a broken server look fast.
    """
    for spec in specs:
        if spec.name not in outputs:
            raise InferenceError(ErrorKind.BAD_RESPONSE, f"output {spec.name!r} missing")
        array = outputs[spec.name]
        expected = (batch_size, *spec.shape)
        if len(array.shape) != len(expected) or any(
            e > 0 and a != e for a, e in zip(array.shape, expected, strict=True)
        ):
            raise InferenceError(
                ErrorKind.BAD_RESPONSE,
                f"output {spec.name!r} has shape {tuple(array.shape)}, expected {expected}",
            )
        if np.dtype(array.dtype) != np.dtype(spec.dtype):
            raise InferenceError(
                ErrorKind.BAD_RESPONSE,
                f"output {spec.name!r} has dtype {array.dtype}, expected {spec.dtype}",
            )
