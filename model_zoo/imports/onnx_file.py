"""An ONNX file: the signature from its graph, used as it is for Triton.

The graph is read without its external data (`load_external_data=False`): the tensors'
bytes are not needed for the signature or the counts, and a model past protobuf's 2 GiB
cannot be one message in memory (3.6 GB of external weights ended in a segmentation
fault). The external data is checked instead, before anything loads it: every file it
names lies inside the model's folder (no link, no `..`), each tensor's bytes lie within
its file, and the graph and its data together are within the model limit. The import
writes such a model as one file with its data inside, up to protobuf's 2 GiB.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx

# `_get_all_tensors` is onnx's own walk over initializers, attributes and subgraphs (what
# onnx.load reads external data for): private, but unchanged since onnx 1.5, and a second
# walk written here could miss a place onnx reads from.
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

from model_zoo.imports.signature import DYNAMIC, ModelImportError, Signature, Tensor, refused_as
from model_zoo.imports.source import ModelSource, Unconvertible
from model_zoo.parity import run_onnx_feeds
from servebench.common.userfile import ByteLimit, check_file, show_bytes, within

# The most bytes one protobuf message (an ONNX file with its data inside) may hold.
_PROTOBUF_MAX = 2**31 - 1


class OnnxSource(ModelSource):
    format = "onnx"
    framework = "onnxruntime"

    @cached_property
    def graph(self):
        """The model without its external data, once the file and its data passed the
        checks (`read_graph`)."""
        return read_graph(self.path, self.limit)

    def signature(self) -> Signature:
        graph = self.graph.graph
        weights = {init.name for init in graph.initializer}
        inputs = tuple(tensor(v) for v in graph.input if v.name not in weights)
        return Signature(inputs, tuple(tensor(v) for v in graph.output))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_onnx_feeds(self.path, feeds)

    def write_onnx(self, target: Path) -> bool:
        """The file as it is; a model with external data as one file, its data inside
        (the repositories hold one `model.onnx` per version). Nothing is converted, so
        there is nothing to check for parity (False)."""
        if not any(uses_external_data(t) for t in _get_all_tensors(self.graph)):
            shutil.copyfile(self.path, target)
            return False
        size = self.path.stat().st_size + external_data_bytes(self.graph, self.path)
        if size > _PROTOBUF_MAX:
            raise Unconvertible(
                f"onnx -> Triton: {show_bytes(size)} with its external data, which servebench "
                "writes as one file, of at most 2 GiB (protobuf's limit)"
            )
        with refused_as(self.path, "a readable ONNX model"):
            onnx.save(onnx.load(str(self.path)), str(target))
        return False


def read_graph(path: Path, limit: ByteLimit):
    """The ONNX model at `path` without its external data, checked by onnx's checker;
    `ModelImportError` naming the file where it is no readable model, where its external
    data is not a regular file inside its folder or declares more than its file holds,
    or where the graph and its data exceed `limit`."""
    with refused_as(path, "a readable ONNX model"):  # DecodeError, ValidationError
        size = check_file(path, limit, "an ONNX model")
        model = onnx.load(str(path), load_external_data=False)
        external = external_data_bytes(model, path)
        limit.check(path, size + external, "holds with its external data")
        onnx.checker.check_model(str(path))  # by path: it finds the external data there
    return model


def external_data_bytes(model, path: Path) -> int:
    """The bytes `model`'s external tensors take from their files (beside `path`), each
    checked: the file inside the model's folder and regular, the tensor's bytes within
    it."""
    total = 0
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        where = f"{path}: tensor {tensor.name!r}"
        info = ExternalDataInfo(tensor)
        data = within(path.parent, info.location, where)
        available = data.stat().st_size
        offset = info.offset or 0
        length = info.length if info.length is not None else available - offset
        if offset + length > available:
            raise ModelImportError(
                f"{where}: declares {length:,} bytes at offset {offset:,} of {data}, "
                f"which holds {available:,}"
            )
        total += length
    return total


def tensor(value) -> Tensor:
    """A graph input or output as a `Tensor`: named and unnamed symbolic dims are dynamic."""
    kind = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else DYNAMIC for d in kind.shape.dim)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type)).name
    return Tensor(value.name, dtype, dims)
