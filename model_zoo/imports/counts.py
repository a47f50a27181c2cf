"""Parameters, FLOPs and bytes of an ONNX graph, for a user's model the zoo did not build.

A generated model is counted from its spec (`model_zoo.counting`); an imported one only
has its graph. The counts follow the same conventions so the roofline can put both on one
plot: parameters are the floating-point initializers' (and Constant nodes') elements
(weights and biases), weight bytes their size; FLOPs are 2 x the multiply-accumulates of MatMul, Gemm and Conv nodes (what
`torch.utils.flop_counter` and `counting` count; bias adds, activations, norms, pooling
and softmax are not), read off ONNX shape inference with the batch axis set to 1, so they
are per sample; activation bytes are the inputs plus those nodes' outputs, per sample.

A graph whose counted nodes' shapes inference cannot pin down (a dimension only the data
decides) gets no FLOPs and no activation bytes: an unknown, never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model_zoo.imports.onnx_file import read_graph
from model_zoo.imports.source import model_limit
from servebench.common.userfile import ByteLimit

COUNTED_OPS = ("MatMul", "Gemm", "Conv")
# Ops that multiply weights too but whose cost is not counted here: a graph holding one
# has unknown FLOPs (an LSTM node counted as zero put a recurrent model ~200x low on the
# roofline), never a partial sum shown as the whole.
UNCOUNTED_HEAVY_OPS = frozenset(
    {"LSTM", "GRU", "RNN", "Einsum", "ConvTranspose", "ConvInteger", "MatMulInteger",
     "QLinearConv", "QLinearMatMul", "Attention", "MultiHeadAttention"}
)  # fmt: skip


@dataclass(frozen=True)
class GraphCounts:
    """What the graph allows to count; None where it does not."""

    params: int | None = None
    weight_bytes: int | None = None
    flops: int | None = None  # per sample
    activation_bytes: int | None = None  # per sample


def count_onnx(
    path: Path,
    input_shapes: Mapping[str, tuple[int, ...]],
    batched: bool,
    limit: ByteLimit | None = None,
) -> GraphCounts:
    """Count the ONNX file at `path` (within `limit`, as `onnx_file.read_graph` checks),
    its inputs fixed to `input_shapes` (per sample)."""
    from onnx import shape_inference

    model = read_graph(path, limit or model_limit())
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    # Floating-point initializers are the weights; integer ones are shapes and indices
    # (a Reshape's target, a Gather's positions) the exporter wrote as constants. Counted
    # from their dims and types: their bytes may be external data, which is never loaded.
    tensors = [*graph.initializer]
    tensors += [  # a Constant node's tensor is a weight the exporter did not make an initializer
        attribute.t
        for node in graph.node
        if node.op_type == "Constant"
        for attribute in node.attribute
        if attribute.name == "value"
    ]
    floats = [
        (math.prod(t.dims), dtype) for t in tensors if (dtype := _dtype(t.data_type)).kind == "f"
    ]
    params = sum(elements for elements, _ in floats)
    weight_bytes = sum(elements * dtype.itemsize for elements, dtype in floats)
    for value in graph.input:
        if value.name in weights or value.name not in input_shapes:
            continue
        dims = (1, *input_shapes[value.name]) if batched else input_shapes[value.name]
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for dim in dims:
            shape.dim.add().dim_value = dim
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an op inference does not know, among others: counts stay unknown
        return GraphCounts(params, weight_bytes)
    shapes = {
        v.name: _dims(v)
        for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)
    }
    shapes.update({name: tuple(init.dims) for name, init in weights.items()})
    itemsize = {v.name: _itemsize(v) for v in (*inferred.graph.value_info, *inferred.graph.output)}
    macs, activations = 0, 0
    for value in graph.input:
        if value.name not in weights:
            dims = shapes.get(value.name)
            if dims is None:
                return GraphCounts(params, weight_bytes)
            activations += math.prod(dims) * _itemsize(value)
    if any(node.op_type in UNCOUNTED_HEAVY_OPS for node in graph.node):
        return GraphCounts(params, weight_bytes)
    for node in graph.node:
        if node.op_type not in COUNTED_OPS:
            continue
        out = shapes.get(node.output[0])
        operands = [shapes.get(name) for name in node.input[:2]]
        if out is None or any(o is None for o in operands):
            return GraphCounts(params, weight_bytes)
        macs += _macs(node, operands, out)
        activations += math.prod(out) * itemsize.get(node.output[0], 4)
    return GraphCounts(params, weight_bytes, 2 * macs, activations)


def _macs(node, operands: list[tuple[int, ...]], out: tuple[int, ...]) -> int:
    """Multiply-accumulates of one counted node from its operands' and output's shapes."""
    if node.op_type == "Conv":
        weight = operands[1]  # (out channels, in channels / group, *kernel)
        return math.prod(out) * math.prod(weight[1:])
    if node.op_type == "Gemm":
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        a = operands[0]
        inner = a[0] if trans_a else a[-1]
        return math.prod(out) * inner
    return math.prod(out) * operands[0][-1]  # MatMul: every output element is a dot product


def _dims(value) -> tuple[int, ...] | None:
    """A value's static shape, or None where a dimension is symbolic or missing."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = []
    for dim in tensor.shape.dim:
        if not dim.HasField("dim_value"):
            return None
        dims.append(dim.dim_value)
    return tuple(dims)


def _itemsize(value) -> int:
    dtype = _dtype(value.type.tensor_type.elem_type)
    return dtype.itemsize if dtype.kind != "V" else 4


def _dtype(element: int) -> np.dtype:
    """numpy's dtype for an ONNX element type; void for one numpy has no name for."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(element))
    except (KeyError, TypeError):
        return np.dtype("V1")
