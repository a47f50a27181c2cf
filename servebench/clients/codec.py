"""The protocol-neutral core every transport shares: requests and answers, no I/O.

A codec knows one protocol's wire format: which URL or gRPC method a request goes to, how
a batch becomes request bytes, how answer bytes become output arrays (checked against the
signature) and which round trips read a model's signature. It never opens a socket. Two
edges do the I/O with the same codec (the httpx / h11 shape):

- the async clients (`HttpModelClient`: the lean HTTP/1.1 transport or aiohttp;
  `GrpcModelClient`: the lean HTTP/2 transport or grpc.aio), which `servebench load` and the scenario runner drive;
- the Locust transports (`servebench.locust.transport`: geventhttpclient and blocking
  grpcio under gevent).

So a request is built and an answer judged one way whichever edge sent it, and a new
protocol is a codec and a registry entry (`registry`), with no edge to change.

Reading a signature takes several round trips in an order that matters (metadata first:
for an unknown model its error carries the server's message). A codec writes them as a
generator that yields each request and is sent each answer (`read_signature`); an edge
runs it with its own I/O (`drive`, `drive_async`). Errors are raised inside the codec as
the same classified `InferenceError`s whichever edge fed it the answer.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
from yarl import URL

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    ModelSignature,
    Payload,
    TensorSpec,
    check_outputs,
)
from servebench.clients.endpoints import grpc_target, http_base, path_segment
from servebench.clients.errors import http_status

Request = TypeVar("Request")
Answer = TypeVar("Answer")
Result = TypeVar("Result")


@dataclass(frozen=True, slots=True)
class HttpBody:
    """An encoded HTTP request body and the headers that say what it is."""

    data: bytes
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """An HTTP answer as read off the wire; `headers` look up case-insensitively (both HTTP
    libraries the edges use give such a mapping)."""

    status: int
    body: bytes
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class GrpcCall:
    """One unary call: method path, serialized request, and the answer's message class."""

    path: str
    request: bytes
    response: Any


def drive(
    exchange: Generator[Request, Answer, Result], send: Callable[[Request], Answer]
) -> Result:
    """Run a codec's round trips with a blocking `send` (request → answer)."""
    request = next(exchange)
    while True:
        try:
            request = exchange.send(send(request))
        except StopIteration as done:
            return done.value


async def drive_async(
    exchange: Generator[Request, Answer, Result], send: Callable[[Request], Awaitable[Answer]]
) -> Result:
    """Run a codec's round trips with an async `send` (request → answer)."""
    request = next(exchange)
    while True:
        answer = await send(request)
        try:
            request = exchange.send(answer)
        except StopIteration as done:
            return done.value


def json_object(body: bytes, where: str) -> dict[str, Any]:
    """An answer body that must be one JSON object; BAD_RESPONSE naming `where` otherwise."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: not a JSON object")
    return document


class ModelCodec(ABC):
    """What every model protocol's codec has: a model name and version, checked up front.

    `server` names the serving system in messages; `integer_versions` refuses non-numeric
    versions up front (TF Serving's are integers, Triton's strings).
    """

    server: ClassVar[str]
    integer_versions: ClassVar[bool] = False

    def __init__(self, model: str, version: str | None) -> None:
        if not model:
            raise ValueError(f"model: a {self.server} model name is required")
        if self.integer_versions and version and not str(version).isdigit():
            raise ValueError(f"version: {self.server} versions are integers, got {version!r}")
        self.model = model
        self.version = str(version) if version else ""

    @classmethod  # noqa: B027 (a hook: most codecs import nothing late)
    def load(cls) -> None:
        """Import now what the codec would import on first use (nothing, unless overridden).

        Lets a caller pay a slow import (TensorFlow's protos) before measuring starts.
        """

    @abstractmethod
    def read_signature(self) -> Generator[Any, Any, ModelSignature]:
        """Yield each control request, receive its answer; return the signature."""

    def encode(
        self, signature: ModelSignature, batch_size: int, inputs: Mapping[str, np.ndarray]
    ) -> Payload:
        """The request carrying `inputs`, encoded once for every send. Which tensors a load
        sends is chosen the same way for every protocol (`clients.payloads`: a seeded random
        batch or a file's samples); only this encoding is the protocol's."""
        encoded = self._encode(signature, inputs)
        return Payload(
            batch_size=batch_size,
            inputs=inputs,
            encoded=encoded,
            request_bytes=self._request_bytes(encoded),
        )

    @abstractmethod
    def _encode(self, signature: ModelSignature, inputs: Mapping[str, np.ndarray]) -> Any:
        """The request holding `inputs` as the edges send it (`Payload.encoded`)."""

    @staticmethod
    @abstractmethod
    def _request_bytes(encoded: Any) -> int:
        """What `Payload.request_bytes` counts of an encoded request."""


class HttpCodec(ModelCodec):
    """A protocol over HTTP/1.1: control reads are GETs, an inference is one POST.

    `read_signature` yields each URL to GET and is sent its `HttpAnswer`. `probe_path`
    (with `{model}` for the model name) is the cheap GET `sniff` asks an unknown address,
    and `answers_probe` says whether its JSON answer is this protocol's.
    """

    probe_path: ClassVar[str]

    def __init__(self, url: str, model: str, version: str | None) -> None:
        super().__init__(model, version)
        self.base = http_base(url)

    def _model_path(self, api: str) -> str:
        """`<base>/<api>/models/<model>[/versions/<version>]`, where both HTTP APIs (KServe
        v2, TF Serving v1) put a model's endpoints."""
        path = f"{self.base}/{api}/models/{path_segment(self.model)}"
        return f"{path}/versions/{path_segment(self.version)}" if self.version else path

    @property
    @abstractmethod
    def infer_url(self) -> URL:
        """Where a payload is POSTed."""

    @staticmethod
    def _request_bytes(encoded: HttpBody) -> int:
        """The body's size, without HTTP headers."""
        return len(encoded.data)

    @abstractmethod
    def _read(self, body: bytes, headers: Mapping[str, str], specs: tuple[TensorSpec, ...]) -> Any:
        """The outputs in a 200 answer's body (absent ones left out for the check)."""

    @staticmethod
    @abstractmethod
    def answers_probe(document: object) -> bool:
        """Whether the JSON answer to `probe_path` comes from a server of this protocol."""

    def outputs(
        self, answer: HttpAnswer, specs: tuple[TensorSpec, ...], batch_size: int
    ) -> dict[str, np.ndarray]:
        """The checked outputs of an answer to a payload; InferenceError if it is wrong.

        A wrong answer counted as a success would make a broken server look fast.
        """
        where = str(self.infer_url)
        if answer.status != 200:
            raise http_status(answer.status, answer.body, where)
        encoding = answer.headers.get("Content-Encoding")
        if encoding not in (None, "identity"):
            # The edges ask for identity and do not decompress: bytes counted are bytes sent.
            raise InferenceError(
                ErrorKind.BAD_RESPONSE, f"{where}: {encoding}-encoded answer to identity"
            )
        outputs = self._read(answer.body, answer.headers, specs)
        check_outputs(outputs, specs, batch_size)
        return outputs


class GrpcCodec(ModelCodec):
    """A protocol over gRPC: every call unary, requests serialized once per payload.

    `read_signature` yields each `GrpcCall` and is sent its answer message. `probe_path`
    is a method `sniff` calls with an empty request: a server without it answers
    UNIMPLEMENTED.
    """

    probe_path: ClassVar[str]

    def __init__(self, url: str, model: str, version: str | None) -> None:
        super().__init__(model, version)
        self.target = grpc_target(url)
        self.where = f"{self.target} model {model!r}"

    @property
    @abstractmethod
    def infer_path(self) -> str:
        """The method a payload (serialized request bytes) is sent to."""

    @property
    @abstractmethod
    def infer_response(self) -> Any:
        """The message class of an inference answer."""

    @staticmethod
    def _request_bytes(encoded: bytes) -> int:
        """The serialized message's size, without gRPC and HTTP/2 framing."""
        return len(encoded)

    @abstractmethod
    def _read(self, response: Any, specs: tuple[TensorSpec, ...]) -> dict[str, np.ndarray]:
        """The outputs an answer message holds (absent ones left out for the check)."""

    def outputs(
        self, response: Any, specs: tuple[TensorSpec, ...], batch_size: int
    ) -> dict[str, np.ndarray]:
        """The checked outputs of an answer message; InferenceError if it is wrong."""
        outputs = self._read(response, specs)
        check_outputs(outputs, specs, batch_size)
        return outputs
