"""servebench's protocols as blocking calls that cooperate with gevent (Locust's concurrency).

Why not servebench's async clients as they are: Locust runs its users as greenlets on a
gevent loop after monkey-patching the standard library; an asyncio loop (aiohttp,
grpc.aio) inside a greenlet blocks every other user while it runs, and grpc.aio's own
threads do not yield to gevent. So the protocols are not redone here: each user holds the
protocol's codec from the registry (`servebench.clients.codec`: the same object the async
clients use to build requests, read signatures and decode and check answers) and this
module only moves its bytes, the I/O edge of the httpx shape:

- `HttpTransport` through geventhttpclient (the library under Locust's FastHttpUser), one
  keep-alive connection per user (per user and model, with a mix of models);
- `GrpcTransport` through grpcio's blocking channels, which yield to gevent once
  `grpc.experimental.gevent.init_gevent()` has run (`users` calls it at import, before any
  channel exists), one channel (HTTP/2 connection) per user (and model).

So a payload is encoded once by the codec before the swarm, a wrong shape or dtype is a
BAD_RESPONSE failure exactly as in `servebench load`, and failures are the same classified
`InferenceError`s (`clients.errors`). A protocol added to the registry needs nothing here.
With `--input-data` the payloads are the cycle through the file's samples, each encoded by
the codec (`clients.payloads`, as `servebench load` builds them), and a transport hands its
user the checked outputs, which the user compares with the file's expected ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import gevent
import gevent.lock
import grpc
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from numpy import ndarray
from yarl import URL

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    ModelSignature,
    Payload,
    TensorSpec,
)
from servebench.clients.codec import (
    GrpcCall,
    GrpcCodec,
    HttpAnswer,
    HttpBody,
    HttpCodec,
    ModelCodec,
    drive,
)
from servebench.clients.errors import grpc_failure
from servebench.clients.grpc_calls import CHANNEL_OPTIONS, sized_parser
from servebench.clients.input_data import InputData, InputDataError, read_input_data
from servebench.clients.payloads import data_payloads, random_payload
from servebench.clients.registry import PROTOCOLS
from servebench.clients.registry import protocol as find_protocol
from servebench.locust.settings import PAYLOAD_SEED, UserSettings, read_signature_file

_TRANSPORT_ERRORS = (OSError, HTTPParseError, gevent.Timeout)


def transport_failure(exc: BaseException, where: str) -> InferenceError:
    """Classify what geventhttpclient (or the socket under it) raised, as clients.errors does."""
    if isinstance(exc, TimeoutError | gevent.Timeout):
        return InferenceError(ErrorKind.TIMEOUT, f"{where}: no answer in time")
    if isinstance(exc, ConnectionRefusedError):
        return InferenceError(ErrorKind.CONNECTION_REFUSED, f"{where}: connection refused")
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return InferenceError(ErrorKind.CONNECTION_RESET, f"{where}: connection lost ({exc})")
    if isinstance(exc, HTTPConnectionClosed):
        return InferenceError(ErrorKind.CONNECTION_RESET, f"{where}: server closed the connection")
    if isinstance(exc, HTTPParseError):
        return InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: unreadable HTTP answer ({exc})")
    return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: {type(exc).__name__}: {exc}")


def rpc_failure(exc: grpc.RpcError, where: str) -> InferenceError:
    """Classify what a blocking gRPC call raised (a failed call is also a `grpc.Call`)."""
    if isinstance(exc, grpc.Call):
        return grpc_failure(exc.code().name, exc.details() or "", where)
    return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: {exc!r}")


class Answer(NamedTuple):
    """A checked answer: its size on the wire and its outputs."""

    response_bytes: int
    outputs: dict[str, ndarray]


class Transport(Protocol):
    """One user's connection to one model, speaking through the protocol's codec."""

    codec: ModelCodec

    def read_signature(self) -> ModelSignature: ...

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> Answer:
        """Send one request and check its answer's outputs, shapes and dtypes.

        Raises InferenceError (only) when the request fails or the answer is malformed;
        whether its values are the expected ones is the user's to judge (`Payload.expected`).
        """
        ...

    def close(self) -> None: ...


def open_codec(settings: UserSettings, url: str) -> ModelCodec:
    """The codec of `settings.protocol` for the model at `url` (the server or its link)."""
    spec = find_protocol(settings.protocol)
    codec_class = spec.codec_class()
    if codec_class is None:
        raise ValueError(f"--protocol: {settings.protocol!r} has no model format")
    options = {}
    if spec.accepts("request_format"):
        options["request_format"] = settings.request_format
    return codec_class(url, settings.model, version=settings.version or None, **options)


def open_transport(settings: UserSettings, url: str) -> Transport:
    """The transport for `settings.protocol`, connecting to `url` (the server or its link)."""
    codec = open_codec(settings, url)
    if isinstance(codec, HttpCodec):
        return HttpTransport(codec, settings.timeout_s)
    if isinstance(codec, GrpcCodec):
        return GrpcTransport(codec, settings.timeout_s)
    raise TypeError(f"{type(codec).__name__}: neither an HTTP nor a gRPC codec")


class HttpTransport:
    """An HTTP codec on one keep-alive geventhttpclient connection."""

    def __init__(self, codec: HttpCodec, timeout_s: float):
        self.codec = codec
        self.http = HTTPClient.from_url(
            str(codec.base), concurrency=1, connection_timeout=timeout_s, network_timeout=timeout_s
        )

    def _send(self, method: str, url: URL, body: HttpBody | None = None) -> HttpAnswer:
        data, headers = (body.data, body.headers) if body is not None else (b"", None)
        try:
            response = self.http.request(method, url.raw_path, body=data, headers=headers)
            answer = response.read()
        except _TRANSPORT_ERRORS as exc:
            raise transport_failure(exc, str(url)) from exc
        return HttpAnswer(response.status_code, answer, response.info())

    def read_signature(self) -> ModelSignature:
        return drive(self.codec.read_signature(), lambda url: self._send("GET", url))

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> Answer:
        answer = self._send("POST", self.codec.infer_url, payload.encoded)
        return Answer(len(answer.body), self.codec.outputs(answer, outputs, payload.batch_size))

    def close(self) -> None:
        self.http.close()


class GrpcTransport:
    """A gRPC codec on one blocking channel: unary calls on pre-serialized bytes."""

    def __init__(self, codec: GrpcCodec, timeout_s: float):
        self.codec = codec
        self.timeout_s = timeout_s
        self.channel = grpc.insecure_channel(codec.target, options=CHANNEL_OPTIONS)
        self._infer = self._unary(codec.infer_path, codec.infer_response)

    def _unary(self, path: str, response_class: Any) -> Callable[..., Any]:
        return self.channel.unary_unary(
            path, request_serializer=None, response_deserializer=sized_parser(response_class)
        )

    def _call(self, method: Callable[..., Any], request: bytes) -> tuple[int, Any]:
        where = self.codec.where
        try:
            size, response, _ = method(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise rpc_failure(exc, where) from exc
        if response is None:
            raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: undecodable answer")
        return size, response

    def _control(self, call: GrpcCall) -> Any:
        return self._call(self._unary(call.path, call.response), call.request)[1]

    def read_signature(self) -> ModelSignature:
        return drive(self.codec.read_signature(), self._control)

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> Answer:
        size, response = self._call(self._infer, payload.encoded)
        return Answer(size, self.codec.outputs(response, outputs, payload.batch_size))

    def close(self) -> None:
        self.channel.close()


@dataclass(eq=False)
class Prepared:
    """What every user with the same settings sends and expects: the signature, and the
    payloads (one seeded random batch, or the cycle through an input-data file's samples).

    All those users share one cycle (`next_payload`): request k of the process, whichever
    user sends it, carries the cycle's k-th payload, so the file's samples reach the server
    in the file's order and equally often, as `servebench load` sends them (its request
    `seq` carries `payloads[seq % n]`). A cycle per user would send sample 0 from every user
    at once when the swarm starts (the server's batcher seeing copies of one sample), and
    offsets per user would hang on the user count the form sets. Each swarm starts at the
    first sample (the cache is cleared); with `--processes`, each process has its own
    cycle. Users are greenlets of one thread, so the counter needs no lock.
    """

    signature: ModelSignature
    payloads: tuple[Payload, ...]
    source: str = ""  # the input-data file, "" for the random payload
    _sent: int = field(default=0, init=False)

    def next_payload(self) -> Payload:
        payload = self.payloads[self._sent % len(self.payloads)]
        self._sent += 1
        return payload


class PayloadCache:
    """One signature read and one payload encoding per process and settings.

    The first user that needs them prepares them while the others with the same settings
    wait on its lock; a failure is not cached, so the next user tries again (a server
    still loading its model). An input-data file is read once too (a file that does not
    fit the model is not read again by each retry). Cleared when a swarm starts: the form
    may have changed the settings, the server its model, or the user the file.
    """

    def __init__(self) -> None:
        self._prepared: dict[tuple[UserSettings, str], Prepared] = {}
        self._locks: dict[tuple[UserSettings, str], gevent.lock.Semaphore] = {}
        self._data: dict[str, InputData] = {}

    def get(self, settings: UserSettings, url: str, transport: Transport) -> Prepared:
        key = (settings, url)
        prepared = self._prepared.get(key)
        if prepared is not None:
            return prepared
        lock = self._locks.setdefault(key, gevent.lock.Semaphore())
        with lock:
            prepared = self._prepared.get(key)
            if prepared is None:
                data = self._input_data(settings.input_data) if settings.input_data else None
                prepared = self._prepared[key] = prepare(settings, transport, data)
        return prepared

    def _input_data(self, path: str) -> InputData:
        data = self._data.get(path)
        if data is None:
            try:
                data = self._data[path] = read_input_data(path)
            except ValueError as exc:  # InputDataError, or the text reader's TextFileError
                raise ValueError(f"--input-data {exc}") from None
        return data

    def clear(self) -> None:
        self._prepared.clear()
        self._locks.clear()
        self._data.clear()


def prepare(settings: UserSettings, transport: Transport, data: InputData | None) -> Prepared:
    """Read (or load) the signature and encode the payloads: the cycle through `data`'s
    samples, or one seeded random batch. ValueError naming the option, and for `data` the
    file and the tensor, where they do not fit the model."""
    if settings.signature_file:
        signature = read_signature_file(settings.signature_file)
    else:
        signature = transport.read_signature()
    encode = functools.partial(transport.codec.encode, signature)
    if data is None:
        return Prepared(
            signature, (random_payload(encode, signature, settings.batch_size, PAYLOAD_SEED),)
        )
    try:
        payloads = data_payloads(encode, signature, settings.batch_size, data)
    except InputDataError as exc:  # the batch-size check's error is not the file's
        raise ValueError(f"--input-data {exc}") from None
    return Prepared(signature, tuple(payloads), data.source)


def preload(protocols: set[str]) -> None:
    """Import now what a protocol imports on first use, before users run.

    TF Serving's gRPC protos import all of TensorFlow: 3-7 s in which gevent's loop (every
    user, the web UI, the run-time timer) stands still. Paid at start-up, it delays no
    swarm that is already being measured.
    """
    for name in protocols:
        spec = PROTOCOLS.get(name)  # an unknown name is the user's error, reported by its user
        codec = spec.codec_class() if spec is not None else None
        if codec is not None:
            codec.load()
