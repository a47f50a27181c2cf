"""A Triton model's metadata and config (JSON, as both front ends return them) → ModelSignature.

The HTTP front end returns shapes as numbers; tritonclient's gRPC `as_json=True` returns
int64s as strings and leaves out zero fields (`max_batch_size` 0). Both come through here.
With max_batch_size > 0 the metadata shapes carry the batch dimension (-1) first; config
dims do not, so the metadata shape minus its first entry is the per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from servebench.clients.base import ModelSignature, TensorSpec


def triton_signature(
    metadata: Mapping[str, Any], config: Mapping[str, Any], version: str | None = None
) -> ModelSignature:
    """Raise ValueError (naming the model and tensor) for what servebench cannot batch."""
    name = str(metadata.get("name", config.get("name", "")))
    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    inputs = tuple(_tensor(name, t, max_batch_size) for t in metadata.get("inputs", ()))
    outputs = tuple(_tensor(name, t, max_batch_size) for t in metadata.get("outputs", ()))
    if not inputs or not outputs:
        raise ValueError(f"model {name!r}: metadata lists no inputs or no outputs")
    versions = [str(v) for v in metadata.get("versions", ())]
    if version:
        chosen = str(version)
    else:
        chosen = max(versions, key=lambda v: int(v) if v.isdigit() else -1, default="")
    return ModelSignature(
        name=name, inputs=inputs, outputs=outputs, version=chosen, max_batch_size=max_batch_size
    )


def _tensor(model: str, tensor: Mapping[str, Any], max_batch_size: int) -> TensorSpec:
    tensor_name = str(tensor["name"])
    shape = tuple(int(d) for d in tensor.get("shape", ()))
    datatype = str(tensor["datatype"])
    dtype = triton_to_np_dtype(datatype)
    if dtype is None:
        raise ValueError(f"model {model!r}: tensor {tensor_name!r} has unknown datatype {datatype}")
    # Without Triton batching the model itself must take the batch as a dynamic first dim.
    if not shape or (max_batch_size == 0 and shape[0] != -1):
        raise ValueError(
            f"model {model!r}: tensor {tensor_name!r} of shape {list(shape)} has no batch "
            "dimension (max_batch_size 0 and no leading -1); servebench sends batches"
        )
    return TensorSpec(name=tensor_name, dtype=np.dtype(dtype).name, shape=shape[1:])
