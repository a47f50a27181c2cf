"""Exporters: built models to the files servers load (ONNX, Triton repositories)."""

from model_zoo.export.onnx import ExportExistsError, OnnxExportError, export_onnx
from model_zoo.export.triton import (
    PYTHON_REPOSITORY,
    STANDARD_REPOSITORY,
    TritonConfigError,
    TritonExport,
    TritonSettings,
    TritonSettingsError,
    build_model_config,
    export_triton,
    parse_config,
    write_triton_model,
)

__all__ = [
    "PYTHON_REPOSITORY",
    "STANDARD_REPOSITORY",
    "ExportExistsError",
    "OnnxExportError",
    "TritonConfigError",
    "TritonExport",
    "TritonSettings",
    "TritonSettingsError",
    "build_model_config",
    "export_onnx",
    "export_triton",
    "parse_config",
    "write_triton_model",
]
