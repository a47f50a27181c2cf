"""The HPCG-like probe: its matrix is HPCG's 27-point stencil, CG really solves the
system, the flop count is the operations performed, and the rate is plausible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from overhead_bounds import fp64_peak_gflops

from servebench.overhead.probes import ProbeContext, hpcg


def test_stencil_matrix_is_hpcgs() -> None:
    a = hpcg.stencil_matrix(3, 4, 5)
    dense = a.toarray()
    assert a.shape == (60, 60)
    assert np.array_equal(dense, dense.T)
    assert np.all(np.diag(dense) == 26.0)
    assert set(np.unique(dense[dense != 26.0])) == {-1.0, 0.0}
    # Row (x=1, y=1, z=1) is inside the grid: all 26 neighbours; a corner has 7.
    inner, corner = 1 + 3 * (1 + 4 * 1), 0
    assert np.count_nonzero(dense[inner]) == 27
    assert np.count_nonzero(dense[corner]) == 8
    # The neighbour of the inner point one step in z (x fastest, then y, then z).
    assert dense[inner, inner + 12] == -1.0
    assert np.linalg.eigvalsh(dense).min() > 0  # positive definite: CG applies


def test_too_small_grid_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 points"):
        hpcg.stencil_matrix(1, 8, 8)


def test_conjugate_gradient_solves_and_counts_its_flops() -> None:
    a = hpcg.stencil_matrix(16, 16, 16)
    b = a @ np.ones(a.shape[0])
    done = hpcg.conjugate_gradient(a, b, 50)
    n = a.shape[0]
    assert done.iterations == 50
    assert done.flops == 50 * (2 * a.nnz + 10 * n)
    assert done.relative_residual < 1e-8
    assert done.max_error < 1e-7
    assert done.wall_s > 0 and done.cpu_s > 0


def test_fewer_iterations_leave_a_larger_residual() -> None:
    a = hpcg.stencil_matrix(16, 16, 16)
    b = a @ np.ones(a.shape[0])
    residuals = [hpcg.conjugate_gradient(a, b, k).relative_residual for k in (5, 10, 20)]
    assert residuals[0] > residuals[1] > residuals[2]


def test_quick_run_gives_a_plausible_rate(tmp_path: Path) -> None:
    (found,) = hpcg.run(ProbeContext(scratch=tmp_path, overlay=tmp_path, quick=True))
    assert found.metric == "cg_gflops" and found.unit == "GFLOP/s" and found.better == "higher"
    assert 0 < found.value < fp64_peak_gflops()
    assert found.wall_s is not None and found.cpu_s is not None
    assert found.value == pytest.approx(int(found.detail["flops"]) / found.wall_s / 1e9)
    assert float(found.detail["relative_residual"]) < 1e-6
    assert found.detail["rows"] == hpcg.QUICK_GRID**3
