"""Arrival processes: exact offsets, rates, ramps and perf_analyzer's interval files."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from servebench.load import TraceArrivals, constant, linear, poisson, step


def take(process, n):
    return np.array(list(itertools.islice(process.offsets(), n)))


def test_constant_is_evenly_spaced_from_zero():
    offsets = take(constant(500), 1000)
    assert offsets[0] == 0.0
    assert np.allclose(np.diff(offsets), 1 / 500)
    assert constant(500).expected(1.0, 3.0) == pytest.approx(1000)


def test_poisson_is_seeded_and_has_the_mean_rate():
    a, b, c = (
        take(poisson(1000, seed=7), 20000),
        take(poisson(1000, seed=7), 20000),
        take(poisson(1000, seed=8), 20000),
    )
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(1e-3, rel=0.03)
    # exponential gaps: the standard deviation equals the mean
    assert gaps.std() == pytest.approx(1e-3, rel=0.05)


def test_trace_follows_perf_analyzer_example_and_loops(tmp_path):
    path = tmp_path / "intervals.txt"
    path.write_text("100000\n200000\n500000\n")
    offsets = take(TraceArrivals.from_file(path), 6)
    assert np.allclose(offsets, [0.1, 0.3, 0.8, 0.9, 1.1, 1.6])
    trace = TraceArrivals.from_file(path)
    assert trace.expected(0.0, 1.6) == 5  # 0.1 0.3 0.8 0.9 1.1 (1.6 is outside [0, 1.6))


def test_trace_without_loop_ends():
    assert list(TraceArrivals([0.5, 0.5], loop=False).offsets()) == [0.5, 1.0]


def test_trace_file_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("100\nfast\n")
    with pytest.raises(ValueError, match=r"line 2: 'fast'"):
        TraceArrivals.from_file(path)
    with pytest.raises(ValueError, match="No such file"):
        TraceArrivals.from_file(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="no intervals"):
        TraceArrivals([])
    with pytest.raises(ValueError, match=">= 0"):
        TraceArrivals([1.0, -1.0])


def test_step_schedule_holds_each_rate_then_the_end():
    process = step(100, 100, 300, 1.0)
    offsets = take(process, 800)
    counts = np.histogram(offsets, bins=[0, 1, 2, 3, 4])[0]
    assert counts.tolist() == [100, 200, 300, 200]  # 4th second cut by the 800 taken
    assert process.expected(0, 4) == pytest.approx(100 + 200 + 300 + 300)


def test_linear_ramp_matches_the_integral():
    process = linear(0, 100, 400)  # 0 → 400 req/s at 100 req/s², then holds 400
    offsets = take(process, 2000)
    # Λ(t) = 50 t² up to t = 4 s (800 requests), then 400 req/s
    assert np.sum(offsets < 2.0) == pytest.approx(200, abs=1)
    assert np.sum(offsets < 4.0) == pytest.approx(800, abs=1)
    assert np.sum((offsets >= 4.0) & (offsets < 5.0)) == pytest.approx(400, abs=1)
    assert process.expected(0, 4) == pytest.approx(800)


def test_downward_ramp_and_poisson_ramp():
    down = linear(400, -100, 100)
    assert down.expected(0, 3) == pytest.approx(400 * 3 - 50 * 9)
    ramped = take(linear(100, 100, 300, poisson=True, seed=1), 5000)
    assert np.all(np.diff(ramped) >= 0)
    assert np.sum(ramped < 2.0) == pytest.approx(400, rel=0.15)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: constant(0), "rate: must be"),
        (lambda: constant(math.inf), "rate: must be"),
        (lambda: step(10, 0, 20, 1), "load step"),
        (lambda: step(10, -5, 20, 1), "moves away"),
        (lambda: step(10, 5, 20, 0), "load step duration"),
        (lambda: linear(10, 5, 0), "load end"),
    ],
)
def test_bad_schedules_name_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()
