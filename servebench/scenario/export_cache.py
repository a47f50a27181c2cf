"""A folder of finished exports that a fresh run copies instead of exporting again.

Unset by default, so every run exports its own models (`scenario.deploy`). It is a seam
for the test suite, whose dozens of runs export the same few tiny models: seconds each,
mostly the ONNX exporter's warm-up in a new process, and the parity check. An entry is
keyed by everything an export is made from (the specs, formats and seed) and is only as
current as the code that wrote it, which is why nothing sets it for a user.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXPORT_CACHE_ENV = "SERVEBENCH_EXPORT_CACHE"


def cache_entry(models: Sequence[Any], formats: Sequence[str], seed: int) -> Path | None:
    """Where the cache keeps the export of `models` (ModelSpecs); None without a cache."""
    root = os.environ.get(EXPORT_CACHE_ENV)
    if not root:
        return None
    made_of = json.dumps([[m.model_dump(mode="json") for m in models], list(formats), seed])
    return Path(root) / hashlib.sha256(made_of.encode()).hexdigest()[:24]


def keep(export: Path, entry: Path) -> None:
    """Put a fresh run's export into the cache. The rename is atomic, so a run reading the
    cache sees a whole entry or none; of two runs storing the same entry, the first wins."""
    staging = entry.with_name(f".{entry.name}.{os.getpid()}")
    shutil.copytree(export, staging)
    try:
        staging.rename(entry)
    except OSError:  # stored meanwhile
        shutil.rmtree(staging, ignore_errors=True)
