"""The two folders the disk probes measure, and which filesystem each one is on.

Inside a container the bind-mounted scratch folder is the host's filesystem seen through
a mount, while the overlay folder is on the container's own (usually overlayfs) root; on
the host both are plain host filesystems. The paper's random-I/O finding is about that
difference, so every disk figure is taken on both, and its detail names the filesystem
type, so a reader can tell an overlayfs figure from an ext4 one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from servebench.overhead.probes import ProbeContext

MOUNTINFO = Path("/proc/self/mountinfo")
Figure = TypeVar("Figure")


@dataclass(frozen=True)
class DiskTarget:
    """One folder as a disk probe sees it: `name` prefixes each metric, and `path` is the
    probe's file of `file_mib` MiB, in a fresh work folder on a `filesystem`."""

    name: str
    filesystem: str
    path: Path
    file_mib: int

    @property
    def detail(self) -> dict[str, str | int]:
        """What every figure measured here says of where: the filesystem, the file size."""
        return {"filesystem": self.filesystem, "file_mib": self.file_mib}


def disk_folders(context: ProbeContext) -> list[tuple[str, Path]]:
    """(name, folder) pairs: the name prefixes each metric ("scratch_…", "overlay_…")."""
    return [("scratch", context.scratch), ("overlay", context.overlay)]


def filesystem_type(path: Path) -> str:
    """The type of the filesystem `path` is on ("ext4", "overlay", "tmpfs"…), from the
    mount table: the entry with the longest mount point that contains the path."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        lines = MOUNTINFO.read_text().splitlines()
    except OSError:
        return kind
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        mount_point = parts[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, kind = mount_point, rest.split()[0]
    return kind


@contextmanager
def work_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder under `parent` for one probe run, removed afterwards with its files
    (benchmark files are large, and a rerun must not find the last run's)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def on_each_disk(
    context: ProbeContext,
    probe: str,
    file_mib: int,
    measure: Callable[[DiskTarget], list[Figure]],
) -> list[Figure]:
    """What `measure` finds on each disk folder in turn, its file (`<probe>.dat`) in a work
    folder of its own that is removed afterwards, also when `measure` fails."""
    found: list[Figure] = []
    for name, parent in disk_folders(context):
        fstype = filesystem_type(parent)
        with work_folder(parent, f"{probe}-") as folder:
            found += measure(DiskTarget(name, fstype, folder / f"{probe}.dat", file_mib))
    return found
