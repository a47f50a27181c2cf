"""Export a built torch module to one self-contained ONNX file with a dynamic batch axis.

The ONNX file is what both Triton forms serve (the onnxruntime platform in the official
container, the python backend here), so its interface is checked right after writing:
tensors named `input`/`output`, per-sample shapes equal to the spec's served shapes, and a
symbolic batch axis. A graph that silently specialised on the example's batch size would
only fail later, inside a server, with a much less helpful message.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from model_zoo.errors import ModelZooError
from model_zoo.export.library_output import quieted
from model_zoo.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec

if TYPE_CHECKING:
    from torch import nn

# The example batch used for tracing. It must be >= 2: torch.export specialises dimensions
# whose example value is 0 or 1, so a batch-1 example would freeze the batch axis.
_TRACE_BATCH = 2


# Logs "torchvision is not installed. Skipping torchvision::nms" and the like on first use:
# true, and irrelevant to these models.
_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


class OnnxExportError(ModelZooError, RuntimeError):
    """The module could not be exported, or the written graph has the wrong interface."""


class ExportExistsError(ModelZooError, FileExistsError):
    """A target path already holds files and `force` was not given."""


def export_onnx(module: nn.Module, spec: ModelSpec, path: Path, *, force: bool = False) -> Path:
    """Write `module` to `path` as ONNX (weights inside the file) and return `path`.

    The input named `input` has shape `(batch, *spec.served_input_shape)`; the output named
    `output` has `(batch, *spec.served_output_shape)`; `batch` is symbolic (>= 1).
    Uses the dynamo exporter because the legacy one fails on `TransformerEncoderLayer`.
    torch is imported here, not with the module: reading a scenario or an export folder
    reaches this module (through `export.triton`) and must not pay torch's 3 s import.
    """
    import torch

    path = Path(path)
    if path.exists() and not force:
        raise ExportExistsError(f"{path}: already exists; pass force=True to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)

    module = module.eval()
    example = torch.randn(_TRACE_BATCH, *spec.served_input_shape, dtype=torch.float32)
    batch = torch.export.Dim("batch", min=1)
    try:
        with torch.no_grad(), quiet_exporter():
            torch.onnx.export(
                module,
                (example,),
                str(path),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: batch},),
                dynamo=True,
                external_data=False,
                verbose=False,
            )
    except Exception as err:
        raise OnnxExportError(f"{spec.id}: ONNX export failed: {err}") from err
    check_onnx_interface(path, spec)
    return path


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Silence the exporter's notes about its internals (size checks, deprecated helpers,
    missing torchvision ops): they say nothing about the exported graph, whose interface
    `check_onnx_interface` verifies instead."""
    with quieted(_REGISTRATION_LOGGER, logging.ERROR):
        yield


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    """Static dims as ints, symbolic ones as their names (empty name if unnamed)."""
    return [
        d.dim_value if d.HasField("dim_value") else d.dim_param
        for d in value_info.type.tensor_type.shape.dim
    ]


def check_onnx_interface(path: Path, spec: ModelSpec) -> None:
    """Raise `OnnxExportError` unless the file's single input/output match the spec."""
    graph = onnx.load(str(path), load_external_data=False).graph
    expected = {
        INPUT_NAME: (graph.input, spec.served_input_shape),
        OUTPUT_NAME: (graph.output, spec.served_output_shape),
    }
    for name, (values, per_sample) in expected.items():
        names = [v.name for v in values]
        if names != [name]:
            raise OnnxExportError(f"{path}: expected one tensor named {name!r}, found {names}")
        dims = _dims(values[0])
        if len(dims) != 1 + len(per_sample) or list(dims[1:]) != list(per_sample):
            raise OnnxExportError(
                f"{path}: {name} has dims {dims}, expected (batch, {', '.join(map(str, per_sample))})"
            )
        if isinstance(dims[0], int):
            raise OnnxExportError(
                f"{path}: {name} batch axis is fixed at {dims[0]}; it must be symbolic"
            )
