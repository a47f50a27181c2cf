"""Evict files from the page cache before a cold read, and check that it worked.

The training probe's first epoch is the seed paper's finding (the container's first epoch
up to 77 % faster, an I/O and caching effect), so its data must really come from disk.
`posix_fadvise(POSIX_FADV_DONTNEED)` evicts the given files' clean pages without any
privilege, on the host and in a container alike; `/proc/sys/vm/drop_caches` (root on the
host only: /proc/sys is read-only in a container) empties the whole page cache and is
only the fallback. Which one ran is recorded, and the result is checked with mincore,
which reads nothing.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servebench.common.linux import cached_pages

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
# mincore missing from libc, or a filesystem that cannot be mapped: residency unknown.
_CANNOT_TELL = frozenset({errno.ENOSYS, errno.ENODEV, errno.EINVAL})


@dataclass(frozen=True)
class Eviction:
    """How the files were evicted: `method` is "drop_caches", "fadvise" or "none";
    `note` says why an earlier method was not used; `cached_fraction` is the share of
    the files' pages still cached afterwards (nan where mincore is unavailable)."""

    method: str
    note: str
    cached_fraction: float


def evict(paths: Sequence[Path], drop_caches: Path = DROP_CACHES) -> Eviction:
    """Evict `paths` from the page cache; never raises for a method not allowed here.

    fadvise comes first because it is the one method both sides have (a container cannot
    write drop_caches), so host and container start their first epoch alike, and because
    it leaves the rest of the machine's cache (other probes, other users) alone.
    drop_caches is the fallback where fadvise left pages cached and this process is root.
    """
    notes = []
    os.sync()  # dirty pages cannot be dropped; write them back first
    try:
        for path in paths:
            _fadvise_dontneed(path)
    except OSError as err:
        notes.append(f"posix_fadvise: {err.strerror or err}")
    else:
        fraction = cached_fraction(paths)
        if not fraction > 0:  # 0, or nan where residency cannot be told
            return Eviction("fadvise", "", fraction)
        notes.append(f"posix_fadvise left {fraction:.0%} of the pages cached")
    try:
        drop_caches.write_text("3\n")
    except OSError as err:
        notes.append(f"{drop_caches}: {err.strerror or err}")
        return Eviction("none", "; ".join(notes), cached_fraction(paths))
    return Eviction("drop_caches", "; ".join(notes), cached_fraction(paths))


def _fadvise_dontneed(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_fraction(paths: Sequence[Path]) -> float:
    """Share of the files' pages now in the page cache (0 to 1); nan if it cannot be
    told here (no mincore, a file that cannot be mapped) or the files are empty."""
    cached = total = 0
    try:
        for path in paths:
            in_cache, pages = cached_pages(path)
            cached += in_cache
            total += pages
    except OSError as err:
        if err.errno not in _CANNOT_TELL:
            raise
        return math.nan
    return cached / total if total else math.nan
