"""Export a whole family for both servers into one folder, and read such a folder back.

Layout of an export folder:
    family.yaml                 the specs, so `check` and `serve` know what was exported
    export.json                 seed, settings and seconds per model
    triton/<id>/...             standard Triton repository (onnxruntime_onnx)
    triton-python/<id>/...      the same models on the python backend (local binary)
    tfs/<id>/<version>/...      SavedModels, with tfs/models.config (+ batching_parameters.txt)
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from model_zoo.export.onnx import ExportExistsError
from model_zoo.export.tfs import export_savedmodel, write_server_files
from model_zoo.export.tfs_batching import TfsBatching
from model_zoo.export.triton import (
    ONNX_FILENAME,
    STANDARD_REPOSITORY,
    TritonSettings,
    export_triton,
)
from model_zoo.parity import ParityReport, check_parity
from model_zoo.spec import ModelSpec, SpecError, load_specs, save_specs
from servebench.common.textfile import read_text
from servebench.common.tfs_config import savedmodel_names

FAMILY_FILE = "family.yaml"
EXPORT_FILE = "export.json"
TFS_DIR = "tfs"
# The export formats, named once: each server kind (servebench.servers.kinds) names the one
# it serves. Triton's is the standard repository and its python-backend twin; TF Serving's,
# SavedModels under TFS_DIR.
TRITON_FORMAT = "triton"
TFS_FORMAT = "tfs"
FORMATS = (TRITON_FORMAT, TFS_FORMAT)
# Where each format's file for a model lies under an export folder: (folder, glob).
_EXPORTED_FILE = {
    TRITON_FORMAT: (STANDARD_REPOSITORY, f"*/{ONNX_FILENAME}"),
    TFS_FORMAT: (TFS_DIR, "*/saved_model.pb"),
}


@dataclass
class ExportedModel:
    spec_id: str
    onnx_path: Path | None = None
    savedmodel_dir: Path | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    parity: ParityReport | None = None


def _claim(path: Path, force: bool) -> None:
    if path.exists() and any(path.iterdir()) and not force:
        raise ExportExistsError(f"{path}: already holds files; pass --force to replace them")


def export_family(
    specs: Sequence[ModelSpec],
    out: Path,
    *,
    formats: Iterable[str] = FORMATS,
    triton_settings: TritonSettings | None = None,
    tfs_batching: TfsBatching | None = None,
    seed: int = 0,
    version: int = 1,
    check: bool = True,
    force: bool = False,
    on_model: Callable[[ExportedModel], None] | None = None,
) -> list[ExportedModel]:
    """Build each spec once (seeded) and write every requested format, then check parity.

    Every target folder is checked before the first model is written, so a refused export
    (existing files, no `force`) leaves the tree untouched.
    """
    formats = tuple(formats)
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"formats: unknown {sorted(unknown)}; expected {', '.join(FORMATS)}")
    out = Path(out)
    for spec in specs:
        if TRITON_FORMAT in formats:
            _claim(out / STANDARD_REPOSITORY / spec.id, force)
        if TFS_FORMAT in formats:
            _claim(out / TFS_DIR / spec.id, force)
    out.mkdir(parents=True, exist_ok=True)

    exported = []
    for spec in specs:
        exported.append(
            _export_one(spec, out, formats, triton_settings, seed, version, check, force)
        )
        if on_model is not None:
            on_model(exported[-1])
    if TFS_FORMAT in formats:
        # Every model folder that holds a SavedModel version, so earlier exports stay listed.
        write_server_files(out / TFS_DIR, savedmodel_names(out / TFS_DIR), tfs_batching)
    _record(out, specs, exported, formats, triton_settings, tfs_batching, seed)
    return exported


def is_exported(out: Path, spec: ModelSpec, fmt: str) -> bool:
    """Whether the export folder `out` holds `spec` in format `fmt` (a resumed run skips
    what it has)."""
    folder, pattern = _EXPORTED_FILE[fmt]
    return any((Path(out) / folder / spec.id).glob(pattern))


def _export_one(spec, out, formats, triton_settings, seed, version, check, force):
    # Here, not with the module: reading an export folder (a scenario's validation) must
    # not import torch (3 s); exporting needs it.
    from model_zoo.torch_builder import build_torch

    result = ExportedModel(spec.id)
    started = time.perf_counter()
    module = build_torch(spec, seed=seed)
    result.seconds["build"] = time.perf_counter() - started
    if TRITON_FORMAT in formats:
        started = time.perf_counter()
        triton = export_triton(module, spec, out, triton_settings, version=version, force=force)
        result.onnx_path = triton.onnx_path
        result.seconds[TRITON_FORMAT] = time.perf_counter() - started
    if TFS_FORMAT in formats:
        from model_zoo.keras_builder import build_keras  # imports TensorFlow: only when asked

        started = time.perf_counter()
        target = out / TFS_DIR / spec.id
        if target.exists():
            shutil.rmtree(target)  # _claim allowed it (force); stale versions would be served
        result.savedmodel_dir = export_savedmodel(
            build_keras(spec, module), spec, out / TFS_DIR, version
        )
        result.seconds[TFS_FORMAT] = time.perf_counter() - started
    if check:
        started = time.perf_counter()
        result.parity = check_parity(
            spec,
            module,
            onnx_path=result.onnx_path,
            savedmodel_dir=result.savedmodel_dir,
            seed=seed,
        )
        result.seconds["check"] = time.perf_counter() - started
    return result


def _record(out, specs, exported, formats, triton_settings, tfs_batching, seed) -> None:
    family_path = out / FAMILY_FILE
    known = {s.id: s for s in load_specs(family_path)} if family_path.exists() else {}
    known.update({s.id: s for s in specs})
    save_specs(list(known.values()), family_path)
    record = {
        "seed": seed,
        "formats": list(formats),
        "triton_settings": asdict(triton_settings or TritonSettings()),
        "tfs_batching": asdict(tfs_batching) if tfs_batching else None,
        "models": {m.spec_id: {"seconds": m.seconds} for m in exported},
    }
    (out / EXPORT_FILE).write_text(json.dumps(record, indent=2) + "\n")


def load_family(export_dir: Path) -> tuple[list[ModelSpec], int]:
    """The specs of an export folder and the seed their weights were made with."""
    export_dir = Path(export_dir)
    family_path = export_dir / FAMILY_FILE
    if not family_path.is_file():
        raise FileNotFoundError(
            f"{export_dir}: no {FAMILY_FILE}; is this a `models export` folder?"
        )
    seed = 0
    record_path = export_dir / EXPORT_FILE
    if record_path.is_file():
        try:
            record = json.loads(read_text(record_path))
            seed = int(record.get("seed", 0))
        except (ValueError, AttributeError, TypeError) as err:
            raise SpecError(f"{record_path}: not an export record ({err})") from None
    return load_specs(family_path), seed
