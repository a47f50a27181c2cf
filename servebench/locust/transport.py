"""The four protocols as blocking calls that cooperate with gevent (Locust's concurrency).

Why not servebench's async clients as they are: Locust runs its users as greenlets on a
gevent loop after monkey-patching the standard library; an asyncio loop (aiohttp,
grpc.aio) inside a greenlet blocks every other user while it runs, and grpc.aio's own
threads do not yield to gevent. So each protocol here keeps what the clients do that
matters for a measurement and swaps only the transport:

- payloads come from the servebench client's own `make_payload` (encoded once, before the
  swarm; the client is built with the signature and never connects);
- answers are decoded and checked by the same functions the clients use
  (`triton_http.decode_answer`, `triton_grpc.decode_response`, `tfs_rest.decode_predict`,
  `tfs_grpc.decode_outputs`, `base.check_outputs`), so a wrong shape or dtype is a
  BAD_RESPONSE failure here exactly as in `servebench load`;
- failures are the same classified `InferenceError`s (`clients.errors`);
- HTTP goes through geventhttpclient (the library under Locust's FastHttpUser), one
  keep-alive connection per user; gRPC through grpcio's blocking stubs, which yield to
  gevent once `grpc.experimental.gevent.init_gevent()` has run (`users` calls it at
  import, before any channel exists), one channel (HTTP/2 connection) per user.

Control-plane reads (signature) use the same transports: tritonclient's blocking clients
for Triton (its HTTP client is geventhttpclient too), plain GETs and stubs for TF Serving.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import gevent
import gevent.lock
import grpc
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from servebench.clients import tfs_grpc, tfs_rest
from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    ModelSignature,
    Payload,
    TensorSpec,
    check_outputs,
)
from servebench.clients.errors import grpc_failure, http_status
from servebench.clients.factory import create_client
from servebench.clients.grpc_calls import CHANNEL_OPTIONS, sized_parser
from servebench.clients.tfs_signature import DEFAULT_SIGNATURE
from servebench.clients.triton_grpc import MODEL_INFER, decode_response
from servebench.clients.triton_http import decode_answer
from servebench.clients.triton_signature import triton_signature
from servebench.locust.settings import PAYLOAD_SEED, UserSettings, read_signature_file

_TRANSPORT_ERRORS = (OSError, HTTPParseError, gevent.Timeout)
_JSON_HEADERS = {"Content-Type": "application/json"}


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
    code = exc.code() if hasattr(exc, "code") else None
    if code is None:
        return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: {exc!r}")
    return grpc_failure(code.name, exc.details() or "", where)  # type: ignore[attr-defined]


class Transport(Protocol):
    """One user's connection to one model: read the signature, send payloads."""

    where: str

    def read_signature(self) -> ModelSignature: ...

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> int:
        """Send one request and check its answer; return the response bytes.

        Raises InferenceError (only) when the request fails or the answer is wrong.
        """
        ...

    def close(self) -> None: ...


def make_payload(settings: UserSettings, url: str, signature: ModelSignature, seed: int) -> Payload:
    """The request body, encoded once by the servebench client of the protocol."""
    client = create_client(
        settings.protocol, url, settings.model, version=settings.version or None,
        signature=signature, **_client_options(settings),
    )  # fmt: skip
    return client.make_payload(settings.batch_size, seed)


def _client_options(settings: UserSettings) -> dict[str, Any]:
    return {"request_format": settings.request_format} if settings.protocol == "tfs-rest" else {}


def open_transport(settings: UserSettings, url: str) -> Transport:
    """The transport for `settings.protocol`, connecting to `url` (the server or its link)."""
    return _TRANSPORTS[settings.protocol](settings, url)


class _Http:
    """Shared by both HTTP protocols: one keep-alive connection, requests as raw bytes."""

    def __init__(self, base: Any, timeout_s: float):
        self.http = HTTPClient.from_url(
            str(base), concurrency=1, connection_timeout=timeout_s, network_timeout=timeout_s
        )

    def send(
        self, method: str, path: str, where: str, body: bytes = b"", headers: Any = None
    ) -> tuple[int, bytes, Any]:
        try:
            response = self.http.request(method, path, body=body, headers=headers)
            data = response.read()
        except _TRANSPORT_ERRORS as exc:
            raise transport_failure(exc, where) from exc
        return response.status_code, data, response

    def close(self) -> None:
        self.http.close()


class TritonHttpTransport(_Http):
    def __init__(self, settings: UserSettings, url: str):
        client = create_client("triton-http", url, settings.model, version=settings.version)
        super().__init__(client.base, settings.timeout_s)  # type: ignore[attr-defined]
        self.settings = settings
        self.base = client.base  # type: ignore[attr-defined]
        self.infer_url = client.infer_url  # type: ignore[attr-defined]
        self.path = self.infer_url.raw_path
        self.where = str(self.infer_url)

    def read_signature(self) -> ModelSignature:
        base, settings = self.base, self.settings
        host = f"[{base.host}]" if ":" in (base.host or "") else base.host
        control = triton_http.InferenceServerClient(
            f"{host}:{base.port}{base.path}",
            connection_timeout=settings.timeout_s,
            network_timeout=settings.timeout_s,
            ssl=base.scheme == "https",
        )
        where = f"{base} model {settings.model!r}"
        try:
            # Metadata first: for an unknown model it carries Triton's message naming it.
            metadata = control.get_model_metadata(settings.model, settings.version)
            config = control.get_model_config(settings.model, settings.version)
            if not control.is_model_ready(settings.model, settings.version):
                raise InferenceError(ErrorKind.SERVER_ERROR, f"{where}: not ready")
        except InferenceServerException as exc:
            status = exc.status()
            code = int(status) if status and str(status).isdigit() else None
            raise InferenceError(
                ErrorKind.HTTP_STATUS, f"{where}: HTTP {status}: {exc.message()}", status=code
            ) from exc
        except _TRANSPORT_ERRORS as exc:
            raise transport_failure(exc, str(base)) from exc
        finally:
            control.close()
        return triton_signature(metadata, config, settings.version)

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> int:
        request = payload.encoded
        status, body, response = self.send(
            "POST", self.path, self.where, request.body, request.headers
        )
        if status != 200:
            raise http_status(status, body, self.where)
        encoding = response.get("Content-Encoding")
        if encoding not in (None, "identity"):
            raise InferenceError(
                ErrorKind.BAD_RESPONSE, f"{self.where}: {encoding}-encoded answer to identity"
            )
        answer = decode_answer(body, response.get("Inference-Header-Content-Length"), self.where)
        check_outputs(answer, outputs, payload.batch_size)
        return len(body)


class TfsRestTransport(_Http):
    def __init__(self, settings: UserSettings, url: str):
        client = create_client(
            "tfs-rest", url, settings.model, version=settings.version or None,
            request_format=settings.request_format,
        )  # fmt: skip
        super().__init__(client.base, settings.timeout_s)  # type: ignore[attr-defined]
        self.settings = settings
        self.status_url = client.status_url  # type: ignore[attr-defined]
        self.metadata_url = client.metadata_url  # type: ignore[attr-defined]
        self.predict_url = client.predict_url  # type: ignore[attr-defined]
        self.where = str(self.predict_url)

    def _get_json(self, url: Any) -> dict[str, Any]:
        status, body, _ = self.send("GET", url.raw_path, str(url))
        if status != 200:
            raise http_status(status, body, str(url))
        return tfs_rest.json_object(body, str(url))

    def read_signature(self) -> ModelSignature:
        tfs_rest.check_available(self._get_json(self.status_url), str(self.status_url))
        return tfs_rest.signature_from_metadata(
            self._get_json(self.metadata_url),
            self.settings.model,
            DEFAULT_SIGNATURE,
            self.settings.version,
            str(self.metadata_url),
        )

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> int:
        status, body, _ = self.send(
            "POST", self.predict_url.raw_path, self.where, payload.encoded, _JSON_HEADERS
        )
        if status != 200:
            raise http_status(status, body, self.where)
        answer = tfs_rest.decode_predict(body, outputs, self.settings.request_format, self.where)
        check_outputs(answer, outputs, payload.batch_size)
        return len(body)


class _Grpc:
    """Shared by both gRPC protocols: one channel, unary calls on pre-serialized bytes."""

    def __init__(self, target: str, timeout_s: float):
        self.channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.timeout_s = timeout_s

    def unary(self, path: str, response_class: Any) -> Callable[..., Any]:
        return self.channel.unary_unary(
            path, request_serializer=None, response_deserializer=sized_parser(response_class)
        )

    def call(self, method: Callable[..., Any], request: bytes, where: str) -> tuple[int, Any]:
        try:
            size, response = method(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise rpc_failure(exc, where) from exc
        if response is None:
            raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: undecodable answer")
        return size, response

    def close(self) -> None:
        self.channel.close()


class TritonGrpcTransport(_Grpc):
    def __init__(self, settings: UserSettings, url: str):
        client = create_client("triton-grpc", url, settings.model, version=settings.version)
        super().__init__(client.target, settings.timeout_s)  # type: ignore[attr-defined]
        self.settings = settings
        self.target = client.target  # type: ignore[attr-defined]
        self.where = f"{self.target} model {settings.model!r}"
        self._infer = self.unary(MODEL_INFER, service_pb2.ModelInferResponse)

    def read_signature(self) -> ModelSignature:
        settings = self.settings
        control = triton_grpc.InferenceServerClient(self.target)
        timeout = settings.timeout_s
        try:
            metadata = control.get_model_metadata(
                settings.model, settings.version, as_json=True, client_timeout=timeout
            )
            config = control.get_model_config(
                settings.model, settings.version, as_json=True, client_timeout=timeout
            )
            ready = control.is_model_ready(settings.model, settings.version, client_timeout=timeout)
        except InferenceServerException as exc:
            raise grpc_failure(exc.status() or "", exc.message() or "", self.where) from exc
        finally:
            control.close()
        if not ready:
            raise InferenceError(ErrorKind.SERVER_ERROR, f"{self.where}: not ready")
        return triton_signature(metadata, config.get("config", {}), settings.version)

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> int:
        size, response = self.call(self._infer, payload.encoded, self.where)
        check_outputs(decode_response(response, outputs, self.where), outputs, payload.batch_size)
        return size


class TfsGrpcTransport(_Grpc):
    def __init__(self, settings: UserSettings, url: str):
        client = create_client("tfs-grpc", url, settings.model, version=settings.version or None)
        super().__init__(client.target, settings.timeout_s)  # type: ignore[attr-defined]
        self.settings = settings
        self.where = f"{client.target} model {settings.model!r}"  # type: ignore[attr-defined]
        self.apis = apis = (
            tfs_grpc.load_apis()
        )  # imports TensorFlow's generated protos (2-3 s, once)
        self._predict = self.unary(apis.predict_path, apis.predict.PredictResponse)

    def read_signature(self) -> ModelSignature:
        apis, settings, timeout = self.apis, self.settings, self.timeout_s
        spec = tfs_grpc.model_spec(apis, settings.model, settings.version, DEFAULT_SIGNATURE)
        try:
            status = apis.model_service.ModelServiceStub(self.channel).GetModelStatus(
                apis.status.GetModelStatusRequest(model_spec=spec), timeout=timeout
            )
            tfs_grpc.check_available(apis, status, self.where)
            metadata = apis.prediction_service.PredictionServiceStub(self.channel).GetModelMetadata(
                apis.metadata.GetModelMetadataRequest(
                    model_spec=spec, metadata_field=["signature_def"]
                ),
                timeout=timeout,
            )
        except grpc.RpcError as exc:
            raise rpc_failure(exc, self.where) from exc
        return tfs_grpc.signature_from_metadata(
            apis, metadata, settings.model, DEFAULT_SIGNATURE, settings.version, self.where
        )

    def infer(self, payload: Payload, outputs: tuple[TensorSpec, ...]) -> int:
        size, response = self.call(self._predict, payload.encoded, self.where)
        answer = tfs_grpc.decode_outputs(self.apis, response, outputs, self.where)
        check_outputs(answer, outputs, payload.batch_size)
        return size


_TRANSPORTS: dict[str, Callable[[UserSettings, str], Transport]] = {
    "triton-http": TritonHttpTransport,
    "triton-grpc": TritonGrpcTransport,
    "tfs-rest": TfsRestTransport,
    "tfs-grpc": TfsGrpcTransport,
}


class Prepared(NamedTuple):
    """What every user with the same settings sends and expects."""

    signature: ModelSignature
    payload: Payload


class PayloadCache:
    """One signature read and one payload encoding per process and settings.

    The first user that needs them prepares them while the others with the same settings
    wait on its lock; a failure is not cached, so the next user tries again (a server
    still loading its model). Cleared when a swarm starts: the form may have changed the
    settings, or the server its model.
    """

    def __init__(self) -> None:
        self._prepared: dict[tuple[UserSettings, str], Prepared] = {}
        self._locks: dict[tuple[UserSettings, str], gevent.lock.Semaphore] = {}

    def get(self, settings: UserSettings, url: str, transport: Transport) -> Prepared:
        key = (settings, url)
        prepared = self._prepared.get(key)
        if prepared is not None:
            return prepared
        lock = self._locks.setdefault(key, gevent.lock.Semaphore())
        with lock:
            prepared = self._prepared.get(key)
            if prepared is None:
                prepared = self._prepared[key] = prepare(settings, url, transport)
        return prepared

    def clear(self) -> None:
        self._prepared.clear()
        self._locks.clear()


def prepare(settings: UserSettings, url: str, transport: Transport) -> Prepared:
    """Read (or load) the signature and encode the payload; errors name what failed."""
    if settings.signature_file:
        signature = read_signature_file(settings.signature_file)
    else:
        signature = transport.read_signature()
    return Prepared(signature, make_payload(settings, url, signature, PAYLOAD_SEED))


def preload(protocols: set[str]) -> None:
    """Import now what a protocol imports on first use, before users run.

    TF Serving's gRPC protos import all of TensorFlow: 3-7 s in which gevent's loop (every
    user, the web UI, the run-time timer) stands still. Paid at start-up, it delays no
    swarm that is already being measured.
    """
    if "tfs-grpc" in protocols:
        tfs_grpc.load_apis()
