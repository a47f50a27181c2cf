"""numpy arrays ↔ TensorFlow `TensorProto`s, without running TensorFlow ops.

`tf.make_tensor_proto` / `tf.make_ndarray` go through TF's Python type machinery; what TF
Serving reads is only dtype + shape + `tensor_content` (the array's little-endian bytes),
so that is what is written. Answers are read from `tensor_content` or, when a server
uses them, the typed repeated fields (`float_val`, ...), as `tf.make_ndarray` does.

Importing this module imports TensorFlow (the generated protos live in its package): the
TF Serving gRPC client imports it inside `connect()`, never at package import.
"""

from __future__ import annotations

import numpy as np
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from servebench.clients.tfs_signature import NUMPY_TO_TF, TF_TO_NUMPY

_TO_ENUM: dict[str, int] = {
    np_name: types_pb2.DataType.Value(tf) for np_name, tf in NUMPY_TO_TF.items()
}
_FROM_ENUM: dict[int, np.dtype] = {
    types_pb2.DataType.Value(tf): np.dtype(np_name).newbyteorder("<")
    for tf, np_name in TF_TO_NUMPY.items()
}
# The typed field each dtype's values live in when a server does not use tensor_content.
_VALUE_FIELD: dict[str, str] = {
    "float32": "float_val",
    "float64": "double_val",
    "float16": "half_val",  # the float16 bit patterns, one per int32
    "int8": "int_val",
    "int16": "int_val",
    "int32": "int_val",
    "uint8": "int_val",
    "uint16": "int_val",
    "int64": "int64_val",
    "uint32": "uint32_val",
    "uint64": "uint64_val",
    "bool": "bool_val",
}


def to_tensor_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """A TensorProto holding `array` in tensor_content; ValueError for unsupported dtypes."""
    dtype = array.dtype
    enum = _TO_ENUM.get(dtype.name)
    if enum is None:
        raise ValueError(f"dtype {dtype} has no TensorFlow counterpart servebench sends")
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(d)) for d in array.shape]
    )
    content = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")).tobytes()
    return tensor_pb2.TensorProto(dtype=enum, tensor_shape=shape, tensor_content=content)


def from_tensor_proto(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """The array a TensorProto holds; ValueError when it is malformed or of an unknown dtype."""
    dtype = _FROM_ENUM.get(proto.dtype)
    if dtype is None:
        raise ValueError(f"unsupported dtype {types_pb2.DataType.Name(proto.dtype)}")
    if proto.tensor_shape.unknown_rank:
        raise ValueError("tensor of unknown rank")
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content:
        if len(proto.tensor_content) != count * dtype.itemsize:
            raise ValueError(
                f"tensor_content holds {len(proto.tensor_content)} bytes, "
                f"shape {list(shape)} of {dtype.name} needs {count * dtype.itemsize}"
            )
        return np.frombuffer(proto.tensor_content, dtype=dtype).reshape(shape)
    values = getattr(proto, _VALUE_FIELD[dtype.name])
    if dtype.name == "float16":
        flat = np.array(values, dtype=np.uint16).view(np.float16)
    else:
        flat = np.array(values, dtype=dtype)
    if flat.size == count:
        return flat.reshape(shape)
    # TF's convention (tf.make_ndarray): no values is all zeros, fewer values than elements
    # repeat the last one.
    if flat.size == 0:
        return np.zeros(shape, dtype=flat.dtype)
    if flat.size < count:
        padded = np.full(count, flat[-1], dtype=flat.dtype)
        padded[: flat.size] = flat
        return padded.reshape(shape)
    raise ValueError(f"tensor holds {flat.size} values, shape {list(shape)} needs {count}")
