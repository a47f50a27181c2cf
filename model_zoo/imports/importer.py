"""Import a user's model into the export layout `models export` writes.

Everything is written into a staging folder beside `out` and moved into place only after
every conversion and parity check passed, so a refused or failed import leaves `out` as it
was: no half-written model folder for a server to trip over later.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from model_zoo.export.family import FORMATS, TFS_DIR, TFS_FORMAT, TRITON_FORMAT
from model_zoo.export.library_output import log_beside
from model_zoo.export.tfs import write_server_files
from model_zoo.export.triton import (
    CONFIG_FILENAME,
    ONNX_FILE,
    ONNX_FILENAME,
    PYTHON_REPOSITORY,
    STANDARD_REPOSITORY,
    ServedFile,
    TensorConfig,
    TritonSettings,
    build_config,
    check_name,
    python_twin,
    render_config,
    write_model_folder,
)
from model_zoo.imports.formats import open_source
from model_zoo.imports.signature import (
    ModelImportError,
    Signature,
    Unconvertible,
    check_sample_shapes,
    random_feeds,
    resolve_shapes,
)
from model_zoo.imports.source import ModelSource
from model_zoo.imports.triton_repo import TritonModelSource
from model_zoo.parity import (
    ParityReport,
    compare_outputs,
    run_onnx_feeds,
    run_savedmodel_feeds,
    run_torchscript_feeds,
)
from servebench.common.staging import remove_staged, sigterm_stops
from servebench.common.tfs_config import savedmodel_names
from servebench.common.userfile import ByteLimit

IMPORT_FILE = "import.json"
# What converters printed while importing a model, kept off the terminal: <name>-onnx.log.
LOG_DIR = "logs"
VERSION = 1
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class ImportResult:
    name: str
    source_format: str
    signature: Signature
    input_shapes: dict[str, tuple[int, ...]]
    written: dict[str, list[str]] = field(default_factory=dict)  # format -> folders under out
    skipped: dict[str, str] = field(default_factory=dict)  # format -> why not
    served: dict[str, str] = field(default_factory=dict)  # format -> what its folders run, why
    parity: ParityReport | None = None
    seconds: dict[str, float] = field(default_factory=dict)


@sigterm_stops()  # a stop removes the staging folder (`finally` below), SIGTERM's too
def import_model(
    path: Path,
    out: Path,
    *,
    formats: Iterable[str] = FORMATS,
    name: str | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    settings: TritonSettings | None = None,
    signature: Signature | None = None,
    force: bool = False,
    limit: ByteLimit | None = None,
) -> ImportResult:
    """Read `path`, write each of `formats` it converts to under `out`, check parity.

    `signature`: the file's, where the caller read it already (a scenario's validation),
    so it is not read again. `force`: replace the model's folders of those formats that
    `out` holds already; they are removed only once the new import has been written and
    checked, so a failed import leaves the old one as it was. `limit`: the bytes the file
    or folder may hold (default: `limits.max_model_mb`'s), checked before it is read."""
    formats = tuple(formats)
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        raise ModelImportError(f"formats: expected some of {', '.join(FORMATS)}, got {unknown}")
    started = time.perf_counter()
    given = check_sample_shapes(input_shapes or {})
    name = check_name(name) if name else None
    source = open_source(path, given, limit)
    signature = signature or source.signature()
    shapes = resolve_shapes(signature, given, str(path))
    name = name or check_name(clean_name(source.default_name()))
    out = Path(out)
    targets = _targets(name, formats)
    taken = [str(out / t) for t in targets.values() if (out / t).exists()]
    if taken and not force:
        raise ModelImportError(
            f"{taken[0]}: already exists; pick another --name or --out, or pass --force"
        )
    result = ImportResult(name, source.format, signature, shapes)
    result.seconds["read"] = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    moved = False
    try:
        candidates = {}
        if TRITON_FORMAT in formats:
            started = time.perf_counter()
            try:
                candidates.update(
                    _write_triton(
                        source, signature, staging, name, settings or TritonSettings(), result
                    )
                )
            except Unconvertible as why:
                result.skipped[TRITON_FORMAT] = str(why)
            result.seconds[TRITON_FORMAT] = time.perf_counter() - started
        if TFS_FORMAT in formats:
            started = time.perf_counter()
            target = staging / TFS_DIR / name / str(VERSION)
            target.parent.mkdir(parents=True)
            try:
                if source.write_savedmodel(target):
                    candidates["tensorflow"] = lambda f, d=target: run_savedmodel_feeds(d, f)
                result.written[TFS_FORMAT] = [f"{TFS_DIR}/{name}"]
            except Unconvertible as why:
                result.skipped[TFS_FORMAT] = str(why)
                shutil.rmtree(target.parent)
            result.seconds[TFS_FORMAT] = time.perf_counter() - started
        if not result.written:
            raise ModelImportError(f"{path}: " + "; ".join(result.skipped.values()))
        if candidates:
            started = time.perf_counter()
            feeds = random_feeds(signature, shapes)
            reference = source.run(feeds)
            outputs = {runtime: run(feeds) for runtime, run in candidates.items()}
            result.parity = compare_outputs(
                name, reference, outputs, reference_name=source.framework
            )
            result.seconds["parity"] = time.perf_counter() - started
        _record(staging, result, path)
        for target in targets.values() if force else ():
            _remove(out / target)
        moved = _move_into(staging, out)
    finally:
        if not moved:
            remove_staged(staging)
    return result


def _targets(name: str, formats: tuple[str, ...]) -> dict[str, str]:
    found = {}
    if TRITON_FORMAT in formats:
        found["triton"] = f"{STANDARD_REPOSITORY}/{name}"
        found["triton-python"] = f"{PYTHON_REPOSITORY}/{name}"
    if TFS_FORMAT in formats:
        found["tfs"] = f"{TFS_DIR}/{name}"
    return found


def _write_triton(
    source: ModelSource,
    signature: Signature,
    staging: Path,
    name: str,
    settings: TritonSettings,
    result: ImportResult,
) -> dict:
    """Both Triton repositories; the runtimes to check for parity (a converted ONNX file,
    or a TorchScript file served as it is)."""
    standard = staging / STANDARD_REPOSITORY
    python = staging / PYTHON_REPOSITORY
    if isinstance(source, TritonModelSource):
        return _write_user_repository(source, staging, name, result)
    try:
        served, model_file, converted = _served_file(source, staging, result)
    finally:
        _keep_log(log_beside(staging / ONNX_FILENAME), staging, name, result)
    if not signature.batched:
        settings = TritonSettings(
            max_batch_size=0,
            dynamic_batching=False,
            instance_count=settings.instance_count,
            instance_kind=settings.instance_kind,
        )
    inputs, outputs = _tensor_configs(signature)
    for form, repository in (("onnx", standard), ("python", python)):
        config = build_config(name, inputs, outputs, settings, form=form, served=served)
        write_model_folder(model_file, config, repository, version=VERSION, served=served)
    model_file.unlink()
    result.written[TRITON_FORMAT] = [f"{STANDARD_REPOSITORY}/{name}", f"{PYTHON_REPOSITORY}/{name}"]
    path = python / name / str(VERSION) / served.filename
    if served is not ONNX_FILE:  # a TorchScript file: run as its python-backend model runs it
        names = [t.name for t in signature.inputs], [t.name for t in signature.outputs]
        return {"torchscript": lambda feeds: run_torchscript_feeds(path, feeds, *names)}
    return {"onnxruntime": lambda feeds: run_onnx_feeds(path, feeds)} if converted else {}


def _served_file(
    source: ModelSource, staging: Path, result: ImportResult
) -> tuple[ServedFile, Path, bool]:
    """The file Triton's two folders serve, written into `staging`, and whether it is a
    conversion: ONNX where the source is or converts to it (today's path, kept), else the
    source's own file as it is where Triton serves that format natively (a TorchScript
    module torch's ONNX exporter fails on, e.g. a traced GRU with attention)."""
    onnx_file = staging / ONNX_FILENAME
    try:
        converted = source.write_onnx(onnx_file)
    except Unconvertible as why:
        served = source.served_as_is
        if served is None:
            raise
        onnx_file.unlink(missing_ok=True)  # whatever the failed export left
        source.write_as_is(staging / served.filename)
        result.served[TRITON_FORMAT] = f"{served.label} as it is, without ONNX: {why}"
        return served, staging / served.filename, False
    how = f"converted from {source.label or source.format}" if converted else "as it is"
    result.served[TRITON_FORMAT] = f"ONNX {how}"
    return ONNX_FILE, onnx_file, converted


def _keep_log(log: Path, staging: Path, name: str, result: ImportResult) -> None:
    """A converter's output (`library_output`) kept as `logs/<name>-onnx.log` and named in
    the line saying what Triton serves; an empty one removed."""
    if not log.is_file():
        return
    if not log.stat().st_size:
        log.unlink()
        return
    kept = Path(LOG_DIR) / f"{name}-onnx.log"
    (staging / LOG_DIR).mkdir(exist_ok=True)
    os.replace(log, staging / kept)
    if TRITON_FORMAT in result.served:
        result.served[TRITON_FORMAT] += f" (the exporter's output: {kept})"


def _write_user_repository(
    source: TritonModelSource, staging: Path, name: str, result: ImportResult
) -> dict:
    """The user's model folder as it is (its config rewritten only for another name), and
    where the local tritonserver cannot run it, the python-backend twin of its ONNX file."""
    config = source.config
    renamed = config.name != name
    config.name = name
    repositories = [STANDARD_REPOSITORY]
    if source.is_python:  # runs on every Triton as it is, the local one included
        repositories.append(PYTHON_REPOSITORY)
    for repository in repositories:
        source.copy_folder(staging / repository / name)
        if renamed:
            (staging / repository / name / CONFIG_FILENAME).write_text(render_config(config))
    result.written[TRITON_FORMAT] = [f"{repository}/{name}" for repository in repositories]
    if source.is_python:
        return {}
    onnx_file = staging / ONNX_FILENAME
    try:
        source.write_onnx(onnx_file)
    except Unconvertible as why:
        result.skipped["triton-python"] = str(why)
        return {}
    # The twin's version is the user's newest, which the config's version policy may name.
    version = int(source.model_file.parent.name)
    write_model_folder(onnx_file, python_twin(config), staging / PYTHON_REPOSITORY, version=version)
    onnx_file.unlink()
    result.written[TRITON_FORMAT].append(f"{PYTHON_REPOSITORY}/{name}")
    return {}


def _tensor_configs(signature: Signature) -> tuple[list[TensorConfig], list[TensorConfig]]:
    from tritonclient.grpc import model_config_pb2 as mc
    from tritonclient.utils import np_to_triton_dtype

    def one(tensor) -> TensorConfig:
        import numpy as np

        data_type = mc.DataType.Value("TYPE_" + np_to_triton_dtype(np.dtype(tensor.dtype)))
        return TensorConfig(tensor.name, data_type, signature.served_dims(tensor))

    return [one(t) for t in signature.inputs], [one(t) for t in signature.outputs]


def _record(staging: Path, result: ImportResult, path: Path) -> None:
    """`import.json`: what each model came from, so later steps need not guess."""
    entry = {
        "source": str(Path(path).resolve()),
        "format": result.source_format,
        "signature": asdict(result.signature),
        "input_shapes": {k: list(v) for k, v in result.input_shapes.items()},
        "written": result.written,
        "skipped": result.skipped,
        "served": result.served,
        "parity": asdict(result.parity) if result.parity else None,
        "seconds": result.seconds,
    }
    (staging / IMPORT_FILE).write_text(json.dumps({result.name: entry}, indent=2) + "\n")


def _move_into(staging: Path, out: Path) -> bool:
    """Put the staged model folders into `out`: one rename when `out` is new (True: the
    staging folder became `out`), else folder by folder (each checked free before the
    import began), merging the record and TF Serving's model list with what `out` held."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        if (staging / TFS_DIR).is_dir():
            write_server_files(staging / TFS_DIR, savedmodel_names(staging / TFS_DIR))
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
        return True
    for repository in (STANDARD_REPOSITORY, PYTHON_REPOSITORY, TFS_DIR):
        for folder in sorted((staging / repository).glob("*")):
            if folder.is_dir():
                (out / repository).mkdir(exist_ok=True)
                os.replace(folder, out / repository / folder.name)
    if (staging / TFS_DIR).is_dir():
        write_server_files(out / TFS_DIR, savedmodel_names(out / TFS_DIR))
    for log in sorted((staging / LOG_DIR).glob("*")):
        (out / LOG_DIR).mkdir(exist_ok=True)
        os.replace(log, out / LOG_DIR / log.name)
    record = out / IMPORT_FILE
    merged = json.loads(record.read_text()) if record.is_file() else {}
    merged.update(json.loads((staging / IMPORT_FILE).read_text()))
    record.write_text(json.dumps(merged, indent=2) + "\n")
    return False


def _remove(folder: Path) -> None:
    """Remove a model folder a forced import replaces: renamed aside first, so no reader
    ever sees it half deleted."""
    if folder.is_dir():
        aside = folder.with_name(f".{folder.name}.replaced-{os.getpid()}")
        os.replace(folder, aside)
        shutil.rmtree(aside)


def clean_name(text: str) -> str:
    """A file's stem as a Triton model name (letters, digits, '_', '.', '-')."""
    name = _NAME_CHARS.sub("-", text).strip("-.") or "model"
    return name if name[0].isalnum() else f"m{name}"
