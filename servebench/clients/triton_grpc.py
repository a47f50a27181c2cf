"""Triton over gRPC (the KServe v2 `GRPCInferenceService`).

The control plane (metadata, config, readiness) goes through `tritonclient.grpc.aio`. Its
`infer()` builds and serializes a `ModelInferRequest` on every call, so the hot path instead
sends a request serialized once per payload (tritonclient's generated `service_pb2`) on
its own channel(s), and decodes answers with tritonclient's `InferResult`.

Byte counts are the serialized ModelInferRequest / ModelInferResponse sizes (see
`grpc_calls`), without gRPC and HTTP/2 framing.
"""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    ModelSignature,
    Payload,
    TensorSpec,
    check_batch_size,
    random_inputs,
)
from servebench.clients.errors import grpc_failure
from servebench.clients.grpc_calls import method_path, open_channels
from servebench.clients.grpc_model_client import GrpcModelClient
from servebench.clients.triton_signature import triton_signature

MODEL_INFER = method_path(service_pb2.DESCRIPTOR, "GRPCInferenceService", "ModelInfer")


class TritonGrpcClient(GrpcModelClient):
    """Infer on one Triton model over gRPC.

    `channels` > 1 spreads requests round-robin over that many HTTP/2 connections (one
    connection multiplexes every request otherwise). `timeout` is each request's gRPC
    deadline (None: the load engine's own timeout applies); `connect_timeout` bounds each
    control call in `connect()`. A given `signature` is trusted as the expected answer and
    `connect()` then asks the server nothing.
    """

    server = "Triton"

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
        super().__init__(
            url,
            model,
            version=version,
            channels=channels,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )

    async def connect(self) -> None:
        """Read the signature (unless given) and open the channels; InferenceError on failure."""
        if self._calls:
            return
        if self._signature is None:
            self._signature = await self._read_signature()
        channels = open_channels(self.target, self.channels)
        self._use_channels(channels, MODEL_INFER, service_pb2.ModelInferResponse)

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

    def _decode(
        self, response: service_pb2.ModelInferResponse, specs: tuple[TensorSpec, ...]
    ) -> dict[str, np.ndarray]:
        return decode_response(response, specs, self._where)


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
