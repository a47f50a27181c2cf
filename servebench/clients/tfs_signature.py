"""A TF Serving model's signature_def (as JSON) → ModelSignature, and TF dtype names.

TF Serving's REST `/metadata` returns `{"metadata": {"signature_def": <SignatureDefMap as
JSON>}}` (proto field names kept, int64 sizes as strings); the gRPC client turns the
`SignatureDefMap` it unpacks into the same JSON, so one parser serves both. This module
must not import TensorFlow: the REST client never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servebench.clients.base import ModelSignature, TensorSpec

# tensorflow/core/framework/types.proto names → numpy dtype names, for the types the
# REST JSON mapping and servebench's payloads support.
TF_TO_NUMPY: dict[str, str] = {
    "DT_FLOAT": "float32",
    "DT_DOUBLE": "float64",
    "DT_HALF": "float16",
    "DT_INT8": "int8",
    "DT_INT16": "int16",
    "DT_INT32": "int32",
    "DT_INT64": "int64",
    "DT_UINT8": "uint8",
    "DT_UINT16": "uint16",
    "DT_UINT32": "uint32",
    "DT_UINT64": "uint64",
    "DT_BOOL": "bool",
}
NUMPY_TO_TF: dict[str, str] = {v: k for k, v in TF_TO_NUMPY.items()}
DEFAULT_SIGNATURE = "serving_default"


def tfs_signature(
    model: str,
    signature_def_map: Mapping[str, Any],
    signature_name: str = DEFAULT_SIGNATURE,
    version: str = "",
) -> ModelSignature:
    """Raise ValueError naming the model, signature and tensor for what cannot be used.

    TF Serving states no batch limit, so `max_batch_size` stays 0 (none stated).
    """
    defs = signature_def_map.get("signature_def", {})
    if signature_name not in defs:
        known = ", ".join(sorted(k for k in defs if not k.startswith("__"))) or "none"
        raise ValueError(
            f"model {model!r}: no signature {signature_name!r} (the model has: {known})"
        )
    signature = defs[signature_name]
    where = f"model {model!r} signature {signature_name!r}"
    inputs = _tensors(where, signature.get("inputs", {}))
    outputs = _tensors(where, signature.get("outputs", {}))
    if not inputs or not outputs:
        raise ValueError(f"{where}: lists no inputs or no outputs")
    return ModelSignature(name=model, inputs=inputs, outputs=outputs, version=str(version or ""))


def _tensors(where: str, infos: Mapping[str, Any]) -> tuple[TensorSpec, ...]:
    return tuple(_tensor(where, key, infos[key]) for key in sorted(infos))


def _tensor(where: str, key: str, info: Mapping[str, Any]) -> TensorSpec:
    dtype = TF_TO_NUMPY.get(str(info.get("dtype")))
    if dtype is None:
        raise ValueError(f"{where}: tensor {key!r} has unsupported dtype {info.get('dtype')}")
    shape_info = info.get("tensor_shape", {})
    dims = tuple(int(d.get("size", -1)) for d in shape_info.get("dim", ()))
    if shape_info.get("unknown_rank") or not dims or dims[0] != -1:
        raise ValueError(
            f"{where}: tensor {key!r} of shape {list(dims)} has no dynamic batch dimension "
            "first; servebench sends batches"
        )
    return TensorSpec(name=key, dtype=dtype, shape=dims[1:])
