"""Measure the host's compute and memory ceilings for the roofline.

The roofline needs a hardware ceiling. On a GPU the vendor's table value would do, but a
CPU's real float32 GEMM rate depends on the BLAS numpy links, the core count the process
may use and the clock under load, so it is measured: a few large float32 matrix
multiplies through numpy (the same BLAS onnxruntime-class kernels reach for), best of N,
since interference from other work on the machine only ever makes a repeat slower.

The bandwidth figure is a large-array copy (read + write), a STREAM-"copy"-like number.
numpy copies on one thread, so on a many-core host it understates the socket's bandwidth;
it is what one serving thread can stream, which is the relevant slope for small batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


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
