"""The model formats `models import` reads: named once, each with how it is recognised.

Recognition is by what is on disk (a suffix, the file a folder must hold), so an
unreadable file is reported by the reader of the format it claims to be. Before any
reader sees it, the file or folder passes `servebench.common.userfile`'s checks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from model_zoo.export.triton import CONFIG_FILENAME
from model_zoo.imports.signature import ModelImportError, refused_as
from model_zoo.imports.source import ModelSource, model_limit
from servebench.common.userfile import ByteLimit, check_file, is_folder, scan_folder, zip_members


@dataclass(frozen=True)
class SourceFormat:
    name: str
    what: str  # how the user knows it, for errors and docs
    matches: Callable[[Path], bool]  # by name for a file, by what it holds for a folder
    source: str  # "module:Class", imported only when this format is read
    folder: bool = False
    zipped: bool = False  # a zip archive, whose directory is checked before it is read


def _suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda path: path.suffix.lower() in suffixes


def _holds(pattern: str) -> Callable[[Path], bool]:
    return lambda path: any(path.glob(pattern))


FORMATS = (
    SourceFormat("onnx", "an .onnx file", _suffix(".onnx"), "onnx_file:OnnxSource"),
    SourceFormat(
        "torchscript",
        "a TorchScript .pt file",
        _suffix(".pt", ".pth"),
        "torch_file:TorchScriptSource",
        zipped=True,
    ),
    SourceFormat(
        "torch-export",
        "a torch.export .pt2 file",
        _suffix(".pt2"),
        "torch_file:TorchExportSource",
        zipped=True,
    ),
    SourceFormat(
        "keras", "a Keras .keras file", _suffix(".keras"), "tf_file:KerasSource", zipped=True
    ),
    SourceFormat(
        "savedmodel",
        "a SavedModel folder",
        _holds("saved_model.pb"),
        "tf_file:SavedModelSource",
        folder=True,
    ),
    SourceFormat(
        "triton",
        "a Triton model folder (config.pbtxt)",
        lambda p: _holds(CONFIG_FILENAME)(p) or _holds(f"*/{CONFIG_FILENAME}")(p),
        "triton_repo:TritonModelSource",
        folder=True,
    ),
)


def open_source(
    path: Path, input_shapes: Mapping[str, tuple[int, ...]], limit: ByteLimit | None = None
) -> ModelSource:
    """The source reading `path`, by the first format that recognises it, once the file or
    folder passed the user-file checks (`servebench.common.userfile`): no link inside a
    folder, no device, nothing empty, no more bytes (a zip's, inflated) than `limit`."""
    path = Path(path)
    limit = limit or model_limit()
    with refused_as(path, "a model servebench reads"):
        fmt = _recognise(path, limit)
    module, _, name = fmt.source.partition(":")
    cls = getattr(importlib.import_module(f"model_zoo.imports.{module}"), name)
    return cls(path, input_shapes, limit)


def _recognise(path: Path, limit: ByteLimit) -> SourceFormat:
    folder = is_folder(path)
    if folder:
        scan_folder(path, limit)
    for fmt in FORMATS:
        if fmt.folder == folder and fmt.matches(path):
            if fmt.zipped:
                zip_members(path, limit, fmt.what)
            elif not folder:
                check_file(path, limit, fmt.what)
            return fmt
    kinds = ", ".join(fmt.what for fmt in FORMATS)
    what = "folder" if folder else "file"
    raise ModelImportError(f"{path}: not a model {what} servebench reads (one of: {kinds})")
