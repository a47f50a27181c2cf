"""TF Serving's gRPC API: `PredictionService` and `ModelService` from tensorflow-serving-api.

`TfsGrpcCodec` is the protocol: the signature comes from `ModelService.GetModelStatus`
(is a version AVAILABLE?) and `PredictionService.GetModelMetadata` (its `signature_def`
field); `Predict` on the hot path takes a `PredictRequest` serialized once per payload
(tensors as `TensorProto` with `tensor_content`, see `tensor_proto`). Every call is sent as
bytes under the method path the generated protos name. `TfsGrpcClient` is the codec on
grpc.aio channels; the Locust users put the same codec on blocking grpcio channels.

The generated protos import all of TensorFlow (2-3 s), so they are imported on first use
(`load_apis`), not when servebench.clients is imported. Byte counts are the serialized
PredictRequest / PredictResponse sizes (see `grpc_calls`), without gRPC/HTTP/2 framing.
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, TensorSpec
from servebench.clients.codec import GrpcCall, GrpcCodec
from servebench.clients.grpc_calls import method_path
from servebench.clients.grpc_model_client import GrpcModelClient
from servebench.clients.tfs_signature import DEFAULT_SIGNATURE, tfs_signature


@functools.cache
def load_apis() -> SimpleNamespace:
    """The generated TF Serving modules, imported once, on first use (this imports
    TensorFlow, through servebench.common's quiet import so its CPU-only start-up lines stay off
    the terminal)."""
    from google.protobuf import json_format, wrappers_pb2

    from servebench.common.tf_runtime import import_tensorflow

    import_tensorflow()
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_pb2,
        model_service_pb2,
        predict_pb2,
        prediction_service_pb2,
    )

    from servebench.clients import tensor_proto

    return SimpleNamespace(
        json_format=json_format,
        wrappers=wrappers_pb2,
        metadata=get_model_metadata_pb2,
        status=get_model_status_pb2,
        model=model_pb2,
        predict=predict_pb2,
        status_path=method_path(model_service_pb2.DESCRIPTOR, "ModelService", "GetModelStatus"),
        metadata_path=method_path(
            prediction_service_pb2.DESCRIPTOR, "PredictionService", "GetModelMetadata"
        ),
        predict_path=method_path(prediction_service_pb2.DESCRIPTOR, "PredictionService", "Predict"),
        tensor_proto=tensor_proto,
    )


class TfsGrpcCodec(GrpcCodec):
    """Requests to and answers from one TF Serving model over gRPC.

    `signature_name` is the SignatureDef to call. Building one imports nothing heavy; the
    first request built or read loads the protos (`load`).
    """

    server = "TF Serving"
    integer_versions = True
    # Typed in rather than read from the protos, so that sniffing imports no TensorFlow.
    probe_path = "/tensorflow.serving.ModelService/GetModelStatus"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        signature_name: str = DEFAULT_SIGNATURE,
    ) -> None:
        super().__init__(url, model, version)
        self.signature_name = signature_name

    @classmethod
    def load(cls) -> None:
        load_apis()

    @property
    def infer_path(self) -> str:
        return load_apis().predict_path

    @property
    def infer_response(self) -> Any:
        return load_apis().predict.PredictResponse

    def _model_spec(self, apis: SimpleNamespace) -> Any:
        return model_spec(apis, self.model, self.version, self.signature_name)

    def read_signature(self) -> Generator[GrpcCall, Any, ModelSignature]:
        apis = load_apis()
        spec = self._model_spec(apis)
        status = yield GrpcCall(
            apis.status_path,
            apis.status.GetModelStatusRequest(model_spec=spec).SerializeToString(),
            apis.status.GetModelStatusResponse,
        )
        check_available(apis, status, self.where)
        metadata = yield GrpcCall(
            apis.metadata_path,
            apis.metadata.GetModelMetadataRequest(
                model_spec=spec, metadata_field=["signature_def"]
            ).SerializeToString(),
            apis.metadata.GetModelMetadataResponse,
        )
        return signature_from_metadata(
            apis, metadata, self.model, self.signature_name, self.version, self.where
        )

    def _encode(self, signature: ModelSignature, inputs: Mapping[str, np.ndarray]) -> bytes:
        apis = load_apis()
        request = apis.predict.PredictRequest(model_spec=self._model_spec(apis))
        for name, array in inputs.items():
            request.inputs[name].CopyFrom(apis.tensor_proto.to_tensor_proto(array))
        return request.SerializeToString()

    def _read(self, response: Any, specs: tuple[TensorSpec, ...]) -> dict[str, Any]:
        return decode_outputs(load_apis(), response, specs, self.where)


class TfsGrpcClient(GrpcModelClient):
    """Predict with one TF Serving model over gRPC; `signature_name` goes to `TfsGrpcCodec`
    (channels and timeouts: `GrpcModelClient`)."""

    codec_class = TfsGrpcCodec


def model_spec(apis: SimpleNamespace, model: str, version: str, signature_name: str) -> Any:
    """The `ModelSpec` naming a model (and version, when one is given)."""
    spec = apis.model.ModelSpec(name=model, signature_name=signature_name)
    if version:
        spec.version.CopyFrom(apis.wrappers.Int64Value(value=int(version)))
    return spec


def check_available(apis: SimpleNamespace, status: Any, where: str) -> None:
    """Raise SERVER_ERROR unless a GetModelStatusResponse lists a version AVAILABLE."""
    available = apis.status.ModelVersionStatus.State.Value("AVAILABLE")
    if not any(v.state == available for v in status.model_version_status):
        listed = (
            ", ".join(
                f"{v.version}: {apis.status.ModelVersionStatus.State.Name(v.state)}"
                for v in status.model_version_status
            )
            or "no versions"
        )
        raise InferenceError(ErrorKind.SERVER_ERROR, f"{where}: no version AVAILABLE ({listed})")


def signature_from_metadata(
    apis: SimpleNamespace,
    metadata: Any,
    model: str,
    signature_name: str,
    version: str,
    where: str,
) -> ModelSignature:
    """The signature in a GetModelMetadataResponse (its packed `SignatureDefMap`)."""
    signature_map = apis.metadata.SignatureDefMap()
    if "signature_def" not in metadata.metadata or not metadata.metadata["signature_def"].Unpack(
        signature_map
    ):
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: metadata holds no SignatureDefMap")
    as_json = apis.json_format.MessageToDict(signature_map, preserving_proto_field_name=True)
    answered = str(metadata.model_spec.version.value or version)
    return tfs_signature(model, as_json, signature_name, answered)


def decode_outputs(
    apis: SimpleNamespace, response: Any, specs: tuple[TensorSpec, ...], where: str
) -> dict[str, Any]:
    """The expected outputs a PredictResponse holds, as arrays (absent ones left out)."""
    outputs = {}
    for spec in specs:
        if spec.name in response.outputs:
            try:
                outputs[spec.name] = apis.tensor_proto.from_tensor_proto(
                    response.outputs[spec.name]
                )
            except ValueError as exc:
                raise InferenceError(
                    ErrorKind.BAD_RESPONSE, f"{where}: output {spec.name!r}: {exc}"
                ) from exc
    return outputs
