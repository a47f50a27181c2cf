"""The probes: each module exposes `run(context) -> list[Measurement]`.

A probe must behave the same on both sides: it reads and writes only under
`context.scratch` (a bind-mounted folder) or `context.overlay` (a folder on the
container's own filesystem, the host's /tmp on the host side), and it says plainly when
something it needs is missing (raising `ProbeUnavailable` with one sentence) rather
than returning a made-up figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class ProbeUnavailable(RuntimeError):
    """The probe cannot run here (no GPU, no hpcc binary, not root): one sentence why."""


@dataclass(frozen=True)
class ProbeContext:
    """Where a probe may write and how hard it should work.

    `quick` shrinks problem sizes for tests (seconds, not minutes) without changing what
    is measured.
    """

    scratch: Path
    overlay: Path
    quick: bool = False
