"""Host vs container, metric by metric: median and spread per side, overhead % and its
bootstrap confidence interval, and the CPU time each side spent.

The overhead sign means the same for every metric, whatever its direction: positive = the
container is worse. For a higher-is-better metric (GFLOP/s) that is
(host − container) / host × 100, for a lower-is-better one (latency, seconds)
(container − host) / host × 100, both on the medians, so one slow outlier repetition on a
shared machine moves it little.

The interval is a percentile bootstrap: each side is resampled with replacement on its
own (the repetitions are interleaved, not paired), the overhead of the two resampled
medians is computed each time, and the interval is the middle `confidence` of those
values. It needs no assumption about the figures' distribution, which for timings on a
shared machine is skewed. With one value on a side that side has no spread to resample;
the interval then says less, and `ci_note` says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from servebench.common.quantiles import percentiles
from servebench.overhead.errors import OverheadError
from servebench.overhead.measure import Better, Measurement

#: The columns of overhead.csv, one row per probe/metric (see `to_rows`).
OVERHEAD_COLUMNS: tuple[str, ...] = (
    "probe",
    "metric",
    "unit",
    "better",
    "host_n",
    "host_median",
    "host_q1",
    "host_q3",
    "host_min",
    "host_max",
    "container_n",
    "container_median",
    "container_q1",
    "container_q3",
    "container_min",
    "container_max",
    "overhead_pct",
    "ci_low_pct",
    "ci_high_pct",
    "ci_level",
    "ci_note",
    "host_cpu_s",
    "container_cpu_s",
    "cpu_ratio",
)


class StatsError(OverheadError, ValueError):
    """Figures that cannot be compared (an empty side, a bad setting): one sentence why."""


@dataclass(frozen=True)
class Bootstrap:
    """How the interval is drawn: `resamples` per interval, the central `confidence`
    (0.95 → percentiles 2.5 and 97.5) and the seed, so a report is reproducible."""

    resamples: int = 10_000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise StatsError(f"bootstrap resamples: must be at least 1, got {self.resamples}")
        if not 0 < self.confidence < 1:
            raise StatsError(f"bootstrap confidence: must be in (0, 1), got {self.confidence}")


@dataclass(frozen=True)
class Spread:
    """One side's figures: how many, the median, quartiles and extremes."""

    n: int
    median: float
    q1: float
    q3: float
    minimum: float
    maximum: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @classmethod
    def of(cls, values: np.ndarray) -> Spread:
        q1, median, q3 = percentiles(values, [25, 50, 75])
        return cls(
            n=len(values),
            median=float(median),
            q1=float(q1),
            q3=float(q3),
            minimum=float(values.min()),
            maximum=float(values.max()),
        )


@dataclass(frozen=True)
class CpuTime:
    """The median CPU seconds the measured step took on each side and their ratio
    (container / host): on a shared machine wall time also counts waiting for a core,
    CPU time does not, so the two together tell overhead from contention."""

    host_median_s: float
    container_median_s: float

    @property
    def ratio(self) -> float:
        if self.host_median_s == 0:
            return float("nan")
        return self.container_median_s / self.host_median_s


@dataclass(frozen=True)
class MetricOverhead:
    """One metric compared: both sides' spread, overhead % (positive = container worse)
    and its interval, and the CPU-time comparison where the probe reported CPU time."""

    probe: str
    metric: str
    unit: str
    better: Better
    host: Spread
    container: Spread
    overhead_pct: float
    ci_low_pct: float
    ci_high_pct: float
    ci_level: float
    ci_note: str = ""
    cpu: CpuTime | None = None


def overhead_pct(host: float, container: float, better: Better) -> float:
    """Overhead % of `container` against `host`, positive when the container is worse;
    nan when the host figure is 0 (there is no scale to compare on)."""
    return float(_overhead(np.asarray(host), np.asarray(container), better))


def _overhead(host: np.ndarray, container: np.ndarray, better: Better) -> np.ndarray:
    worse_by = host - container if better == "higher" else container - host
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(host == 0, np.nan, worse_by / host * 100.0)


def compare(
    host: Sequence[float],
    container: Sequence[float],
    better: Better,
    *,
    probe: str = "",
    metric: str = "",
    unit: str = "",
    bootstrap: Bootstrap | None = None,
    cpu: CpuTime | None = None,
) -> MetricOverhead:
    """Compare one metric's host and container figures (from interleaved repetitions)."""
    settings = bootstrap or Bootstrap()
    name = f"{probe}/{metric}" if probe or metric else "metric"
    if better not in ("higher", "lower"):
        raise StatsError(f"{name}: better must be 'higher' or 'lower', got {better!r}")
    sides = {
        "host": np.asarray(host, dtype=np.float64),
        "container": np.asarray(container, dtype=np.float64),
    }
    for side, values in sides.items():
        if values.ndim != 1 or values.size == 0:
            raise StatsError(f"{name}: no {side} figures to compare")
        if not np.all(np.isfinite(values)):
            raise StatsError(f"{name}: the {side} figures include a non-finite value")
    host_values, container_values = sides["host"], sides["container"]
    point = overhead_pct(float(np.median(host_values)), float(np.median(container_values)), better)
    low, high = _interval(host_values, container_values, better, settings)
    return MetricOverhead(
        probe=probe,
        metric=metric,
        unit=unit,
        better=better,
        host=Spread.of(host_values),
        container=Spread.of(container_values),
        overhead_pct=point,
        ci_low_pct=low,
        ci_high_pct=high,
        ci_level=settings.confidence,
        ci_note=_interval_note(host_values, container_values, point, low),
        cpu=cpu,
    )


def _interval(
    host: np.ndarray, container: np.ndarray, better: Better, settings: Bootstrap
) -> tuple[float, float]:
    rng = np.random.default_rng(settings.seed)
    host_medians = _resampled_medians(host, settings.resamples, rng)
    container_medians = _resampled_medians(container, settings.resamples, rng)
    pcts = _overhead(host_medians, container_medians, better)
    if not np.all(np.isfinite(pcts)):
        return float("nan"), float("nan")
    tail = (1 - settings.confidence) / 2 * 100
    low, high = percentiles(pcts, [tail, 100 - tail])
    return float(low), float(high)


def _resampled_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(values[picks], axis=1)


def _interval_note(host: np.ndarray, container: np.ndarray, point: float, low: float) -> str:
    if np.isnan(point):
        return "host median is 0: overhead % undefined"
    if np.isnan(low):
        return "host median is 0 in some resamples: no interval"
    if len(host) == 1 and len(container) == 1:
        return "one figure per side: the interval is the point itself (nothing to resample)"
    for side, values in (("host", host), ("container", container)):
        if len(values) == 1:
            return f"one {side} figure: the interval shows only the other side's spread"
    return ""


def compare_measurements(
    host: Iterable[Measurement],
    container: Iterable[Measurement],
    bootstrap: Bootstrap | None = None,
) -> list[MetricOverhead]:
    """Group each side's measurements by (probe, metric) and compare every metric that
    both sides measured, in the order the host first reported them.

    A metric measured on one side only is left out (see `unpaired`); one whose unit or
    direction differs between the sides is an error, since its figures mean different
    things.
    """
    host_groups = _group(host)
    container_groups = _group(container)
    results = []
    for key, host_group in host_groups.items():
        container_group = container_groups.get(key)
        if container_group is None:
            continue
        first = host_group[0]
        other = container_group[0]
        if (first.unit, first.better) != (other.unit, other.better):
            raise StatsError(
                f"{first.probe}/{first.metric}: host reports {first.unit} ({first.better} is"
                f" better), container {other.unit} ({other.better} is better)"
            )
        results.append(
            compare(
                [m.value for m in host_group],
                [m.value for m in container_group],
                first.better,
                probe=first.probe,
                metric=first.metric,
                unit=first.unit,
                bootstrap=bootstrap,
                cpu=_cpu_time(host_group, container_group),
            )
        )
    return results


def unpaired(
    host: Iterable[Measurement], container: Iterable[Measurement]
) -> list[tuple[str, str, str]]:
    """(probe, metric, side it was measured on) for every metric only one side has, so a
    report can say what could not be compared instead of silently dropping it."""
    host_keys = list(_group(host))
    container_keys = list(_group(container))
    only = [(p, m, "host") for p, m in host_keys if (p, m) not in container_keys]
    only += [(p, m, "container") for p, m in container_keys if (p, m) not in host_keys]
    return only


def _group(measurements: Iterable[Measurement]) -> dict[tuple[str, str], list[Measurement]]:
    groups: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for measurement in measurements:
        groups[(measurement.probe, measurement.metric)].append(measurement)
    return dict(groups)


def _cpu_time(host: list[Measurement], container: list[Measurement]) -> CpuTime | None:
    host_cpu = [m.cpu_s for m in host if m.cpu_s is not None]
    container_cpu = [m.cpu_s for m in container if m.cpu_s is not None]
    if not host_cpu or not container_cpu:
        return None
    return CpuTime(float(np.median(host_cpu)), float(np.median(container_cpu)))


def to_rows(overheads: Iterable[MetricOverhead]) -> list[dict[str, str | float | int]]:
    """overhead.csv's rows (keys `OVERHEAD_COLUMNS`), one per probe/metric; the CPU-time
    cells are empty where the probe reported no CPU time."""
    rows = []
    for item in overheads:
        row: dict[str, str | float | int] = {
            "probe": item.probe,
            "metric": item.metric,
            "unit": item.unit,
            "better": item.better,
        }
        for side, spread in (("host", item.host), ("container", item.container)):
            row[f"{side}_n"] = spread.n
            row[f"{side}_median"] = spread.median
            row[f"{side}_q1"] = spread.q1
            row[f"{side}_q3"] = spread.q3
            row[f"{side}_min"] = spread.minimum
            row[f"{side}_max"] = spread.maximum
        row["overhead_pct"] = item.overhead_pct
        row["ci_low_pct"] = item.ci_low_pct
        row["ci_high_pct"] = item.ci_high_pct
        row["ci_level"] = item.ci_level
        row["ci_note"] = item.ci_note
        cpu = item.cpu
        row["host_cpu_s"] = cpu.host_median_s if cpu else ""
        row["container_cpu_s"] = cpu.container_median_s if cpu else ""
        row["cpu_ratio"] = cpu.ratio if cpu else ""
        rows.append(row)
    return rows
