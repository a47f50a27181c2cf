"""One minimal inference request per server API, built from the model's own metadata.

Cold start needs "how long does the first request take, and a warm one" without the load
generator (servers sit below `load` and `clients`). The payload is random data of batch 1
in the shape and type the server reports. Triton gets its binary tensor extension (no JSON
encoding of the tensor, so a 224x224 image costs the client nothing measurable); TF
Serving gets its REST `predict` with the columnar `inputs` form.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np

from servebench.servers import control
from servebench.servers.base import Server, ServerEndpoints, ServerModelError

_TRITON_DTYPES = {
    "FP32": np.float32,
    "FP16": np.float16,
    "FP64": np.float64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}
_TFS_DTYPES = {
    "DT_FLOAT": np.float32,
    "DT_HALF": np.float16,
    "DT_DOUBLE": np.float64,
    "DT_INT32": np.int32,
    "DT_INT64": np.int64,
    "DT_UINT8": np.uint8,
    "DT_INT8": np.int8,
    "DT_BOOL": np.bool_,
}


@dataclass(frozen=True)
class InferenceProbe:
    """A ready-made request to one model; `send()` returns its latency in seconds."""

    url: str
    body: bytes
    headers: dict[str, str]
    model: str
    timeout_s: float = 120.0

    @classmethod
    def for_server(cls, server: Server, model: str, seed: int = 0) -> InferenceProbe:
        ep = server.endpoints
        rng = np.random.default_rng(seed)
        if ep.api == "triton":
            return _triton_probe(ep, model, rng)
        return _tfs_probe(ep, model, rng)

    def send(self) -> float:
        started = time.perf_counter()
        try:
            status, body, _ = control.request(
                "POST", self.url, body=self.body, headers=self.headers, timeout_s=self.timeout_s
            )
        except OSError as err:
            raise ServerModelError(f"{self.url}: inference got no answer ({err})") from None
        elapsed = time.perf_counter() - started
        if status != 200:
            raise ServerModelError(
                f"{self.url}: inference failed with HTTP {status}: {control.error_text(body)}"
            )
        return elapsed


def _concrete(shape: list[int]) -> list[int]:
    """Batch 1 and size 1 for every other dynamic (-1) dimension."""
    return [1 if d < 0 else int(d) for d in shape]


def _random(rng: np.random.Generator, shape: list[int], dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype is np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 8, shape).astype(dtype)


def _metadata(url: str, what: str) -> dict:
    status, body, _ = control.request("GET", url, timeout_s=10.0)
    if status != 200:
        raise ServerModelError(f"{what}: metadata request failed with HTTP {status}: "
                               f"{control.error_text(body)}")  # fmt: skip
    return json.loads(body)


def _triton_probe(ep: ServerEndpoints, model: str, rng: np.random.Generator) -> InferenceProbe:
    base = f"{ep.http_url}/v2/models/{control.quote(model)}"
    meta = _metadata(base, f"model {model!r}")
    header: dict = {"inputs": [], "outputs": []}
    blobs = []
    for tensor in meta.get("inputs", []):
        dtype = _TRITON_DTYPES.get(tensor["datatype"])
        if dtype is None:
            raise ServerModelError(
                f"model {model!r}: input {tensor['name']!r} has datatype {tensor['datatype']}, "
                "which the cold-start probe does not generate"
            )
        data = _random(rng, _concrete(tensor["shape"]), dtype)
        blob = data.tobytes()
        header["inputs"].append({
            "name": tensor["name"],
            "shape": list(data.shape),
            "datatype": tensor["datatype"],
            "parameters": {"binary_data_size": len(blob)},
        })  # fmt: skip
        blobs.append(blob)
    for tensor in meta.get("outputs", []):
        header["outputs"].append({"name": tensor["name"], "parameters": {"binary_data": True}})
    head = json.dumps(header).encode()
    return InferenceProbe(
        url=f"{base}/infer",
        body=head + b"".join(blobs),
        headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head)),
        },
        model=model,
    )


def _tfs_probe(ep: ServerEndpoints, model: str, rng: np.random.Generator) -> InferenceProbe:
    base = f"{ep.http_url}/v1/models/{control.quote(model)}"
    meta = _metadata(f"{base}/metadata", f"model {model!r}")
    try:
        signature = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    except KeyError:
        raise ServerModelError(f"model {model!r}: no serving_default signature") from None
    inputs = {}
    for name, tensor in signature.get("inputs", {}).items():
        dtype = _TFS_DTYPES.get(tensor.get("dtype", ""))
        if dtype is None:
            raise ServerModelError(
                f"model {model!r}: input {name!r} has dtype {tensor.get('dtype')}, "
                "which the cold-start probe does not generate"
            )
        dims = [int(d.get("size", -1)) for d in tensor.get("tensor_shape", {}).get("dim", [])]
        inputs[name] = _random(rng, _concrete(dims), dtype).tolist()
    return InferenceProbe(
        url=f"{base}:predict",
        body=json.dumps({"inputs": inputs}).encode(),
        headers={"Content-Type": "application/json"},
        model=model,
    )
