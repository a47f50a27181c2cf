"""Parity of what an export folder holds (`servebench models check`): each model's newest
ONNX file and SavedModel against the torch model its spec builds, on the same seeded input.

Each model is checked on its own and comes back as a `ModelCheck`, so one model's broken
file neither hides nor stops the others' results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from model_zoo.export.family import TFS_DIR
from model_zoo.export.triton import ONNX_FILENAME, STANDARD_REPOSITORY
from model_zoo.parity import ParityError, check_parity
from model_zoo.spec import ModelSpec


@dataclass(frozen=True)
class ModelCheck:
    """One model's outcome: `skip` (nothing exported), `ok`, `fail` (outputs differ) or
    `unreadable` (an exported file cannot be run at all), and its line."""

    outcome: Literal["skip", "ok", "fail", "unreadable"]
    text: str


def check_exported(export_dir: Path, spec: ModelSpec, seed: int) -> ModelCheck:
    """The parity of `spec`'s exported files in `export_dir` (the family's `seed`)."""
    from model_zoo.torch_builder import build_torch

    onnx_files = sorted((export_dir / STANDARD_REPOSITORY / spec.id).glob(f"*/{ONNX_FILENAME}"))
    saved = sorted((export_dir / TFS_DIR / spec.id).glob("*/saved_model.pb"))
    if not onnx_files and not saved:
        return ModelCheck("skip", f"{spec.id}: no exported files")
    try:
        report = check_parity(
            spec,
            build_torch(spec, seed=seed),
            onnx_path=onnx_files[-1] if onnx_files else None,
            savedmodel_dir=saved[-1].parent if saved else None,
            seed=seed,
        )
        return ModelCheck("ok", report.describe())
    except ParityError as err:
        return ModelCheck("fail", str(err))
    except Exception as err:
        # onnxruntime (InvalidProtobuf, Fail, ...) and TensorFlow (OpError, DecodeError,
        # OSError) each raise their own classes for a file they cannot load.
        files = ", ".join(str(p) for p in (onnx_files[-1:] + saved[-1:]))
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else ""
        return ModelCheck(
            "unreadable", f"{spec.id}: cannot run {files}: {type(err).__name__}: {reason}"
        )
