"""Run one overhead probe in this process and print its measurements as JSON lines.

    python -m servebench.overhead.probe_main PROBE --scratch DIR --overlay DIR [--quick]

Both sides start a probe through this same entry point (the host side as a subprocess,
the container side with `exec` inside the container), so the only difference between the
two runs is where they run. PROBE is a name from `PROBES` or an importable module with a
`run(context)` function (a probe of one's own).

Standard output carries only the result: one `Measurement` JSON line each (exit 0), or,
when the probe cannot run here, its one-sentence reason (exit `UNAVAILABLE_EXIT`). While
the probe runs, anything it or a tool it starts writes to standard output goes to
standard error instead, so chatter can never be mistaken for a measurement. A probe that
leaves `cpu_s`/`wall_s` empty gets the whole probe run's CPU time (this process and its
children) and wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from servebench.overhead.measure import Measurement
from servebench.overhead.probes import PROBES, Probe, ProbeContext, ProbeUnavailable, load_probe

# 0: measured; 1: the probe failed (traceback on stderr); 2: bad arguments (argparse);
# 3: the probe cannot run here, its reason on stdout.
UNAVAILABLE_EXIT = 3


def resolve_probe(name: str) -> Probe:
    """A registered probe, or `run` of the module `name` names (it must contain a dot)."""
    if name in PROBES or "." not in name:
        return load_probe(name)
    module = importlib.import_module(name)
    if not callable(getattr(module, "run", None)):
        raise ValueError(f"probe: module {name} has no run(context) function")
    return module.run


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[int]:
    """Point file descriptor 1 at stderr for the duration; yield a descriptor of the real
    stdout (subprocesses a probe starts inherit fd 1, so sys.stdout alone is not enough)."""
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    try:
        yield real
    finally:
        sys.stdout.flush()
        os.dup2(real, 1)
        os.close(real)


def measure(probe: Probe, context: ProbeContext) -> list[Measurement]:
    """Run `probe` once; fill in the CPU and wall time of measurements that lack them."""
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    found = probe(context)
    cpu_s, wall_s = _cpu_seconds() - cpu0, time.perf_counter() - wall0
    return [
        dataclasses.replace(
            m,
            cpu_s=cpu_s if m.cpu_s is None else m.cpu_s,
            wall_s=wall_s if m.wall_s is None else m.wall_s,
        )
        for m in found
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m servebench.overhead.probe_main",
        description="Run one overhead probe here; print its measurements as JSON lines.",
    )
    parser.add_argument("probe", help=f"{', '.join(PROBES)}, or a module with run(context)")
    parser.add_argument("--scratch", type=Path, required=True, help="bind-mounted work folder")
    parser.add_argument("--overlay", type=Path, required=True, help="folder on the side's own fs")
    parser.add_argument("--quick", action="store_true", help="small problem sizes (tests)")
    args = parser.parse_args(argv)
    for flag, folder in (("--scratch", args.scratch), ("--overlay", args.overlay)):
        if not folder.is_dir():
            parser.error(f"{flag} {folder}: not a folder")
    try:
        probe = resolve_probe(args.probe)
    except (ValueError, ImportError) as err:
        parser.error(str(err))
    context = ProbeContext(scratch=args.scratch, overlay=args.overlay, quick=args.quick)
    with _stdout_to_stderr() as out:
        try:
            lines = [m.to_json() for m in measure(probe, context)]
            code = 0
        except ProbeUnavailable as why:
            lines, code = [" ".join(str(why).split())], UNAVAILABLE_EXIT
        with open(out, "w", closefd=False) as stream:
            stream.writelines(f"{line}\n" for line in lines)
    return code


if __name__ == "__main__":
    sys.exit(main())
