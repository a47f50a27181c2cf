"""Triton over gRPC (the KServe v2 `GRPCInferenceService`).

The control plane (metadata, config, readiness) goes through `tritonclient.grpc.aio`. Its
`infer()` builds and serializes a `ModelInferRequest` on every call, so the hot path instead
sends a request serialized once per payload (tritonclient's generated `service_pb2`) on
its own channel(s), and decodes answers with tritonclient's `InferResult`.

Byte counts are the serialized ModelInferRequest / ModelInferResponse sizes (see
`grpc_calls`), without gRPC and HTTP/2 framing.
"""

from __future__ import annotations

import grpc
import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
    TensorSpec,
    check_batch_size,
    check_outputs,
    random_inputs,
)
from servebench.clients.endpoints import grpc_target
from servebench.clients.errors import grpc_failure
from servebench.clients.grpc_calls import method_path, open_channels, raw_unary
from servebench.clients.triton_signature import triton_signature

MODEL_INFER = method_path(service_pb2.DESCRIPTOR, "GRPCInferenceService", "ModelInfer")


class TritonGrpcClient:
    """Infer on one Triton model over gRPC.

    `channels` > 1 spreads requests round-robin over that many HTTP/2 connections (one
    connection multiplexes every request otherwise). `timeout` is each request's gRPC
    deadline (None: the load engine's own timeout applies); `connect_timeout` bounds each
    control call in `connect()`. A given `signature` is trusted as the expected answer and
    `connect()` then asks the server nothing.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        channels: int = 1,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        signature: ModelSignature | None = None,
    ):
        if not model:
            raise ValueError("model: a Triton model name is required")
        if channels < 1:
            raise ValueError(f"channels: must be >= 1, got {channels}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: must be > 0 s, got {timeout}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout: must be > 0 s, got {connect_timeout}")
        self.target = grpc_target(url)
        self.model = model
        self.version = str(version) if version else ""
        self.channels = channels
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._where = f"{self.target} model {model!r}"
        self._signature = signature
        self._channels: list[grpc.aio.Channel] = []
        self._calls: list = []
        self._next = 0

    async def connect(self) -> None:
        """Read the signature (unless given) and open the channels; InferenceError on failure."""
        if self._calls:
            return
        if self._signature is None:
            self._signature = await self._read_signature()
        self._channels = open_channels(self.target, self.channels)
        self._calls = [
            raw_unary(channel, MODEL_INFER, service_pb2.ModelInferResponse)
            for channel in self._channels
        ]

    async def _read_signature(self) -> ModelSignature:
        control = triton_grpc_aio.InferenceServerClient(self.target)
        timeout = self.connect_timeout
        try:
            # Metadata first: for an unknown model it carries Triton's message naming it.
            metadata = await control.get_model_metadata(
                self.model, self.version, as_json=True, client_timeout=timeout
            )
            config = await control.get_model_config(
                self.model, self.version, as_json=True, client_timeout=timeout
            )
            if not await control.is_model_ready(self.model, self.version, client_timeout=timeout):
                raise InferenceError(ErrorKind.SERVER_ERROR, f"{self._where}: not ready")
        except InferenceServerException as exc:
            raise grpc_failure(exc.status() or "", exc.message() or "", self._where) from exc
        finally:
            await control.close()
        return triton_signature(metadata, config.get("config", {}), self.version)

    async def signature(self) -> ModelSignature:
        return self._require_signature()

    def _require_signature(self) -> ModelSignature:
        if self._signature is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        return self._signature

    def make_payload(self, batch_size: int, seed: int = 0) -> Payload:
        signature = self._require_signature()
        check_batch_size(signature, batch_size)
        arrays = random_inputs(signature.inputs, batch_size, seed)
        request = service_pb2.ModelInferRequest(model_name=self.model, model_version=self.version)
        for spec in signature.inputs:
            array = arrays[spec.name]
            request.inputs.add(
                name=spec.name, datatype=np_to_triton_dtype(array.dtype), shape=array.shape
            )
            request.raw_input_contents.append(array.tobytes())
        for spec in signature.outputs:
            request.outputs.add(name=spec.name)
        encoded = request.SerializeToString()
        return Payload(
            batch_size=batch_size, inputs=arrays, encoded=encoded, request_bytes=len(encoded)
        )

    async def infer(self, payload: Payload) -> InferResult:
        calls = self._calls
        if not calls:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        call = calls[self._next % len(calls)]
        self._next += 1
        try:
            size, response = await call(payload.encoded, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpc_failure(exc.code().name, exc.details() or "", self._where) from exc
        except grpc.RpcError as exc:  # raised by grpc.aio outside a call's status (rare)
            raise InferenceError(ErrorKind.CLIENT_ERROR, f"{self._where}: {exc!r}") from exc
        if response is None:
            raise InferenceError(ErrorKind.BAD_RESPONSE, f"{self._where}: undecodable answer")
        signature = self._require_signature()
        outputs = decode_response(response, signature.outputs, self._where)
        check_outputs(outputs, signature.outputs, payload.batch_size)
        return InferResult(outputs, request_bytes=len(payload.encoded), response_bytes=size)

    async def close(self) -> None:
        channels, self._channels, self._calls = self._channels, [], []
        for channel in channels:
            await channel.close()


def decode_response(
    response: service_pb2.ModelInferResponse, specs: tuple[TensorSpec, ...], where: str
) -> dict[str, np.ndarray]:
    """The expected outputs a ModelInferResponse holds (absent ones left out for the check).

    A function, not a method, so that callers with another transport (the Locust users'
    sync gRPC channels) decode answers the same way.
    """
    try:
        result = triton_grpc.InferResult(response)
        outputs = {}
        for spec in specs:
            array = result.as_numpy(spec.name)
            if array is not None:
                outputs[spec.name] = array
    except Exception as exc:  # a tensor whose bytes do not fit its shape or datatype
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: unreadable answer ({exc})") from exc
    return outputs
