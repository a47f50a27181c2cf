"""TorchScript (`torch.jit.save`) and torch.export (`torch.export.save`, `.pt2`) files.

A TorchScript file names its inputs but carries no shapes, so each input's sample shape
comes from `--input-shape` (float32; the batch axis is the first); a `.pt2` file carries
names, dtypes and shapes, symbolic where the program was exported with dynamic ones.
Both go to ONNX with torch's own exporters: the TorchScript one for a ScriptModule (the
dynamo exporter cannot trace it), the dynamo one for an exported program. A TorchScript
module the exporter fails on is served as it is (`served_as_is`); what the exporters print
goes to a log (`export.library_output`), never to the terminal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model_zoo.export.library_output import log_beside, output_to, quieted
from model_zoo.export.onnx import quiet_exporter
from model_zoo.export.triton import TORCHSCRIPT_FILE
from model_zoo.imports.signature import (
    DYNAMIC,
    ModelImportError,
    ShapeError,
    Signature,
    Tensor,
    ask_for_shape,
    first_line,
    refused_as,
)
from model_zoo.imports.source import ModelSource, Unconvertible

_EXAMPLE_BATCH = 2  # >= 2: a batch-1 example would let the exporter freeze the axis


@contextmanager
def quiet_torch() -> Iterator[None]:
    """Keep torch's own log lines and warnings from the user's terminal while it reads or
    converts their file: a file torch cannot read is one line (`refused_as`), not that line
    after a dozen of torch's (a zero-byte `.pt2` logged its zip reader's traceback)."""
    with quieted("torch", logging.CRITICAL + 1):
        yield


def _output_names(count: int) -> list[str]:
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]


def _as_tuple(result) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


class _TorchFile(ModelSource):
    """What both torch formats share: torch's ONNX exporter (and, from ModelSource, no
    way to TF Serving)."""

    framework = "torch"

    def _to_onnx(self, target: Path, model: Any, example: tuple, **options: Any) -> bool:
        """Export with torch's printing and the error's full text kept in a log beside
        `target` (`library_output`): the user gets the error's first sentence."""
        try:
            with torch.no_grad(), quiet_exporter(), quiet_torch(), output_to(log_beside(target)):
                torch.onnx.export(model, example, str(target), **options)
        except Exception as err:  # the exporters raise many classes; each is one line here
            why = first_line(err)
            raise Unconvertible(f"{self.label} -> ONNX: torch's exporter failed: {why}") from None
        return True


class TorchScriptSource(_TorchFile):
    format = "torchscript"
    label = "TorchScript"
    served_as_is = TORCHSCRIPT_FILE

    @cached_property
    def module(self) -> torch.jit.ScriptModule:
        # RuntimeError: zip reader, unpickler
        with refused_as(self.path, "a TorchScript file"), quiet_torch():
            return torch.jit.load(str(self.path), map_location="cpu").eval()

    @cached_property
    def input_names(self) -> list[str]:
        arguments = self.module.forward.schema.arguments[1:]  # the first is the module
        return [argument.name for argument in arguments]

    def _example(self) -> tuple[torch.Tensor, ...]:
        missing = [name for name in self.input_names if name not in self.input_shapes]
        if missing:
            name = missing[0]
            raise ShapeError(
                f"{self.path}: a TorchScript file carries no input shapes; give "
                f"{ask_for_shape('--input-shape', name)} (in a scenario: "
                f"{ask_for_shape('input_shapes', name)}; one sample, e.g. {name}=3x224x224)"
            )
        generator = torch.Generator().manual_seed(0)
        return tuple(
            torch.randn(_EXAMPLE_BATCH, *self.input_shapes[name], generator=generator)
            for name in self.input_names
        )

    def signature(self) -> Signature:
        return self._signature

    @cached_property
    def _signature(self) -> Signature:
        """Found by running the module once on the example (kept: the export asks again)."""
        example = self._example()
        with torch.no_grad():
            try:
                outputs = _as_tuple(self.module(*example))
            except Exception as err:
                raise ModelImportError(
                    f"{self.path}: does not run on inputs of the given --input-shape: {err}"
                ) from None
        inputs = tuple(
            Tensor(name, "float32", (DYNAMIC, *x.shape[1:]))
            for name, x in zip(self.input_names, example, strict=True)
        )
        names = _output_names(len(outputs))
        return Signature(
            inputs,
            tuple(
                Tensor(n, str(y.dtype).removeprefix("torch."), (DYNAMIC, *y.shape[1:]))
                for n, y in zip(names, outputs, strict=True)
            ),
        )

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            result = _as_tuple(self.module(*(torch.from_numpy(feeds[n]) for n in self.input_names)))
        return dict(zip(_output_names(len(result)), (y.numpy() for y in result), strict=True))

    def write_as_is(self, target: Path) -> None:
        """The module as torch loaded it (in eval mode), saved again: the file parity and
        the server then use is the one read here, not the user's path read twice."""
        self.module.save(str(target))

    def write_onnx(self, target: Path) -> bool:
        outputs = [t.name for t in self.signature().outputs]
        axes = {name: {0: "batch"} for name in [*self.input_names, *outputs]}
        return self._to_onnx(
            target, self.module, self._example(), input_names=self.input_names,
            output_names=outputs, dynamic_axes=axes, dynamo=False,
        )  # fmt: skip


class TorchExportSource(_TorchFile):
    format = "torch-export"
    label = "torch.export"

    @cached_property
    def program(self) -> torch.export.ExportedProgram:
        with refused_as(self.path, "a torch.export program"), quiet_torch():
            return torch.export.load(str(self.path))

    def _placeholders(self) -> list[tuple[str, torch.Tensor]]:
        users = set(self.program.graph_signature.user_inputs)
        return [
            (node.name, node.meta["val"])
            for node in self.program.graph.nodes
            if node.op == "placeholder" and node.name in users
        ]

    def signature(self) -> Signature:
        inputs = tuple(_fake_tensor(name, val) for name, val in self._placeholders())
        output_node = next(n for n in self.program.graph.nodes if n.op == "output")
        values = [arg.meta["val"] for arg in output_node.args[0]]
        names = _output_names(len(values))
        outputs = tuple(_fake_tensor(n, v) for n, v in zip(names, values, strict=True))
        return Signature(inputs, outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(feeds[name]) for name, _ in self._placeholders()]
        with torch.no_grad():
            result = _as_tuple(self.program.module()(*args))
        return dict(zip(_output_names(len(result)), (y.numpy() for y in result), strict=True))

    def write_onnx(self, target: Path) -> bool:
        outputs = [t.name for t in self.signature().outputs]
        return self._to_onnx(
            target, self.program, (), output_names=outputs, dynamo=True, external_data=False,
            verbose=False,
        )  # fmt: skip


def _fake_tensor(name: str, value: torch.Tensor) -> Tensor:
    """A traced value's shape: symbolic sizes (torch.SymInt) are dynamic."""
    dims = tuple(DYNAMIC if isinstance(d, torch.SymInt) else int(d) for d in value.shape)
    return Tensor(name, str(value.dtype).removeprefix("torch."), dims)
