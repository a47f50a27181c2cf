"""An ONNX file: the signature from its graph, used as it is for Triton."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from model_zoo.imports.signature import DYNAMIC, Signature, Tensor, refused_as
from model_zoo.imports.source import ModelSource
from model_zoo.parity import run_onnx_feeds


class OnnxSource(ModelSource):
    format = "onnx"
    framework = "onnxruntime"

    def signature(self) -> Signature:
        import onnx

        with refused_as(self.path, "a readable ONNX model"):  # DecodeError, ValidationError
            model = onnx.load(str(self.path))
            onnx.checker.check_model(model)
        graph = model.graph
        weights = {init.name for init in graph.initializer}
        inputs = tuple(tensor(v) for v in graph.input if v.name not in weights)
        return Signature(inputs, tuple(tensor(v) for v in graph.output))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_onnx_feeds(self.path, feeds)

    def write_onnx(self, target: Path) -> bool:
        shutil.copyfile(self.path, target)
        return False


def tensor(value) -> Tensor:
    """A graph input or output as a `Tensor`: named and unnamed symbolic dims are dynamic."""
    import onnx

    kind = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else DYNAMIC for d in kind.shape.dim)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type)).name
    return Tensor(value.name, dtype, dims)
