"""The probes: each module exposes `run(context) -> list[Measurement]`.

A probe must behave the same on both sides: it reads and writes only under
`context.scratch` (a bind-mounted folder) or `context.overlay` (a folder on the
container's own filesystem, the host's /tmp on the host side), and it says plainly when
something it needs is missing (raising `ProbeUnavailable` with one sentence) rather
than returning a made-up figure.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servebench.overhead.errors import OverheadError
from servebench.overhead.measure import Measurement


class ProbeUnavailable(OverheadError, RuntimeError):
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


# Probe name → module, imported only when the probe runs: a probe's heavy imports (torch,
# scipy) then cost nothing to a run that leaves it out, and a module that cannot import
# here fails only its own probe.
PROBES: dict[str, str] = {
    "hpcc": "servebench.overhead.probes.hpcc",
    "hpcg": "servebench.overhead.probes.hpcg",
    "ioping": "servebench.overhead.probes.ioping",
    "fio": "servebench.overhead.probes.fio",
    "gpu": "servebench.overhead.probes.gpu",
    "cpu_gemm": "servebench.overhead.probes.cpu_gemm",
    "training": "servebench.overhead.probes.training",
}

Probe = Callable[[ProbeContext], list[Measurement]]


def load_probe(name: str) -> Probe:
    """The `run` function of probe `name`; an unknown name is a `ValueError` naming the
    known ones."""
    try:
        module = PROBES[name]
    except KeyError:
        raise ValueError(f"probe: unknown {name!r}; expected one of {', '.join(PROBES)}") from None
    return importlib.import_module(module).run
