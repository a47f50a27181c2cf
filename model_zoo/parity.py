"""Parity: torch, the ONNX file (onnxruntime) and the SavedModel (TensorFlow) must agree.

A benchmark that compares TF Serving with Triton is only fair if both serve the same
function, so every export is checked with the same seeded input before anyone measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from model_zoo.errors import ModelZooError
from model_zoo.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec

RELATIVE_TOLERANCE = 1e-4


class ParityError(ModelZooError, RuntimeError):
    """An export computes a different function than the torch model it came from."""


@dataclass(frozen=True)
class ParityReport:
    model: str
    reference_max_abs: float
    differences: dict[str, float]  # runtime name -> max abs difference to torch

    @property
    def tolerance(self) -> float:
        """1e-4 x max(1, max |output|): relative for large outputs, absolute for small."""
        return RELATIVE_TOLERANCE * max(1.0, self.reference_max_abs)

    @property
    def ok(self) -> bool:
        return all(diff <= self.tolerance for diff in self.differences.values())

    def describe(self) -> str:
        parts = ", ".join(f"{name} {diff:.2e}" for name, diff in self.differences.items())
        return f"{self.model}: max |diff| vs torch: {parts} (tolerance {self.tolerance:.2e})"


def seeded_input(spec: ModelSpec, batch_size: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch_size, *spec.served_input_shape)).astype(spec.dtype)


def run_torch(module: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def run_onnx(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]


def run_savedmodel(path: Path, x: np.ndarray) -> np.ndarray:
    from servebench.common.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    return serve(**{INPUT_NAME: tf.constant(x)})[OUTPUT_NAME].numpy()


def check_parity(
    spec: ModelSpec,
    module: nn.Module,
    *,
    onnx_path: Path | None = None,
    savedmodel_dir: Path | None = None,
    batch_size: int = 2,
    seed: int = 0,
) -> ParityReport:
    """Compare the exports that exist against torch; raise ParityError if any differs."""
    x = seeded_input(spec, batch_size, seed)
    reference = run_torch(module, x)
    candidates = {}
    if onnx_path is not None:
        candidates["onnxruntime"] = run_onnx(onnx_path, x)
    if savedmodel_dir is not None:
        candidates["tensorflow"] = run_savedmodel(savedmodel_dir, x)
    differences = {}
    for runtime, output in candidates.items():
        if output.shape != reference.shape:
            raise ParityError(
                f"{spec.id}: {runtime} output shape {output.shape}, torch {reference.shape}"
            )
        differences[runtime] = float(np.abs(output - reference).max())
    report = ParityReport(spec.id, float(np.abs(reference).max()), differences)
    if not report.ok:
        raise ParityError(f"parity failed: {report.describe()}")
    return report
