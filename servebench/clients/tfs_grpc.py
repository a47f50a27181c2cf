"""TF Serving's gRPC API: `PredictionService` and `ModelService` from tensorflow-serving-api.

`connect()` asks `ModelService.GetModelStatus` whether a version is AVAILABLE and reads the
signature with `PredictionService.GetModelMetadata` (the `signature_def` field), through
the generated stubs. `Predict` on the hot path takes a `PredictRequest` serialized once
per payload (tensors as `TensorProto` with `tensor_content`, see `tensor_proto`), sent as
bytes on the same channel under the stub's method path.

The generated protos import all of TensorFlow (2-3 s), so they are imported in
`connect()`, not when servebench.clients is imported. Byte counts are the serialized
PredictRequest / PredictResponse sizes (see `grpc_calls`), without gRPC/HTTP/2 framing.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import grpc

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
from servebench.clients.tfs_signature import DEFAULT_SIGNATURE, tfs_signature


def load_apis() -> SimpleNamespace:
    """The generated TF Serving modules, imported on first use (this imports TensorFlow,
    through model_zoo's quiet import so its CPU-only start-up lines stay off the terminal)."""
    from google.protobuf import json_format, wrappers_pb2

    from model_zoo.tf_runtime import import_tensorflow

    import_tensorflow()
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_pb2,
        model_service_pb2_grpc,
        predict_pb2,
        prediction_service_pb2,
        prediction_service_pb2_grpc,
    )

    from servebench.clients import tensor_proto

    return SimpleNamespace(
        json_format=json_format,
        wrappers=wrappers_pb2,
        metadata=get_model_metadata_pb2,
        status=get_model_status_pb2,
        model=model_pb2,
        model_service=model_service_pb2_grpc,
        predict=predict_pb2,
        prediction_service=prediction_service_pb2_grpc,
        predict_path=method_path(prediction_service_pb2.DESCRIPTOR, "PredictionService", "Predict"),
        tensor_proto=tensor_proto,
    )


class TfsGrpcClient(GrpcModelClient):
    """Predict with one TF Serving model over gRPC.

    `channels` > 1 spreads requests round-robin over that many HTTP/2 connections.
    `timeout` is each request's gRPC deadline (None: the load engine's own timeout
    applies); `connect_timeout` bounds each control call in `connect()`. A given
    `signature` is trusted as the expected answer and `connect()` then asks the server
    nothing.
    """

    server = "TF Serving"
    integer_versions = True

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        signature_name: str = DEFAULT_SIGNATURE,
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
        self.signature_name = signature_name
        self._apis: SimpleNamespace | None = None

    async def connect(self) -> None:
        """Open the channels and read the signature (unless given); InferenceError on failure."""
        if self._calls:
            return
        apis = self._apis = self._apis or load_apis()
        channels = open_channels(self.target, self.channels)
        try:
            if self._signature is None:
                self._signature = await self._read_signature(apis, channels[0])
        except BaseException:
            for channel in channels:
                await channel.close()
            raise
        self._use_channels(channels, apis.predict_path, apis.predict.PredictResponse)

    def _model_spec(self, apis: SimpleNamespace) -> Any:
        return model_spec(apis, self.model, self.version, self.signature_name)

    async def _read_signature(
        self, apis: SimpleNamespace, channel: grpc.aio.Channel
    ) -> ModelSignature:
        timeout = self.connect_timeout
        model_spec = self._model_spec(apis)
        try:
            status = await apis.model_service.ModelServiceStub(channel).GetModelStatus(
                apis.status.GetModelStatusRequest(model_spec=model_spec), timeout=timeout
            )
            check_available(apis, status, self._where)
            metadata = await apis.prediction_service.PredictionServiceStub(
                channel
            ).GetModelMetadata(
                apis.metadata.GetModelMetadataRequest(
                    model_spec=model_spec, metadata_field=["signature_def"]
                ),
                timeout=timeout,
            )
        except grpc.aio.AioRpcError as exc:
            raise grpc_failure(exc.code().name, exc.details() or "", self._where) from exc
        return signature_from_metadata(
            apis, metadata, self.model, self.signature_name, self.version, self._where
        )

    def make_payload(self, batch_size: int, seed: int = 0) -> Payload:
        """Works before connect() when a signature was given, as the other clients do."""
        signature = self._require_signature()
        apis = self._apis = self._apis or load_apis()
        check_batch_size(signature, batch_size)
        arrays = random_inputs(signature.inputs, batch_size, seed)
        request = apis.predict.PredictRequest(model_spec=self._model_spec(apis))
        for name, array in arrays.items():
            request.inputs[name].CopyFrom(apis.tensor_proto.to_tensor_proto(array))
        encoded = request.SerializeToString()
        return Payload(
            batch_size=batch_size, inputs=arrays, encoded=encoded, request_bytes=len(encoded)
        )

    def _decode(self, response: Any, specs: tuple[TensorSpec, ...]) -> dict[str, Any]:
        return decode_outputs(self._apis, response, specs, self._where)


# Functions rather than methods, so that callers with another transport (the Locust users'
# sync gRPC stubs under gevent) build requests and read answers exactly as the client does.


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
