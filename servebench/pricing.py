"""Cloud cost of a measured serving setup: dollars per million inferences.

cost per million = (1e6 / inferences per second) × ($/hour / 3600): the seconds a
machine needs for a million inferences at that throughput, times what a second of the
machine costs. It is computed at the measured throughput and at the highest measured
throughput that still meets the latency SLO — the throughput one can actually sell.

Prices come from `prices.csv` (shipped; each row says its source, date and how sure it
is) merged with whatever a scenario gives, so users can price their own instances or
negotiated rates. This module reads result numbers only; it knows nothing of servers.
"""

from __future__ import annotations

import csv
import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from servebench.common.errors import ServebenchError
from servebench.common.quantiles import MET
from servebench.common.slo_judge import VERDICTS

PRICES_FILE = Path(__file__).with_name("prices.csv")
SECONDS_PER_HOUR = 3600.0


class PriceError(ServebenchError, ValueError):
    """A price table or override that cannot be used; the message names the entry/field."""


@dataclass(frozen=True)
class InstancePrice:
    """One machine type and what an hour of it costs on demand."""

    instance_type: str
    usd_per_hour: float
    provider: str = "custom"
    gpu: str = ""
    gpu_count: int = 0
    vcpus: int = 0
    memory_gib: float = 0.0
    region: str = ""
    source: str = "user"
    retrieved: str = ""
    confidence: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not self.instance_type:
            raise PriceError("instance_type: must not be empty")
        if not (math.isfinite(self.usd_per_hour) and self.usd_per_hour > 0):
            raise PriceError(
                f"{self.instance_type}: usd_per_hour must be a positive number, "
                f"got {self.usd_per_hour!r}"
            )


_FIELD_TYPES = {f.name: f.type for f in fields(InstancePrice)}
_CONVERT = {"float": float, "int": int, "str": str}


def _typed(instance_type: str, values: Mapping[str, object]) -> dict[str, object]:
    """Field values converted to their types, naming the entry and field on a bad one."""
    typed: dict[str, object] = {}
    for name, value in values.items():
        if name not in _FIELD_TYPES:
            raise PriceError(
                f"{instance_type}: unknown field {name!r}; known: {', '.join(_FIELD_TYPES)}"
            )
        convert = _CONVERT[str(_FIELD_TYPES[name])]
        if value in ("", None) and convert is not str:
            continue  # an empty CSV cell: keep the default
        try:
            typed[name] = convert(value) if value is not None else ""
        except (TypeError, ValueError):
            raise PriceError(
                f"{instance_type}: {name} must be {convert.__name__}, got {value!r}"
            ) from None
    return typed


def load_prices(path: Path | None = None) -> dict[str, InstancePrice]:
    """The price table at `path` (default: the shipped one), by instance type."""
    path = Path(path) if path is not None else PRICES_FILE
    prices: dict[str, InstancePrice] = {}
    with open(path, newline="") as handle:
        for line, record in enumerate(csv.DictReader(handle), start=2):
            name = (record.get("instance_type") or "").strip()
            if not name:
                raise PriceError(f"{path}:{line}: instance_type is empty")
            if name in prices:
                raise PriceError(f"{path}:{line}: {name} is listed twice")
            try:
                prices[name] = InstancePrice(**_typed(name, record))  # type: ignore[arg-type]
            except PriceError as err:
                raise PriceError(f"{path}:{line}: {err}") from None
    return prices


def merge_prices(
    base: Mapping[str, InstancePrice],
    overrides: Mapping[str, float | Mapping[str, object] | InstancePrice],
) -> dict[str, InstancePrice]:
    """`base` with user entries added or replacing shipped ones.

    An override is a bare $/hour (keeps the shipped description, marks the source as the
    user's), a mapping of fields (merged over the shipped entry; a new instance type needs
    at least `usd_per_hour`), or a whole `InstancePrice`.
    """
    merged = dict(base)
    for name, override in overrides.items():
        if isinstance(override, InstancePrice):
            merged[name] = replace(override, instance_type=name)
            continue
        if isinstance(override, int | float) and not isinstance(override, bool):
            override = {"usd_per_hour": override}
        if not isinstance(override, Mapping):
            raise PriceError(
                f"{name}: an override is a price per hour or a mapping of fields, "
                f"got {type(override).__name__}"
            )
        values = _typed(name, {**override, "instance_type": name})
        user = {"source": "user", "retrieved": "", "confidence": "user", "note": ""}
        if name in merged:
            merged[name] = replace(merged[name], **{**user, **values})  # type: ignore[arg-type]
        elif "usd_per_hour" not in values:
            raise PriceError(f"{name}: a new instance type needs usd_per_hour")
        else:
            merged[name] = InstancePrice(**{**user, **values})  # type: ignore[arg-type]
    return merged


def price_of(prices: Mapping[str, InstancePrice], instance_type: str) -> InstancePrice:
    """The entry for `instance_type`, or an error that suggests the nearest names."""
    try:
        return prices[instance_type]
    except KeyError:
        near = difflib.get_close_matches(instance_type, list(prices), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise PriceError(
            f"instance_type: no price for {instance_type!r}{hint} "
            "(add one with merge_prices or the scenario's prices section)"
        ) from None


def scenario_price(
    instance_type: str, overrides: Mapping[str, Mapping[str, object]]
) -> InstancePrice:
    """What a scenario's `cost` section prices its trials at: `instance_type`'s entry in
    the shipped table with the section's `prices` merged over it (each override's fields;
    one given as None is not given, so the shipped entry's value stays). The one builder:
    the scenario runner prices its trials here and `servebench ui` its swarm, so alike."""
    given = {
        name: {field: value for field, value in values.items() if value is not None}
        for name, values in overrides.items()
    }
    return price_of(merge_prices(load_prices(), given), instance_type)


def cost_per_million(inferences_per_s: float, usd_per_hour: float) -> float:
    """Dollars for one million inferences at a sustained throughput on one machine."""
    if not (math.isfinite(inferences_per_s) and inferences_per_s > 0):
        raise ValueError(f"inferences_per_s: must be a positive number, got {inferences_per_s!r}")
    if not (math.isfinite(usd_per_hour) and usd_per_hour > 0):
        raise ValueError(f"usd_per_hour: must be a positive number, got {usd_per_hour!r}")
    return (1e6 / inferences_per_s) * (usd_per_hour / SECONDS_PER_HOUR)


def replicas_needed(qps: float, usable_rate: float) -> int:
    """ceil(qps / usable_rate), with a rate exactly at a multiple of the usable rate
    counted as fitting (floating-point division must not add a replica)."""
    ratio = qps / usable_rate
    return max(1, math.ceil(ratio - 1e-9 * ratio))


def cost_at_qps(qps: float, max_rate: float, usd_per_hour: float, batch_size: int = 1) -> float:
    """Dollars per million inferences of serving `qps` requests/s of `batch_size` with
    replicas that each sustain `max_rate` requests/s: ceil(qps / max_rate) replicas'
    price over the inferences they serve (`recommend`'s pricing without headroom, and the
    configuration search's `cost_at_qps` objective)."""
    replicas = replicas_needed(qps, max_rate)
    return cost_per_million(qps * batch_size, replicas * usd_per_hour)


@dataclass(frozen=True)
class OperatingPoint:
    """One measured load level: throughput (inferences/s) and whether it met the SLO, as
    the one judge decided it (`common.slo_judge`: met / missed / undecided on the
    interval of the SLO's own percentile; None where no SLO was judged)."""

    throughput: float
    slo_met: str | None = None


def _points(points: Iterable[OperatingPoint | tuple[float, str | None]]) -> list[OperatingPoint]:
    parsed = []
    for i, point in enumerate(points):
        p = point if isinstance(point, OperatingPoint) else OperatingPoint(*point)
        if not (math.isfinite(p.throughput) and p.throughput >= 0):
            raise ValueError(f"points[{i}].throughput: must be >= 0, got {p.throughput!r}")
        if p.slo_met not in (*VERDICTS, None):
            raise ValueError(
                f"points[{i}].slo_met: must be one of {', '.join(VERDICTS)}, got {p.slo_met!r}"
            )
        parsed.append(p)
    return parsed


def best_under_slo(
    points: Iterable[OperatingPoint | tuple[float, str | None]],
) -> OperatingPoint | None:
    """The highest-throughput point the judge said met the SLO, or None if none did (an
    undecided point is not one shown to meet it)."""
    meeting = [p for p in _points(points) if p.slo_met == MET and p.throughput > 0]
    return max(meeting, key=lambda p: p.throughput, default=None)


@dataclass(frozen=True)
class CostEstimate:
    """Cost per million inferences for one setup on one instance type."""

    instance_type: str
    usd_per_hour: float
    measured_throughput: float
    cost_at_measured: float
    slo_s: float | None = None
    slo_throughput: float | None = None  # None: no point met the SLO
    cost_at_slo: float | None = None


def estimate_cost(
    points: Iterable[OperatingPoint | tuple[float, str | None]],
    price: InstancePrice,
    slo_s: float | None = None,
) -> CostEstimate:
    """Cost at the highest measured throughput and, with an SLO (`slo_s`, its bound), at
    the highest one the judge said met it."""
    parsed = _points(points)
    top = max((p.throughput for p in parsed), default=0.0)
    if top <= 0:
        raise ValueError("points: need at least one point with throughput > 0")
    if slo_s is not None and not slo_s > 0:
        raise ValueError(f"slo_s: must be > 0, got {slo_s!r}")
    best = best_under_slo(parsed) if slo_s is not None else None
    return CostEstimate(
        instance_type=price.instance_type,
        usd_per_hour=price.usd_per_hour,
        measured_throughput=top,
        cost_at_measured=cost_per_million(top, price.usd_per_hour),
        slo_s=slo_s,
        slo_throughput=best.throughput if best else None,
        cost_at_slo=cost_per_million(best.throughput, price.usd_per_hour) if best else None,
    )
