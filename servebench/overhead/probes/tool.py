"""Run one external benchmark tool (hpcc, ioping, fio) and account for its CPU and wall time.

The overhead comparison reads each step's CPU time beside its wall time, because on a
shared machine wall time alone mixes the container's cost with other people's work. A
tool's CPU time is the growth of `getrusage(RUSAGE_CHILDREN)` across its run: the kernel
adds a child's user and system time there once it has been waited for, so the figure is
the tool's own (and its waited-for children's), not this Python process's.

A probe runs alone in its own process (`probe_main`), so no other child of this process
finishes during a tool's run and spoils the difference.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from servebench.overhead.errors import OverheadError
from servebench.overhead.probes import ProbeUnavailable

Parsed = TypeVar("Parsed")


class ToolFailed(OverheadError, RuntimeError):
    """The tool ran but failed: its exit status and last line of error output, in one line."""


@dataclass(frozen=True)
class ToolRun:
    """What one run of a tool printed, and what it cost."""

    stdout: str
    cpu_s: float  # user + system time of the tool and the children it waited for
    wall_s: float


def require(binary: str, package: str) -> str:
    """The path of `binary`, or ProbeUnavailable naming the Debian package that has it."""
    path = shutil.which(binary)
    if path is None:
        raise ProbeUnavailable(f"{binary} is not installed here (Debian package {package})")
    return path


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_tool(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ToolRun:
    """Run `argv` to completion; its stdout, CPU time and wall time, or ToolFailed.

    `env` replaces the environment when given (pass `{**os.environ, ...}` to extend it).
    """
    name = Path(argv[0]).name
    cpu0, wall0 = _children_cpu_s(), time.perf_counter()
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{name} did not finish within {timeout_s:g} s") from None
    wall_s, cpu_s = time.perf_counter() - wall0, _children_cpu_s() - cpu0
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
        last = lines[-1].strip() if lines else "no output"
        raise ToolFailed(f"{name} exited with status {done.returncode}: {last}")
    return ToolRun(stdout=done.stdout, cpu_s=cpu_s, wall_s=wall_s)


def run_parsed(
    argv: Sequence[str], parse: Callable[[str], Parsed], *, where: str, timeout_s: float
) -> tuple[ToolRun, Parsed]:
    """`run_tool`, then `parse` its stdout; output `parse` refuses (ValueError) is a
    RuntimeError that names `where` (which folder and job), so a probe says which run."""
    done = run_tool(argv, timeout_s=timeout_s)
    try:
        return done, parse(done.stdout)
    except ValueError as err:
        raise RuntimeError(f"{where}: {err}") from None
