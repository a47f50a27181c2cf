"""Triton's and TF Serving's real gRPC answers for model `m`, served by nginx (issue 16).

`loadgen_peers.py`'s gRPC rows need a server that costs almost nothing, or the generator's
rate is the server's. A Python gRPC server is not that: grpc.aio answering cached bytes
(identity serializers, no protobuf per request) held 7.7k req/s on its own core, at
0.8-1.0 of that core, against servebench's triton-grpc. nginx is: it speaks HTTP/2 in
cleartext (prior knowledge, as gRPC clients do), answers a POST with a file's bytes
(`error_page 405 =200 $uri`) and the `grpc-status: 0` trailer (`add_trailer`), so each
method path is a file holding its response message serialized once, behind the gRPC
5-byte prefix, with `content-type: application/grpc`. The clients decode and check every
answer as they do a real server's. Model `m`: one FP32 input and output of shape [-1, 4].
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

MODEL = "m"
OUTPUT = np.arange(4, dtype=np.float32).reshape(1, 4) + 0.5


def triton_answers() -> dict[str, bytes]:
    """Triton's GRPCInferenceService answers for model `m`, by method path."""
    from tritonclient.grpc import model_config_pb2, service_pb2

    tensor = {"datatype": "FP32", "shape": [-1, 4]}
    metadata = service_pb2.ModelMetadataResponse(
        name=MODEL,
        versions=["1"],
        platform="onnxruntime_onnx",
        inputs=[service_pb2.ModelMetadataResponse.TensorMetadata(name="input", **tensor)],
        outputs=[service_pb2.ModelMetadataResponse.TensorMetadata(name="output", **tensor)],
    )
    config = service_pb2.ModelConfigResponse(
        config=model_config_pb2.ModelConfig(name=MODEL, max_batch_size=8)
    )
    infer = service_pb2.ModelInferResponse(model_name=MODEL, model_version="1")
    infer.outputs.add(name="output", datatype="FP32", shape=OUTPUT.shape)
    infer.raw_output_contents.append(OUTPUT.tobytes())
    prefix = "/inference.GRPCInferenceService/"
    return {
        prefix + "ServerLive": service_pb2.ServerLiveResponse(live=True).SerializeToString(),
        prefix + "ModelMetadata": metadata.SerializeToString(),
        prefix + "ModelConfig": config.SerializeToString(),
        prefix + "ModelReady": service_pb2.ModelReadyResponse(ready=True).SerializeToString(),
        prefix + "ModelInfer": infer.SerializeToString(),
    }


def tfs_answers() -> dict[str, bytes]:
    """TF Serving's ModelService / PredictionService answers for model `m`, by method path."""
    from servebench.clients.tfs_grpc import load_apis

    apis = load_apis()
    from tensorflow.core.framework import tensor_shape_pb2, types_pb2
    from tensorflow.core.protobuf import meta_graph_pb2
    from tensorflow_serving.apis import get_model_metadata_pb2

    status = apis.status.GetModelStatusResponse()
    status.model_version_status.add(
        version=1, state=apis.status.ModelVersionStatus.State.Value("AVAILABLE")
    )
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1), {"size": 4}]
    )
    info = {"dtype": types_pb2.DT_FLOAT, "tensor_shape": shape}
    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    signature.inputs["input"].CopyFrom(meta_graph_pb2.TensorInfo(name="input:0", **info))
    signature.outputs["output"].CopyFrom(meta_graph_pb2.TensorInfo(name="output:0", **info))
    signatures = get_model_metadata_pb2.SignatureDefMap()
    signatures.signature_def["serving_default"].CopyFrom(signature)
    metadata = apis.metadata.GetModelMetadataResponse()
    metadata.model_spec.name = MODEL
    metadata.model_spec.version.value = 1
    metadata.metadata["signature_def"].Pack(signatures)
    predict = apis.predict.PredictResponse()
    predict.model_spec.name = MODEL
    predict.outputs["output"].CopyFrom(apis.tensor_proto.to_tensor_proto(OUTPUT))
    return {
        apis.status_path: status.SerializeToString(),
        apis.metadata_path: metadata.SerializeToString(),
        apis.predict_path: predict.SerializeToString(),
    }


def frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message (uncompressed)."""
    return b"\0" + struct.pack(">I", len(message)) + message


def write_answers(root: Path) -> dict[str, bytes]:
    """Each method's framed answer as the file `root/<package.Service>/<Method>`."""
    answers = {**triton_answers(), **tfs_answers()}
    for path, message in answers.items():
        file = root / path.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(frame(message))
    return answers


def nginx_server(port: int, root: Path) -> str:
    """An nginx `server` block answering every written method on 127.0.0.1:`port` (h2c)."""
    return f"""
  server {{
    listen 127.0.0.1:{port} http2 backlog=4096;
    http2_max_concurrent_streams 1024;
    root {root};
    location / {{
      default_type application/grpc;
      add_trailer grpc-status 0;
      error_page 405 =200 $uri;
    }}
  }}
"""


def infer_request(protocol: str) -> tuple[str, bytes]:
    """The method path and framed request servebench's codec sends for one inference row."""
    from servebench.clients.base import random_inputs
    from servebench.clients.registry import protocol as find

    codec = find(protocol).codec_class()("127.0.0.1:1", MODEL, version=None)
    answers = triton_answers() if protocol == "triton-grpc" else tfs_answers()
    signature = _signature(codec, answers)
    payload = codec.encode(signature, 1, random_inputs(signature.inputs, 1))
    return codec.infer_path, frame(payload.encoded)


def _signature(codec, answers: dict[str, bytes]):
    """The signature the codec reads from the control answers (its own generator, fed)."""
    calls = codec.read_signature()
    call = next(calls)
    try:
        while True:
            call = calls.send(call.response.FromString(answers[call.path]))
    except StopIteration as done:
        return done.value
