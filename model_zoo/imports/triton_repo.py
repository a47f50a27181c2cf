"""An existing Triton model folder (or a repository holding one): used as it is.

Its `config.pbtxt` (parsed by the exporter's own `parse_config`) gives the signature and
stays the user's: batching, instances and every other field are kept. A model on the
onnxruntime platform also gets the python-backend twin, the same config on the backend the
local tritonserver has; a python-backend model runs on both as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import numpy as np

from model_zoo.export.triton import CONFIG_FILENAME, ONNX_FILENAME, TritonConfigError, parse_config
from model_zoo.imports.onnx_file import OnnxSource
from model_zoo.imports.signature import (
    DYNAMIC,
    ModelImportError,
    Signature,
    Tensor,
    user_file_refused,
)
from model_zoo.imports.source import ModelSource, Unconvertible
from model_zoo.parity import run_onnx_feeds
from servebench.common.textfile import read_text
from servebench.common.userfile import copy_folder

ONNX_PLATFORM = "onnxruntime_onnx"
PYTHON_MODEL_FILE = "model.py"


def model_folder(path: Path) -> Path:
    """The model folder `path` is or holds (a repository with one model)."""
    if (path / CONFIG_FILENAME).is_file():
        return path
    configs = sorted(path.glob(f"*/{CONFIG_FILENAME}"))
    if len(configs) == 1:
        return configs[0].parent
    if configs:
        names = ", ".join(c.parent.name for c in configs)
        raise ModelImportError(f"{path}: a repository of {len(configs)} models ({names}); give one")
    raise ModelImportError(f"{path}: no {CONFIG_FILENAME} (not a Triton model folder)")


class TritonModelSource(ModelSource):
    format = "triton"
    label = "Triton repository"
    framework = "onnxruntime"

    @cached_property
    def folder(self) -> Path:
        return model_folder(self.path)

    def default_name(self) -> str:
        return self.config.name or self.folder.name

    @cached_property
    def config(self):
        path = self.folder / CONFIG_FILENAME
        try:
            return parse_config(read_text(path), where=str(path))
        except (TritonConfigError, OSError, ValueError) as err:
            raise ModelImportError(str(err)) from None

    @property
    def is_onnx(self) -> bool:
        return self.config.platform == ONNX_PLATFORM or self.config.backend == "onnxruntime"

    @property
    def is_python(self) -> bool:
        return self.config.backend == "python"

    @cached_property
    def model_file(self) -> Path:
        """The newest version's model file (Triton serves the newest by default)."""
        versions = sorted(
            (p for p in self.folder.iterdir() if p.is_dir() and p.name.isdigit()),
            key=lambda p: int(p.name),
        )
        default = PYTHON_MODEL_FILE if self.is_python else ONNX_FILENAME
        filename = self.config.default_model_filename or default
        if not versions or not (versions[-1] / filename).is_file():
            raise ModelImportError(f"{self.folder}: no <version>/{filename} beside its config")
        return versions[-1] / filename

    def signature(self) -> Signature:
        from tritonclient.grpc import model_config_pb2 as mc
        from tritonclient.utils import triton_to_np_dtype

        batch = (DYNAMIC,) if self.config.max_batch_size > 0 else ()

        def tensor(item) -> Tensor:
            triton_type = mc.DataType.Name(item.data_type).removeprefix("TYPE_")
            dtype = np.dtype(triton_to_np_dtype(triton_type.replace("STRING", "BYTES"))).name
            return Tensor(item.name, dtype, (*batch, *item.dims))

        signature = Signature(
            tuple(tensor(t) for t in self.config.input),
            tuple(tensor(t) for t in self.config.output),
        )
        model_file = self.model_file  # a folder without its model is refused here
        if self.is_onnx:
            graph = OnnxSource(model_file, {}, self.limit).signature()
            self._check_against(graph, signature, model_file)
        return signature

    def _check_against(self, graph: Signature, config: Signature, model_file: Path) -> None:
        """The config's tensors must be the ONNX graph's: Triton refuses the model otherwise,
        much later, in its log."""
        for kind, ours, theirs in (
            ("input", config.inputs, graph.inputs),
            ("output", config.outputs, graph.outputs),
        ):
            names = [t.name for t in theirs]
            for tensor in ours:
                if tensor.name not in names:
                    raise ModelImportError(
                        f"{self.folder / CONFIG_FILENAME}: {kind} {tensor.name!r} is not in "
                        f"{model_file} (its {kind}s: {', '.join(names)})"
                    )

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_onnx_feeds(self.model_file, feeds)

    def write_onnx(self, target: Path) -> bool:
        if not self.is_onnx:
            raise Unconvertible(
                f"{self.folder}: platform {self.config.platform or self.config.backend!r} is "
                "copied as it is; only ONNX models get the local python-backend twin"
            )
        return OnnxSource(self.model_file, {}, self.limit).write_onnx(target)

    def copy_folder(self, target: Path) -> None:
        """The user's model folder, every version and file, into `target`: its files and
        folders only (`servebench.common.userfile.copy_folder` refuses a link or device
        found there, and holds the copy to the model limit)."""
        with user_file_refused():
            copy_folder(self.folder, target, self.limit)
