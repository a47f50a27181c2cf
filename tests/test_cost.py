"""Cost per million inferences: the formula on worked examples, the SLO point, the price table."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servebench.pricing import (
    InstancePrice,
    OperatingPoint,
    PriceError,
    best_under_slo,
    cost_per_million,
    estimate_cost,
    load_prices,
    merge_prices,
    price_of,
)

REQUIRED = {
    "g4dn.xlarge": ("T4", 1),
    "g5.xlarge": ("A10G", 1),
    "p3.2xlarge": ("V100", 1),
    "p4d.24xlarge": ("A100", 8),
}


def test_worked_examples() -> None:
    # g4dn.xlarge at $0.526/h serving 1000 inferences/s: a million takes 1000 s, and a
    # second costs 0.526/3600 $, so 1000 * 0.526 / 3600 = $0.146111...
    assert cost_per_million(1000, 0.526) == pytest.approx(0.1461111, rel=1e-6)
    # p3.2xlarge at $3.06/h and 250/s: 4000 s * 0.00085 $/s = $3.40.
    assert cost_per_million(250, 3.06) == pytest.approx(3.40, rel=1e-9)
    # Doubling throughput halves the cost; doubling the price doubles it.
    assert cost_per_million(500, 1.0) == pytest.approx(2 * cost_per_million(1000, 1.0))
    assert cost_per_million(500, 2.0) == pytest.approx(2 * cost_per_million(500, 1.0))


@pytest.mark.parametrize(
    ("throughput", "price", "field"),
    [(0, 1.0, "inferences_per_s"), (-5, 1.0, "inferences_per_s"),
     (math.nan, 1.0, "inferences_per_s"), (10, 0, "usd_per_hour")],
)  # fmt: skip
def test_cost_rejects_bad_numbers(throughput: float, price: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        cost_per_million(throughput, price)


def test_cost_at_measured_and_at_slo() -> None:
    """The SLO point is the highest throughput the judge said met: an undecided point (its
    interval straddles the bound) is not one, whatever its throughput."""
    points = [(100.0, "met"), (400.0, "met"), (800.0, "missed"), (600.0, "undecided")]
    assert best_under_slo(points) == OperatingPoint(400.0, "met")
    assert best_under_slo([(100.0, "missed"), (900.0, "undecided")]) is None
    g5 = InstancePrice("g5.xlarge", 1.006)
    estimate = estimate_cost(points, g5, slo_s=0.04)
    # measured: 800/s -> 1250 s * 1.006/3600 = 0.349306; SLO: 400/s -> 2500 s -> 0.698611
    assert estimate.measured_throughput == 800.0
    assert estimate.cost_at_measured == pytest.approx(0.3493056, rel=1e-6)
    assert estimate.slo_throughput == 400.0
    assert estimate.cost_at_slo == pytest.approx(0.6986111, rel=1e-6)
    unmet = estimate_cost([(p[0], "missed") for p in points], g5, slo_s=0.04)
    assert unmet.slo_throughput is None and unmet.cost_at_slo is None
    assert estimate_cost(points, g5).cost_at_slo is None
    with pytest.raises(ValueError, match="throughput > 0"):
        estimate_cost([(0.0, "met")], g5)
    with pytest.raises(ValueError, match=r"points\[1\].slo_met: must be one of met"):
        best_under_slo([(1.0, "met"), (2.0, "True")])


def test_shipped_table_covers_the_reference_instances() -> None:
    prices = load_prices()
    for name, (gpu, count) in REQUIRED.items():
        entry = prices[name]
        assert gpu in entry.gpu and entry.gpu_count == count
        assert entry.region == "us-east-1" and entry.provider == "aws"
        assert entry.source and entry.retrieved and entry.confidence
        assert 0.1 < entry.usd_per_hour < 100
    cpu_only = [p for p in prices.values() if p.gpu_count == 0]
    assert cpu_only and all(p.vcpus > 0 for p in cpu_only)
    # The ordering any reader would check: a T4 box is cheaper than an A10G, than a V100.
    assert (
        prices["g4dn.xlarge"].usd_per_hour
        < prices["g5.xlarge"].usd_per_hour
        < prices["p3.2xlarge"].usd_per_hour
        < prices["p4d.24xlarge"].usd_per_hour
    )


def test_user_overrides_and_additions() -> None:
    base = load_prices()
    merged = merge_prices(
        base,
        {
            "g4dn.xlarge": 0.40,  # a negotiated rate for a shipped type
            "onprem-a100": {"usd_per_hour": 2.5, "gpu": "NVIDIA A100", "gpu_count": "1"},
            "g5.xlarge": InstancePrice("ignored-name", 0.9, note="spot"),
        },
    )
    assert merged["g4dn.xlarge"].usd_per_hour == 0.40
    assert merged["g4dn.xlarge"].gpu == base["g4dn.xlarge"].gpu  # description kept
    assert merged["g4dn.xlarge"].source == "user"
    assert merged["onprem-a100"].gpu_count == 1 and merged["onprem-a100"].source == "user"
    assert merged["g5.xlarge"].instance_type == "g5.xlarge"
    assert base["g4dn.xlarge"].usd_per_hour != 0.40  # the shipped table is not changed
    with pytest.raises(PriceError, match="new-box: a new instance type needs usd_per_hour"):
        merge_prices(base, {"new-box": {"gpu": "x"}})
    with pytest.raises(PriceError, match=r"g5\.xlarge: usd_per_hour must be float"):
        merge_prices(base, {"g5.xlarge": {"usd_per_hour": "cheap"}})
    with pytest.raises(PriceError, match="unknown field 'colour'"):
        merge_prices(base, {"g5.xlarge": {"colour": "red"}})
    with pytest.raises(PriceError, match="usd_per_hour must be a positive number"):
        merge_prices(base, {"g5.xlarge": -1})


def test_unknown_instance_suggests_near_names() -> None:
    with pytest.raises(PriceError, match=r"did you mean g4dn\.xlarge"):
        price_of(load_prices(), "g4dn.xlarg")


def test_bad_table_rows_are_named(tmp_path: Path) -> None:
    table = tmp_path / "prices.csv"
    table.write_text("instance_type,usd_per_hour\nbox,1.0\nbox2,abc\n")
    with pytest.raises(PriceError, match=r"prices.csv:3: box2: usd_per_hour must be float"):
        load_prices(table)
    table.write_text("instance_type,usd_per_hour\nbox,1.0\nbox,2.0\n")
    with pytest.raises(PriceError, match="box is listed twice"):
        load_prices(table)
