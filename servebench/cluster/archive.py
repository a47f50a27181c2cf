"""A run directory as tar.gz bytes and back: how a follower's result reaches the leader
(through Dask, no shared filesystem) and how `cluster results` hands it to a person.

What travels is what the run measured and how it was set up: run.json, scenario.yaml,
records, telemetry, trials.csv, cold_start.csv, report.html, the server logs and configs.
The models (`export/`, the ONNX weights and SavedModels the run exported from the
scenario's specs and seed) and the copied Triton backend binaries stay on the follower:
they are rebuilt by any run of the same scenario, can be hundreds of MB, and nothing that
reads a result (`servebench report`, compare) opens them.

Unpacking lands in a hidden folder beside the target and is renamed into place in one
step, so a reader (or a leader restarted after a kill) sees the whole directory or none.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from servebench.cluster.errors import ClusterError

# Top-level folders of a run directory that hold rebuildable model artifacts.
_MODEL_DIRS = frozenset({"export"})
# Names anywhere under the server repositories (`repos/<n>/`) that are binaries or weights.
_REPO_ARTIFACTS = frozenset({"backends", "__pycache__", "variables"})
_WEIGHT_SUFFIXES = (".onnx", ".onnx.data", ".so", ".pb")
INCOMING_PREFIX = ".incoming-"


class ArchiveError(ClusterError, ValueError):
    """An archive that is not one run directory, or one that would write outside it."""


def travels(relative: PurePosixPath) -> bool:
    """Whether a path inside a run directory goes into its archive (see the module doc)."""
    parts = relative.parts
    if not parts:
        return True
    if parts[0] in _MODEL_DIRS:
        return False
    if parts[0] == "repos":
        if _REPO_ARTIFACTS.intersection(parts):
            return False
        if relative.name.endswith(_WEIGHT_SUFFIXES):
            return False
    return True


def pack(run_dir: Path, arcname: str | None = None) -> bytes:
    """The run directory as tar.gz bytes, its files under one top folder (`arcname`,
    default the directory's name). Links are not followed nor stored."""
    run_dir = Path(run_dir)
    top = arcname or run_dir.name

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        relative = PurePosixPath(info.name).relative_to(top)
        if not (info.isfile() or info.isdir()) or not travels(relative):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        tar.add(run_dir, arcname=top, filter=keep)
    return buffer.getvalue()


def unpack(archive: bytes, target: Path) -> Path:
    """Extract a `pack` archive so that its top folder becomes `target`, atomically.

    `target` must not exist (a result is never overwritten). Members that are absolute,
    climb out with `..`, or are links or devices are refused (tarfile's "data" filter)."""
    target = Path(target)
    if target.exists():
        raise FileExistsError(f"{target} exists; a result is never overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{INCOMING_PREFIX}{target.name}-", dir=target.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tops = {PurePosixPath(m.name).parts[0] for m in tar.getmembers() if m.name}
            if len(tops) != 1:
                raise ArchiveError(f"expected one run directory in the archive, got {sorted(tops)}")
            try:
                tar.extractall(staging, filter="data")
            except tarfile.FilterError as err:
                raise ArchiveError(f"unsafe archive member: {err}") from None
        (top,) = tops
        _fsync_tree(staging / top)
        os.replace(staging / top, target)
    except tarfile.TarError as err:
        raise ArchiveError(f"not a tar.gz run archive: {err}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _fsync(target.parent)
    return target


def remove_incoming(root: Path) -> list[Path]:
    """Remove the staging folders an unpack killed mid-way left under `root`."""
    removed = []
    if root.is_dir():
        for path in root.glob(f"{INCOMING_PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _fsync_tree(root: Path) -> None:
    """Flush every extracted file, so the rename never publishes a directory whose
    contents a power cut could still lose."""
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())
        _fsync(Path(folder))


def _fsync(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
