"""Parity: torch, the ONNX file (onnxruntime) and the SavedModel (TensorFlow) must agree
(and a TorchScript file served as it is, run as its python-backend model runs it).

A benchmark that compares TF Serving with Triton is only fair if both serve the same
function, so every export is checked with the same seeded input before anyone measures it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from model_zoo.errors import ModelZooError
from model_zoo.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec

if TYPE_CHECKING:
    from torch import nn

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

    reference: str = "torch"  # the framework the others are compared with

    def describe(self) -> str:
        parts = ", ".join(f"{name} {diff:.2e}" for name, diff in self.differences.items())
        return (
            f"{self.model}: max |diff| vs {self.reference}: {parts} "
            f"(tolerance {self.tolerance:.2e})"
        )


def seeded_input(spec: ModelSpec, batch_size: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch_size, *spec.served_input_shape)).astype(spec.dtype)


def run_torch(module: nn.Module, x: np.ndarray) -> np.ndarray:
    import torch  # here: importing the parity checks must not import torch (3 s)

    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def run_onnx_feeds(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of the ONNX file at `path` for the named inputs `feeds`."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def run_torchscript_feeds(
    path: Path, feeds: Mapping[str, np.ndarray], inputs: Sequence[str], outputs: Sequence[str]
) -> dict[str, np.ndarray]:
    """The outputs named `outputs` (in the module's return order) of the TorchScript file at
    `path` for `feeds`, passed in the order of `inputs`: run by the very functions the
    python-backend model serving it calls."""
    from model_zoo.export.triton_torchscript_model import load_module, run_module

    results = run_module(load_module(str(path)), [feeds[name] for name in inputs])
    if len(results) != len(outputs):
        raise ParityError(
            f"{path}: returns {len(results)} outputs, the config lists {len(outputs)}"
        )
    return dict(zip(outputs, results, strict=True))


def run_savedmodel_feeds(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of the SavedModel's `serving_default` signature for `feeds`."""
    from servebench.common.tf_runtime import import_tensorflow

    tf = import_tensorflow()
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    outputs = serve(**{name: tf.constant(value) for name, value in feeds.items()})
    return {name: tensor.numpy() for name, tensor in outputs.items()}


def compare_outputs(
    model: str,
    reference: Mapping[str, np.ndarray],
    candidates: Mapping[str, Mapping[str, np.ndarray]],
    *,
    reference_name: str = "torch",
) -> ParityReport:
    """Each runtime's outputs against the reference's, output by output; raise ParityError
    if one is missing, has another shape, or differs beyond the tolerance."""
    differences = {}
    for runtime, outputs in candidates.items():
        worst = 0.0
        for name, want in reference.items():
            got = outputs.get(name)
            if got is None:
                raise ParityError(f"{model}: {runtime} has no output {name!r} ({sorted(outputs)})")
            if got.shape != want.shape:
                raise ParityError(
                    f"{model}: {runtime} output {name!r} shape {got.shape}, "
                    f"{reference_name} {want.shape}"
                )
            worst = max(worst, float(np.abs(got.astype(np.float64) - want).max(initial=0.0)))
        differences[runtime] = worst
    largest = max((float(np.abs(v).max(initial=0.0)) for v in reference.values()), default=0.0)
    report = ParityReport(model, largest, differences, reference_name)
    if not report.ok:
        raise ParityError(f"parity failed: {report.describe()}")
    return report


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
    reference = {OUTPUT_NAME: run_torch(module, x)}
    candidates = {}
    if onnx_path is not None:
        candidates["onnxruntime"] = run_onnx_feeds(onnx_path, {INPUT_NAME: x})
    if savedmodel_dir is not None:
        candidates["tensorflow"] = run_savedmodel_feeds(savedmodel_dir, {INPUT_NAME: x})
    return compare_outputs(spec.id, reference, candidates)
