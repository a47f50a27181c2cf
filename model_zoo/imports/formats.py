"""The model formats `models import` reads: named once, each with how it is recognised.

Recognition is by what is on disk (a suffix, the file a folder must hold), so an
unreadable file is reported by the reader of the format it claims to be.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from model_zoo.export.triton import CONFIG_FILENAME
from model_zoo.imports.signature import ModelImportError
from model_zoo.imports.source import ModelSource


@dataclass(frozen=True)
class SourceFormat:
    name: str
    what: str  # how the user knows it, for errors and docs
    matches: Callable[[Path], bool]
    source: str  # "module:Class", imported only when this format is read


def _suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda path: path.is_file() and path.suffix.lower() in suffixes


def _holds(pattern: str) -> Callable[[Path], bool]:
    return lambda path: path.is_dir() and any(path.glob(pattern))


FORMATS = (
    SourceFormat("onnx", "an .onnx file", _suffix(".onnx"), "onnx_file:OnnxSource"),
    SourceFormat(
        "torchscript",
        "a TorchScript .pt file",
        _suffix(".pt", ".pth"),
        "torch_file:TorchScriptSource",
    ),
    SourceFormat(
        "torch-export", "a torch.export .pt2 file", _suffix(".pt2"), "torch_file:TorchExportSource"
    ),
    SourceFormat("keras", "a Keras .keras file", _suffix(".keras"), "tf_file:KerasSource"),
    SourceFormat(
        "savedmodel", "a SavedModel folder", _holds("saved_model.pb"), "tf_file:SavedModelSource"
    ),
    SourceFormat(
        "triton",
        "a Triton model folder (config.pbtxt)",
        lambda p: _holds(CONFIG_FILENAME)(p) or _holds(f"*/{CONFIG_FILENAME}")(p),
        "triton_repo:TritonModelSource",
    ),
)


def open_source(path: Path, input_shapes: Mapping[str, tuple[int, ...]]) -> ModelSource:
    """The source reading `path`, by the first format that recognises it."""
    path = Path(path)
    for fmt in FORMATS:
        if fmt.matches(path):
            module, _, name = fmt.source.partition(":")
            cls = getattr(importlib.import_module(f"model_zoo.imports.{module}"), name)
            return cls(path, input_shapes)
    kinds = ", ".join(fmt.what for fmt in FORMATS)
    what = "folder" if path.is_dir() else "file"
    raise ModelImportError(f"{path}: not a model {what} servebench reads (one of: {kinds})")
