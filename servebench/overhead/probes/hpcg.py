"""CPU and memory bandwidth: an HPCG-like sparse conjugate-gradient kernel.

HPCG (High Performance Conjugate Gradients) complements HPL with the memory-bound work
real solvers do; there is no HPCG package, so this reproduces its problem and operation
mix with scipy.sparse: the 27-point stencil matrix of an nx×ny×nz grid (26 on the
diagonal, -1 for each of up to 26 neighbours: symmetric positive definite), the right-hand
side b = A·1 (so the exact solution is all ones, as in HPCG), and sets of 50 conjugate-
gradient iterations from x = 0, each iteration one sparse matrix-vector product (SpMV),
two dot products and three WAXPBY vector updates.

What differs from HPCG: no preconditioner. HPCG preconditions with a multigrid V-cycle of
symmetric Gauss-Seidel sweeps, a sequential triangular solve that scipy has no fast kernel
for; left out, the iterations are SpMV, dot and WAXPBY only. That keeps the kernel
memory-bound like HPCG's (the point of having it beside HPL), but CG converges more
slowly, so the figure is not comparable with published HPCG scores, only host with
container.

GFLOP/s counts the operations performed, as HPCG does: 2 per stored non-zero for SpMV,
2n per dot product and 2n per WAXPBY of vectors of length n. The residual check: the true
relative residual ‖b − Ax‖/‖b‖ after each set must have fallen well below its start (1,
since x starts at 0), or the kernel computed something else and its rate means nothing.

Sizes: full runs use HPCG's default local grid, 104³ (1.1 M rows, 30 M non-zeros, about
0.4 GB: far beyond any cache), for 5 sets; quick runs 32³ for 3 sets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from servebench.overhead.measure import Measurement
from servebench.overhead.probes import ProbeContext

PROBE = "hpcg"
ITERATIONS = 50  # per set, as in HPCG
FULL_GRID, FULL_SETS = 104, 5
QUICK_GRID, QUICK_SETS = 32, 3
# The residual must fall at least this far in a set; 50 unpreconditioned iterations
# reduce it far more (1e-2 at 104³, 1e-9 at 32³), so failing this means a broken kernel.
MAX_RELATIVE_RESIDUAL = 0.1


def stencil_matrix(nx: int, ny: int, nz: int) -> sp.csr_matrix:
    """HPCG's matrix: row (i,j,k) has 26 on the diagonal and -1 for every grid point
    within one step in each direction (27-point stencil, fewer at the boundary).

    The neighbourhood pattern of a 3-D grid is the Kronecker product of three 1-D
    tridiagonal patterns (x varies fastest), self included; 27·I minus it is the matrix.
    """
    if min(nx, ny, nz) < 2:
        raise ValueError(f"grid {nx}x{ny}x{nz}: every side needs at least 2 points")

    def line(k: int) -> sp.dia_matrix:
        return sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(k, k))

    neighbours = sp.kron(sp.kron(line(nz), line(ny)), line(nx), format="csr")
    rows = nx * ny * nz
    return (27.0 * sp.identity(rows, format="csr") - neighbours).tocsr()


@dataclass(frozen=True)
class CgRun:
    """One set of CG iterations: the work done, its time, and how far it converged."""

    iterations: int
    flops: int
    wall_s: float
    cpu_s: float
    relative_residual: float  # ‖b − Ax‖/‖b‖ at the end, recomputed (not the recurrence)
    max_error: float  # max |x − 1|: the exact solution is all ones


def conjugate_gradient(a: sp.csr_matrix, b: np.ndarray, iterations: int) -> CgRun:
    """`iterations` CG steps from x = 0 (fewer only if the residual becomes exactly 0),
    timed; the final residual check is outside the timing and the flop count."""
    n = b.shape[0]
    spmv_flops, vector_flops = 2 * a.nnz, 2 * n
    x = np.zeros(n)
    r = b.copy()
    p = r.copy()
    rr = float(r @ r)
    flops, done = 0, 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while done < iterations and rr > 0.0:
        ap = a @ p  # SpMV
        alpha = rr / float(p @ ap)  # dot
        x += alpha * p  # WAXPBY
        r -= alpha * ap  # WAXPBY
        rr_next = float(r @ r)  # dot
        p *= rr_next / rr  # WAXPBY: p = r + beta·p
        p += r
        rr = rr_next
        flops += spmv_flops + 2 * vector_flops + 3 * vector_flops
        done += 1
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    residual = float(np.linalg.norm(b - a @ x) / np.linalg.norm(b))
    return CgRun(
        iterations=done,
        flops=flops,
        wall_s=wall_s,
        cpu_s=cpu_s,
        relative_residual=residual,
        max_error=float(np.max(np.abs(x - 1.0))),
    )


def run(context: ProbeContext) -> list[Measurement]:
    """Build the grid's matrix, run the sets, and report the rate over all of them."""
    grid, sets = (QUICK_GRID, QUICK_SETS) if context.quick else (FULL_GRID, FULL_SETS)
    a = stencil_matrix(grid, grid, grid)
    b = a @ np.ones(a.shape[0])
    runs = [conjugate_gradient(a, b, ITERATIONS) for _ in range(sets)]
    worst = max(one.relative_residual for one in runs)
    if not worst < MAX_RELATIVE_RESIDUAL:
        raise RuntimeError(
            f"hpcg: CG left a relative residual of {worst:.3g} (limit {MAX_RELATIVE_RESIDUAL})"
        )
    flops = sum(one.flops for one in runs)
    wall_s = sum(one.wall_s for one in runs)
    return [
        Measurement(
            probe=PROBE,
            metric="cg_gflops",
            value=flops / wall_s / 1e9,
            unit="GFLOP/s",
            better="higher",
            cpu_s=sum(one.cpu_s for one in runs),
            wall_s=wall_s,
            detail={
                "grid": f"{grid}x{grid}x{grid}",
                "rows": a.shape[0],
                "nonzeros": a.nnz,
                "sets": sets,
                "iterations_per_set": ITERATIONS,
                "flops": flops,
                "relative_residual": worst,
                "max_error": max(one.max_error for one in runs),
                "preconditioner": "none",
            },
        )
    ]
