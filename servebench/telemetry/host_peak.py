"""Measure the host's compute and memory ceilings for the roofline, once per machine.

The roofline needs a hardware ceiling. On a GPU the vendor's table value would do, but a
CPU's real float32 GEMM rate depends on the BLAS numpy links, the core count the process
may use and the clock under load, so it is measured: a few large float32 matrix
multiplies through numpy (the same BLAS onnxruntime-class kernels reach for), best of N,
since interference from other work on the machine only ever makes a repeat slower.

The bandwidth figure is a large-array copy (read + write), a STREAM-"copy"-like number.
numpy copies on one thread, so on a many-core host it understates the socket's bandwidth;
it is what one serving thread can stream, which is the relevant slope for small batches.

A single best-of-3 per run was not a ceiling: on a 2-core machine shared with other work
the GEMM rate came out anywhere from 58 to 241 GFLOP/s (OpenBLAS with one free core runs
at half speed), so models plotted at 124-170 % of "the roof". `host_peaks` therefore
measures in a fresh process with a fixed BLAS thread count, takes the best of several
rounds spread over a few seconds (other work only ever slows a round down), and caches
the result per machine — hostname, CPU model and thread count — with its date, in
`~/.cache/servebench/host_peak.json` (`$SERVEBENCH_CACHE_DIR` or `cache_dir` to move it).
Every run on the machine then uses the same roofs; `remeasure=True` (or
`servebench report host-peak --remeasure`) measures again and replaces the entry.

It lives in telemetry because it measures the live machine; the scenario runner puts the
figures into run.json (`record_host_peaks`) and the analysis reads them from there only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import MutableMapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

CACHE_ENV = "SERVEBENCH_CACHE_DIR"
CACHE_FILE = "host_peak.json"
ROUNDS = 8
ROUND_PAUSE_S = 0.5  # between rounds, so one burst of other work cannot spoil them all
MEASURE_TIMEOUT_S = 300.0
# BLAS libraries read their thread count from these when they load, which is why the
# measurement runs in a fresh process rather than in one whose numpy is already loaded.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class PeakMeasurement:
    """A best-of-N rate and how it was measured, for run.json and the report."""

    value: float  # FLOP/s or bytes/s
    size: int  # matrix side, or array bytes
    repeats: int
    best_seconds: float


def measure_host_peak_flops(n: int = 2048, repeats: int = 3, *, seed: int = 0) -> PeakMeasurement:
    """Best-of-`repeats` float32 GEMM rate (2·n³ FLOP per multiply), after one warm-up.

    n=2048 takes about 0.1-0.5 s a multiply on a laptop-class CPU: large enough to leave
    BLAS's cache-blocked steady state dominating, small enough for a once-per-run call.
    """
    if n < 64:
        raise ValueError(f"n={n}: matrix side must be at least 64 for a meaningful GEMM rate")
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: must be at least 1")
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    np.matmul(a, b, out=out)  # warm-up: thread pool start, page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return PeakMeasurement(value=2.0 * n**3 / best, size=n, repeats=repeats, best_seconds=best)


def measure_host_peak_bw(nbytes: int = 128 * 2**20, repeats: int = 5) -> PeakMeasurement:
    """Best-of-`repeats` copy bandwidth in bytes/s, counting the read and the write.

    128 MiB is far beyond any last-level cache, so the copy streams from DRAM.
    """
    if nbytes < 2**20:
        raise ValueError(f"nbytes={nbytes}: use at least 1 MiB, or the copy stays in cache")
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: must be at least 1")
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: fault the destination pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    moved = 2 * src.nbytes
    return PeakMeasurement(value=moved / best, size=src.nbytes, repeats=repeats, best_seconds=best)


@dataclass(frozen=True)
class HostPeaks:
    """Both roofs of one machine, when they were measured, and whether from the cache."""

    flops: PeakMeasurement  # float32 GEMM, FLOP/s
    bw: PeakMeasurement  # array copy, bytes/s
    threads: int  # BLAS threads the GEMM used
    machine: str  # the cache key: hostname, CPU model, thread count
    measured_at: str  # ISO-8601, UTC
    flops_rounds: tuple[float, ...]  # each round's best, to show the spread
    bw_rounds: tuple[float, ...]
    load_average: float | None  # 1-minute load when measured: a busy host reads low
    cached: bool = False

    def run_fields(self) -> dict[str, Any]:
        """What run.json keeps: the two roofs the report reads, and how they were had."""
        return {
            "host_peak_flops": self.flops.value,
            "host_peak_bw": self.bw.value,
            "host_peak": {
                "machine": self.machine,
                "threads": self.threads,
                "measured_at": self.measured_at,
                "cached": self.cached,
                "gemm_n": self.flops.size,
                "copy_bytes": self.bw.size,
                "flops_rounds": list(self.flops_rounds),
                "bw_rounds": list(self.bw_rounds),
                "load_average": self.load_average,
            },
        }


def default_threads() -> int:
    """The cores this process may run on: what a server on this machine gets too."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_key(threads: int) -> str:
    return f"{socket.gethostname()} | {cpu_model()} | {threads} threads"


def cache_path(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir`, else $SERVEBENCH_CACHE_DIR, else $XDG_CACHE_HOME/servebench or
    ~/.cache/servebench — plus the file name."""
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "servebench"
        )
    return Path(cache_dir) / CACHE_FILE


def host_peaks(
    *,
    remeasure: bool = False,
    cache_dir: str | Path | None = None,
    threads: int | None = None,
    rounds: int = ROUNDS,
) -> HostPeaks:
    """This machine's GEMM and copy-bandwidth roofs: from the cache, else measured
    (`rounds` rounds in a fresh process with `threads` BLAS threads) and cached."""
    threads = threads or default_threads()
    key = machine_key(threads)
    path = cache_path(cache_dir)
    entries = _read_cache(path)
    if not remeasure and key in entries:
        try:
            return _from_entry(entries[key], cached=True)
        except (KeyError, TypeError, ValueError):
            pass  # an entry from another version of this file: measure again
    peaks = _measure_in_subprocess(threads, rounds, key)
    entries[key] = _to_entry(peaks)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=2, sort_keys=True))
    os.replace(tmp, path)
    return peaks


def record_host_peaks(run: MutableMapping[str, Any], **options: Any) -> PeakMeasurement:
    """Put both roofs into a run's run.json fields and return the GEMM peak (what each
    trial row carries as `host_peak_flops`); `options` go to `host_peaks`."""
    peaks = host_peaks(**options)
    run.update(peaks.run_fields())
    return peaks.flops


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: it is only a cache
    return entries if isinstance(entries, dict) else {}


def _to_entry(peaks: HostPeaks) -> dict[str, Any]:
    entry = asdict(peaks)
    entry.pop("cached")
    return entry


def _from_entry(entry: dict[str, Any], *, cached: bool) -> HostPeaks:
    return HostPeaks(
        flops=PeakMeasurement(**entry["flops"]),
        bw=PeakMeasurement(**entry["bw"]),
        threads=int(entry["threads"]),
        machine=str(entry["machine"]),
        measured_at=str(entry["measured_at"]),
        flops_rounds=tuple(float(v) for v in entry["flops_rounds"]),
        bw_rounds=tuple(float(v) for v in entry["bw_rounds"]),
        load_average=None if entry["load_average"] is None else float(entry["load_average"]),
        cached=cached,
    )


def _measure_in_subprocess(threads: int, rounds: int, key: str) -> HostPeaks:
    env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads))}
    command = [sys.executable, "-m", __name__, "--rounds", str(rounds)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S, check=True
        )
    except subprocess.CalledProcessError as err:
        tail = (err.stderr or "").strip().splitlines()[-3:]
        raise RuntimeError(f"host peak measurement failed: {' / '.join(tail)}") from None
    result = json.loads(done.stdout)
    return _from_entry({**result, "threads": threads, "machine": key}, cached=False)


def _measure_rounds(rounds: int) -> dict[str, Any]:
    """Best of `rounds` rounds of each measurement, with a pause between rounds."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: must be at least 1")
    gemm, copy = [], []
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for i in range(rounds):
        if i:
            time.sleep(ROUND_PAUSE_S)
        gemm.append(measure_host_peak_flops())
        copy.append(measure_host_peak_bw())
    return {
        "flops": asdict(max(gemm, key=lambda m: m.value)),
        "bw": asdict(max(copy, key=lambda m: m.value)),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "flops_rounds": [m.value for m in gemm],
        "bw_rounds": [m.value for m in copy],
        "load_average": load,
    }


def main(argv: list[str] | None = None) -> None:
    """The measuring process: prints one JSON object (see `_measure_in_subprocess`)."""
    parser = argparse.ArgumentParser(description="measure this host's GEMM and copy peaks")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    print(json.dumps(_measure_rounds(parser.parse_args(argv).rounds)))


if __name__ == "__main__":
    main()
