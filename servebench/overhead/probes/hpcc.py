"""CPU and memory: the HPC Challenge suite (Debian's `hpcc`), with HPL as its headline.

The paper measured the CPU with HPL; `hpcc` runs HPL together with DGEMM, STREAM,
RandomAccess, FFT and PTRANS in one binary and writes every result into the summary
block of `hpccoutf.txt`, which `parse_summary` reads. It runs as one MPI process started
directly (OpenMPI's singleton mode: no `mpirun`, so no run-as-root switches are needed,
on the host or in a container), so the "Single…" figures are the ones reported: one
process, nothing else of hpcc's running. Debian links hpcc against the system BLAS
(`libblas.so.3`, whichever alternative is installed: reference BLAS, single-threaded, on a
plain Debian); the library found is in each figure's detail, because a host and an image
with different BLAS alternatives would compare libraries, not the container.

Problem size. hpcc sizes every test from HPL's N (its matrix takes 8·N² bytes; STREAM's
three arrays and DGEMM's matrices share that memory). N=4000 is the full run: STREAM's
arrays are then 43 MB each, beyond a 32 MB last-level cache, so STREAM reads memory, not
cache, and the whole suite takes about 30 s of CPU time with reference BLAS on a current
x86 core (N=6000 took 100 s, most of it DGEMM: too long to repeat host, container, host, …
several times). Quick mode uses N=2000 (about 3 s). N is lowered when a quarter of the
available memory cannot hold the matrix.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import psutil

from servebench.overhead.measure import Measurement
from servebench.overhead.probes import ProbeContext, ProbeUnavailable
from servebench.overhead.probes.folders import work_folder
from servebench.overhead.probes.tool import ToolFailed, require, run_tool

PROBE = "hpcc"
FULL_N = 4000
QUICK_N = 2000
MIN_N = 500  # below this every test fits in L2 and the figures say nothing
BLOCK = 80  # HPL's NB, as in Debian's example input
MEMORY_SHARE = 0.25
OUTPUT_FILE = "hpccoutf.txt"
FULL_TIMEOUT_S = 1800.0
QUICK_TIMEOUT_S = 300.0

# (summary key, metric, unit, factor to the unit): all are "higher is better".
METRICS: tuple[tuple[str, str, str, float], ...] = (
    ("HPL_Tflops", "hpl_gflops", "GFLOP/s", 1000.0),
    ("SingleDGEMM_Gflops", "dgemm_gflops", "GFLOP/s", 1.0),
    ("SingleSTREAM_Copy", "stream_copy_gbs", "GB/s", 1.0),
    ("SingleSTREAM_Triad", "stream_triad_gbs", "GB/s", 1.0),
    ("SingleRandomAccess_GUPs", "random_access_gups", "GUP/s", 1.0),
    ("SingleFFT_Gflops", "fft_gflops", "GFLOP/s", 1.0),
)
# Sizes hpcc derived from N, kept in each figure's detail.
SIZE_KEYS = ("HPL_N", "HPL_time", "DGEMM_N", "STREAM_VectorSize", "RandomAccess_N", "FFT_N")

_SUMMARY = re.compile(r"^Begin of Summary section\.$(.*?)^End of Summary section\.$", re.M | re.S)


def problem_size(quick: bool, available_bytes: int) -> int:
    """HPL's N: the quick or full size, lowered to what a quarter of memory holds."""
    fits = int(math.sqrt(MEMORY_SHARE * available_bytes / 8))
    n = min(QUICK_N if quick else FULL_N, fits)
    if n < MIN_N:
        raise ProbeUnavailable(
            f"hpcc needs about {8 * MIN_N**2 / MEMORY_SHARE / 2**20:.0f} MiB free memory; "
            f"{available_bytes / 2**20:.0f} MiB are available"
        )
    return n


def input_file(n: int) -> str:
    """hpccinf.txt: HPL.dat's format, one problem of order `n` on a 1×1 process grid, the
    rest as in Debian's example input (/usr/share/doc/hpcc/examples/_hpccinf.txt)."""
    return f"""HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
{n:<12d} Ns
1            # of NBs
{BLOCK:<12d} NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
1            Ps
1            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
"""


def parse_summary(text: str) -> dict[str, str]:
    """The `key=value` lines of hpccoutf.txt's summary block; ValueError when there is none
    (hpcc stopped before writing it)."""
    found = _SUMMARY.search(text)
    if found is None:
        raise ValueError("hpcc output has no summary section (the run did not finish)")
    summary: dict[str, str] = {}
    for line in found.group(1).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            summary[key.strip()] = value.strip()
    return summary


def summary_measurements(
    summary: dict[str, str],
    *,
    cpu_s: float | None = None,
    wall_s: float | None = None,
    detail: dict[str, str | float | int] | None = None,
) -> list[Measurement]:
    """The reported figures of one summary block; ValueError when hpcc says a test failed
    its verification or a figure is missing or not positive (hpcc writes -1 for a test it
    did not run)."""
    if summary.get("Success") != "1":
        raise ValueError(f"hpcc reports a failed test (Success={summary.get('Success')})")
    sizes: dict[str, str | float | int] = {
        key: float(summary[key]) for key in SIZE_KEYS if key in summary
    }
    measurements = []
    for key, metric, unit, factor in METRICS:
        if key not in summary:
            raise ValueError(f"hpcc summary has no {key}")
        value = float(summary[key]) * factor
        if not value > 0:
            raise ValueError(f"hpcc summary: {key}={summary[key]} is not a measured rate")
        measurements.append(
            Measurement(
                probe=PROBE,
                metric=metric,
                value=value,
                unit=unit,
                better="higher",
                cpu_s=cpu_s,
                wall_s=wall_s,
                detail={**sizes, **(detail or {}), "hpcc_key": key},
            )
        )
    return measurements


def blas_library(binary: str) -> str:
    """The BLAS file the dynamic loader gives `binary` (the alternative in use), or
    "unknown"."""
    try:
        listing = subprocess.run(
            ["ldd", binary], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in listing.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if arrow and name.startswith("libblas"):
            return os.path.realpath(rest.split(" (")[0])
    return "unknown"


def run(context: ProbeContext) -> list[Measurement]:
    """One hpcc run in a fresh folder under the overlay folder (hpcc appends to an
    existing output file); every figure carries that run's CPU and wall time."""
    binary = require("hpcc", "hpcc")
    n = problem_size(context.quick, psutil.virtual_memory().available)
    timeout_s = QUICK_TIMEOUT_S if context.quick else FULL_TIMEOUT_S
    with work_folder(context.overlay, "hpcc-") as folder:
        (folder / "hpccinf.txt").write_text(input_file(n))
        done = run_tool([binary], cwd=folder, timeout_s=timeout_s)
        output = Path(folder, OUTPUT_FILE)
        if not output.exists():
            raise ToolFailed(f"hpcc exited normally but wrote no {OUTPUT_FILE}")
        text = output.read_text(errors="replace")
    try:
        summary = parse_summary(text)
        return summary_measurements(
            summary,
            cpu_s=done.cpu_s,
            wall_s=done.wall_s,
            detail={"blas": blas_library(binary), "nb": BLOCK},
        )
    except ValueError as err:
        raise ToolFailed(str(err)) from None
