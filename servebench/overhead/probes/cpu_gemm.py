"""CPU matrix multiply with torch (GFLOP/s), checked against the CPU's computed peak.

The counterpart of the GPU probe's GEMM for machines without a GPU, and a figure for the
same library (torch's BLAS) that the training probe runs on: hpcc's DGEMM measures a
different BLAS in double precision. The peak bound makes the figure checkable: a GEMM
faster than cores × clock × FLOP per cycle is a timing error, not a fast machine.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from servebench.overhead.measure import Measurement
from servebench.overhead.probes import ProbeContext

PROBE = "cpu_gemm"
QUICK_SIZES = (256, 512)
FULL_SIZES = (512, 1024, 2048)
CPUINFO = Path("/proc/cpuinfo")
CPUFREQ = Path("/sys/devices/system/cpu")

# Single-precision FLOP per cycle per core at most, by the widest vector FMA the flags
# announce: two FMA units (the most any x86 core has) × lanes × 2 (multiply and add).
# Without FMA, one add and one multiply per cycle. Upper bounds: a core with one 512-bit
# unit, or 256-bit units under AVX-512, does half, which only loosens the bound.
_FP32_FLOP_PER_CYCLE: tuple[tuple[frozenset[str], int, str], ...] = (
    (frozenset({"avx512f"}), 64, "AVX-512 FMA"),
    (frozenset({"avx2", "fma"}), 32, "AVX2 FMA"),
    (frozenset({"avx"}), 16, "AVX"),
    (frozenset({"sse2"}), 8, "SSE2"),
)


@dataclass(frozen=True)
class CpuPeak:
    """The bound and how it was reached, so a reader can check each factor."""

    cores: int
    clock_mhz: float
    clock_source: str
    flop_per_cycle: int
    isa: str

    @property
    def gflops(self) -> float:
        return self.cores * self.clock_mhz * 1e-3 * self.flop_per_cycle

    def describe(self) -> str:
        return (
            f"{self.cores} cores x {self.clock_mhz:.0f} MHz ({self.clock_source})"
            f" x {self.flop_per_cycle} FP32 FLOP/cycle ({self.isa})"
        )


def cpu_peak(
    cpuinfo: str, allowed: set[int], cpufreq: Path = CPUFREQ
) -> tuple[CpuPeak | None, str]:
    """The FP32 peak of the physical cores behind the logical CPUs in `allowed`, from
    /proc/cpuinfo's text and cpufreq's maximum clock; (None, why) when it cannot be told.

    Hyperthreads share their core's vector units, so cores are counted by (physical id,
    core id). The clock is cpufreq's maximum where the kernel exposes it, else the model
    name's nominal clock, else the highest "cpu MHz" (virtual machines often show only
    these; a turbo clock above them is then not counted, which `clock_source` says).
    """
    blocks = [_fields(block) for block in cpuinfo.split("\n\n") if block.strip()]
    cpus = [b for b in blocks if "processor" in b and int(b["processor"]) in allowed]
    if not cpus:
        return None, "no allowed CPU in /proc/cpuinfo"
    flags = set(cpus[0].get("flags", "").split())
    width = next(((n, isa) for need, n, isa in _FP32_FLOP_PER_CYCLE if need <= flags), None)
    if width is None:
        return None, "no x86 vector flags in /proc/cpuinfo: FLOP per cycle unknown"
    cores = len({(c.get("physical id", "0"), c.get("core id", c["processor"])) for c in cpus})
    clock = _max_clock(cpus, cpufreq)
    if clock is None:
        return None, "no clock in cpufreq or /proc/cpuinfo"
    peak = CpuPeak(cores, clock[0], clock[1], width[0], width[1])
    return peak, peak.describe()


def _fields(block: str) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in block.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _max_clock(cpus: list[dict[str, str]], cpufreq: Path) -> tuple[float, str] | None:
    khz = []
    for cpu in cpus:
        try:
            path = cpufreq / f"cpu{cpu['processor']}" / "cpufreq" / "cpuinfo_max_freq"
            khz.append(int(path.read_text()))
        except (OSError, ValueError):
            break
    else:
        return max(khz) / 1000.0, "cpufreq maximum"
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", cpus[0].get("model name", ""))
    if nominal:
        return float(nominal.group(1)) * 1000.0, "nominal clock in the model name; turbo unknown"
    mhz = [float(c["cpu MHz"]) for c in cpus if "cpu MHz" in c]
    if mhz:
        return max(mhz), "cpu MHz in /proc/cpuinfo; turbo unknown"
    return None


def gemm_gflops(n: int, min_seconds: float) -> tuple[float, int, float, float]:
    """(GFLOP/s, iterations, wall s, CPU s) of n×n FP32 matmuls repeated for at least
    `min_seconds` after one warm-up (which pays for allocation and BLAS start-up)."""
    generator = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=generator)
    b = torch.randn(n, n, generator=generator)
    out = torch.empty(n, n)
    torch.matmul(a, b, out=out)
    iterations = 0
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    while True:
        torch.matmul(a, b, out=out)
        iterations += 1
        wall = time.perf_counter() - wall_start
        if wall >= min_seconds:
            break
    cpu = time.process_time() - cpu_start
    return 2.0 * n**3 * iterations / wall / 1e9, iterations, wall, cpu


def run(context: ProbeContext) -> list[Measurement]:
    """FP32 GEMM GFLOP/s per size, each with the peak bound of this CPU in its detail."""
    sizes, min_seconds = (QUICK_SIZES, 0.1) if context.quick else (FULL_SIZES, 0.5)
    peak, peak_note = cpu_peak(CPUINFO.read_text(), os.sched_getaffinity(0))
    common: dict[str, str | float | int] = {
        "torch_threads": torch.get_num_threads(),
        "peak_bound_gflops": peak.gflops if peak else float("nan"),
        "peak_bound": peak_note,
    }
    figures = []
    for n in sizes:
        gflops, iterations, wall, cpu = gemm_gflops(n, min_seconds)
        detail = {**common, "n": n, "iterations": iterations}
        figures.append(
            Measurement(
                PROBE,
                f"gemm_fp32_n{n}_gflops",
                gflops,
                "GFLOP/s",
                "higher",
                cpu_s=cpu,
                wall_s=wall,
                detail=detail,
            )
        )
    return figures
