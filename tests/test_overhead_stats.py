"""Overhead statistics on synthetic figures whose answer is known in advance."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from servebench.overhead.measure import Measurement
from servebench.overhead.stats import (
    OVERHEAD_COLUMNS,
    Bootstrap,
    StatsError,
    compare,
    compare_measurements,
    overhead_pct,
    to_rows,
    unpaired,
)

FAST = Bootstrap(resamples=2_000, seed=7)


def _noisy(center: float, n: int, seed: int, noise: float = 0.005) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + rng.normal(0, noise, n)))


def test_identical_samples_give_zero_overhead_and_an_interval_around_zero() -> None:
    values = _noisy(100.0, 9, seed=1)
    result = compare(values, values, "higher", bootstrap=FAST)
    assert result.overhead_pct == 0.0
    assert result.ci_low_pct <= 0.0 <= result.ci_high_pct
    assert result.ci_low_pct < result.ci_high_pct  # the noise shows as spread
    assert result.host == result.container
    assert result.ci_note == ""


def test_container_ten_percent_slower_is_plus_ten_with_an_interval_excluding_zero() -> None:
    host_gflops = _noisy(100.0, 12, seed=2)
    container_gflops = _noisy(90.0, 12, seed=3)
    result = compare(host_gflops, container_gflops, "higher", bootstrap=FAST)
    assert result.overhead_pct == pytest.approx(10.0, abs=0.5)
    assert 0.0 < result.ci_low_pct <= 10.0 <= result.ci_high_pct


def test_lower_is_better_metrics_are_positive_when_the_container_takes_longer() -> None:
    result = compare([2.0, 2.0, 2.0], [2.2, 2.2, 2.2], "lower", bootstrap=FAST)
    assert result.overhead_pct == pytest.approx(10.0)
    assert (result.ci_low_pct, result.ci_high_pct) == pytest.approx((10.0, 10.0))
    faster = compare([2.0, 2.0, 2.0], [1.8, 1.8, 1.8], "lower", bootstrap=FAST)
    assert faster.overhead_pct == pytest.approx(-10.0)
    # The same figures read as throughput (higher is better) flip sign.
    assert overhead_pct(2.0, 1.8, "higher") == pytest.approx(10.0)
    assert overhead_pct(2.0, 2.2, "higher") == pytest.approx(-10.0)


def test_spread_per_side() -> None:
    result = compare([1.0, 2.0, 3.0, 4.0, 5.0], [10.0, 20.0, 30.0], "lower", bootstrap=FAST)
    host = result.host
    assert (host.n, host.median, host.q1, host.q3, host.iqr) == (5, 3.0, 2.0, 4.0, 2.0)
    assert (host.minimum, host.maximum) == (1.0, 5.0)
    assert (result.container.n, result.container.median) == (3, 20.0)


def test_one_figure_per_side_gives_a_degenerate_interval_and_says_so() -> None:
    result = compare([100.0], [110.0], "lower", bootstrap=FAST)
    assert result.ci_low_pct == result.ci_high_pct == result.overhead_pct == pytest.approx(10.0)
    assert "one figure per side" in result.ci_note
    one_sided = compare([100.0], _noisy(110.0, 8, seed=4), "lower", bootstrap=FAST)
    assert "one host figure" in one_sided.ci_note


def test_an_empty_side_is_a_clear_error() -> None:
    with pytest.raises(StatsError, match="gpu/gemm: no container figures"):
        compare([1.0, 2.0], [], "higher", probe="gpu", metric="gemm")
    with pytest.raises(StatsError, match="no host figures"):
        compare([], [1.0], "higher")
    with pytest.raises(StatsError, match="non-finite"):
        compare([1.0, float("nan")], [1.0], "higher")
    with pytest.raises(StatsError, match="better must be"):
        compare([1.0], [1.0], "faster")  # type: ignore[arg-type]
    with pytest.raises(StatsError, match="resamples"):
        Bootstrap(resamples=0)
    with pytest.raises(StatsError, match="confidence"):
        Bootstrap(confidence=95)


def test_a_zero_host_median_has_no_overhead_instead_of_a_division_error() -> None:
    result = compare([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], "lower", bootstrap=FAST)
    assert np.isnan(result.overhead_pct)
    assert "host median is 0" in result.ci_note


def test_same_seed_same_interval_other_seed_other_draws() -> None:
    # Ten figures a side: medians of resamples then take many values, so two seeds' draws
    # land on different percentiles (with a few odd-sized samples they may coincide).
    host, container = _noisy(50.0, 10, seed=5, noise=0.05), _noisy(52.0, 10, seed=6, noise=0.05)
    first = compare(host, container, "lower", bootstrap=Bootstrap(resamples=500, seed=1))
    again = compare(host, container, "lower", bootstrap=Bootstrap(resamples=500, seed=1))
    other = compare(host, container, "lower", bootstrap=Bootstrap(resamples=500, seed=2))
    assert (first.ci_low_pct, first.ci_high_pct) == (again.ci_low_pct, again.ci_high_pct)
    assert (first.ci_low_pct, first.ci_high_pct) != (other.ci_low_pct, other.ci_high_pct)


def test_a_wider_confidence_gives_a_wider_interval() -> None:
    host, container = _noisy(50.0, 10, seed=8, noise=0.05), _noisy(52.0, 10, seed=9, noise=0.05)
    narrow = compare(host, container, "lower", bootstrap=Bootstrap(confidence=0.5, seed=3))
    wide = compare(host, container, "lower", bootstrap=Bootstrap(confidence=0.99, seed=3))
    assert wide.ci_low_pct < narrow.ci_low_pct < narrow.ci_high_pct < wide.ci_high_pct
    assert wide.ci_level == 0.99


def _m(probe: str, metric: str, value: float, cpu_s: float | None = None, **kw) -> Measurement:
    unit = kw.pop("unit", "s")
    better = kw.pop("better", "lower")
    return Measurement(probe, metric, value, unit, better, cpu_s=cpu_s)


def test_measurements_are_grouped_per_metric_with_cpu_time_and_unpaired_ones_named() -> None:
    host = [
        _m("training", "epoch1_s", 2.0, cpu_s=1.0),
        _m("gpu", "gemm", 100.0, unit="GFLOP/s", better="higher"),
        _m("training", "epoch1_s", 2.0, cpu_s=1.2),
        _m("fio", "host_only", 1.0),
    ]
    container = [
        _m("training", "epoch1_s", 2.2, cpu_s=1.1),
        _m("gpu", "gemm", 80.0, unit="GFLOP/s", better="higher"),
        _m("training", "epoch1_s", 2.2, cpu_s=1.3),
        _m("fio", "container_only", 1.0),
    ]
    epoch, gemm = compare_measurements(host, container, FAST)
    assert (epoch.probe, epoch.metric, epoch.unit, epoch.host.n) == ("training", "epoch1_s", "s", 2)
    assert epoch.overhead_pct == pytest.approx(10.0)
    assert epoch.cpu is not None
    assert epoch.cpu.host_median_s == pytest.approx(1.1)
    assert epoch.cpu.ratio == pytest.approx(1.2 / 1.1)
    assert gemm.overhead_pct == pytest.approx(20.0)
    assert gemm.cpu is None
    assert unpaired(host, container) == [
        ("fio", "host_only", "host"),
        ("fio", "container_only", "container"),
    ]


def test_a_metric_whose_unit_differs_between_sides_is_refused() -> None:
    with pytest.raises(StatsError, match=r"host reports s .* container ms"):
        compare_measurements([_m("a", "b", 1.0)], [_m("a", "b", 1.0, unit="ms")])


def test_rows_have_the_csv_columns_and_round_trip_through_csv() -> None:
    host = [_m("training", "epoch1_s", v, cpu_s=1.0) for v in (2.0, 2.1)]
    container = [_m("training", "epoch1_s", v) for v in (2.2, 2.3)]
    rows = to_rows(compare_measurements(host, container, FAST))
    assert list(rows[0]) == list(OVERHEAD_COLUMNS)
    assert rows[0]["container_cpu_s"] == ""  # the container side reported no CPU time
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=OVERHEAD_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    (read,) = csv.DictReader(io.StringIO(buffer.getvalue()))
    assert float(read["overhead_pct"]) == pytest.approx((2.25 - 2.05) / 2.05 * 100)
    assert float(read["ci_low_pct"]) <= float(read["overhead_pct"]) <= float(read["ci_high_pct"])
    assert read["host_n"] == "2"
