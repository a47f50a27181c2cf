"""Triton over gRPC (the KServe v2 `GRPCInferenceService`).

`TritonGrpcCodec` is the protocol: a `ModelInferRequest` serialized once per payload
(tritonclient's generated `service_pb2`), answers decoded with tritonclient's `InferResult`,
and the signature from the ModelMetadata, ModelConfig and ModelReady calls (as JSON, the
form `triton_signature` reads). tritonclient's own `infer()` builds and serializes the
request on every call, so it is not used. `TritonGrpcClient` is the codec on grpc.aio
channels; the Locust users put the same codec on blocking grpcio channels.

Byte counts are the serialized ModelInferRequest / ModelInferResponse sizes (see
`grpc_calls`), without gRPC and HTTP/2 framing.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import numpy as np
import tritonclient.grpc as triton_grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2
from tritonclient.utils import np_to_triton_dtype

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, TensorSpec
from servebench.clients.codec import GrpcCall, GrpcCodec
from servebench.clients.grpc_calls import method_path
from servebench.clients.grpc_model_client import GrpcModelClient
from servebench.clients.triton_signature import triton_signature


def _method(name: str) -> str:
    return method_path(service_pb2.DESCRIPTOR, "GRPCInferenceService", name)


MODEL_INFER = _method("ModelInfer")
MODEL_METADATA = _method("ModelMetadata")
MODEL_CONFIG = _method("ModelConfig")
MODEL_READY = _method("ModelReady")


class TritonGrpcCodec(GrpcCodec):
    """Requests to and answers from one Triton model over gRPC."""

    server = "Triton"
    probe_path = _method("ServerLive")

    @property
    def infer_path(self) -> str:
        return MODEL_INFER

    @property
    def infer_response(self) -> Any:
        return service_pb2.ModelInferResponse

    def read_signature(self) -> Generator[GrpcCall, Any, ModelSignature]:
        names = {"name": self.model, "version": self.version}
        # Metadata first: for an unknown model it carries Triton's message naming it.
        metadata = yield GrpcCall(
            MODEL_METADATA,
            service_pb2.ModelMetadataRequest(**names).SerializeToString(),
            service_pb2.ModelMetadataResponse,
        )
        config = yield GrpcCall(
            MODEL_CONFIG,
            service_pb2.ModelConfigRequest(**names).SerializeToString(),
            service_pb2.ModelConfigResponse,
        )
        ready = yield GrpcCall(
            MODEL_READY,
            service_pb2.ModelReadyRequest(**names).SerializeToString(),
            service_pb2.ModelReadyResponse,
        )
        if not ready.ready:
            raise InferenceError(ErrorKind.SERVER_ERROR, f"{self.where}: not ready")
        return triton_signature(_as_json(metadata), _as_json(config.config), self.version)

    def _encode(self, signature: ModelSignature, inputs: Mapping[str, np.ndarray]) -> bytes:
        request = service_pb2.ModelInferRequest(model_name=self.model, model_version=self.version)
        for spec in signature.inputs:
            array = inputs[spec.name]
            request.inputs.add(
                name=spec.name, datatype=np_to_triton_dtype(array.dtype), shape=array.shape
            )
            request.raw_input_contents.append(array.tobytes())
        for spec in signature.outputs:
            request.outputs.add(name=spec.name)
        return request.SerializeToString()

    def _read(
        self, response: service_pb2.ModelInferResponse, specs: tuple[TensorSpec, ...]
    ) -> dict[str, np.ndarray]:
        try:
            result = triton_grpc.InferResult(response)
            outputs = {}
            for spec in specs:
                array = result.as_numpy(spec.name)
                if array is not None:
                    outputs[spec.name] = array
        except Exception as exc:  # a tensor whose bytes do not fit its shape or datatype
            raise InferenceError(
                ErrorKind.BAD_RESPONSE, f"{self.where}: unreadable answer ({exc})"
            ) from exc
        return outputs


def _as_json(message: Any) -> dict[str, Any]:
    """A control answer as tritonclient's `as_json=True` gives it (int64s as strings)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


class TritonGrpcClient(GrpcModelClient):
    """Infer on one Triton model over gRPC (channels and timeouts: `GrpcModelClient`)."""

    codec_class = TritonGrpcCodec
