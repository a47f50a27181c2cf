"""Paired comparisons over rounds (issue 35 item 1): a difference is said only where the
rounds carry it, an A/A comparison is called different at most 1 − level of the time, and
fewer rounds than the level needs say so instead of deciding.

Synthetic rounds with a known ratio, lognormal noise of a given CV and a drift shared by
the round (seeded; no real time)."""

from __future__ import annotations

import numpy as np
import pytest

from servebench.common.paired import (
    HIGHER,
    INDISTINGUISHABLE,
    LOWER,
    TOO_FEW,
    compare_paired,
    compare_unpaired,
)


def _rounds(rng, n: int, ratio: float, cv: float, drift: float = 0.5):
    """A's and B's figure in n rounds: a drift shared by both (1 -> 1 + drift), each
    with its own lognormal noise of coefficient of variation ~`cv`."""
    shared = np.linspace(1.0, 1.0 + drift, n) * rng.lognormal(0, 0.2, n)  # the round's own
    return shared * rng.lognormal(0, cv, n), ratio * shared * rng.lognormal(0, cv, n)


@pytest.mark.parametrize("n", [6, 9, 12, 20])
def test_an_a_a_comparison_is_called_different_at_most_five_percent_of_seeds(n: int) -> None:
    rng = np.random.default_rng(n)
    called = sum(compare_paired(*_rounds(rng, n, 1.0, 0.1)).different for _ in range(2000))
    assert called / 2000 <= 0.05


def test_five_rounds_cannot_decide_at_95_percent_and_say_how_many_more_would() -> None:
    a, b = [1.0] * 5, [0.9, 0.91, 0.88, 0.92, 0.9]  # B lower in every round
    result = compare_paired(a, b)
    assert result.verdict == TOO_FEW and result.count == 5
    assert result.rounds_to_separate == 1
    assert result.describe() == "too few to tell at 95% (R=5); about 1 more round would decide"
    # At the level five rounds can reach (1 - 2/32), they decide.
    assert compare_paired(a, b, level=0.93).verdict == LOWER


def test_a_real_difference_beyond_the_noise_is_found_and_sized() -> None:
    rng = np.random.default_rng(7)
    found = [compare_paired(*_rounds(rng, 10, 0.88, 0.03)) for _ in range(200)]
    assert sum(c.verdict == LOWER for c in found) / 200 >= 0.9
    one = found[0]
    assert one.low <= one.ratio <= one.high < 1.0
    assert one.describe().startswith("p99 12 % lower") or "lower" in one.describe()
    higher = compare_paired(*_rounds(np.random.default_rng(8), 10, 1.2, 0.03))
    assert higher.verdict == HIGHER


def test_the_pairing_cancels_drift_that_two_unpaired_sets_cannot() -> None:
    """B 5 % lower under a drift that doubles the figures across ten rounds: pairing
    sees it; the unpaired test on the same values cannot."""
    rng = np.random.default_rng(3)
    a, b = _rounds(rng, 10, 0.95, 0.01, drift=1.0)
    assert compare_paired(a, b).verdict == LOWER
    assert compare_unpaired(a, b).verdict == INDISTINGUISHABLE


def test_unpaired_runs_too_short_to_decide_say_so() -> None:
    assert compare_unpaired([1.0, 1.1], [2.0, 2.1]).verdict == TOO_FEW  # 2/C(4,2) > 5 %
    apart = compare_unpaired([1.0, 1.1, 1.05, 1.02], [2.0, 2.1, 2.2, 2.05])
    assert apart.verdict == HIGHER and not apart.paired
    assert compare_unpaired([], [1.0]).verdict == TOO_FEW


def test_missing_rounds_are_left_out() -> None:
    result = compare_paired(
        [1.0, float("nan"), 1.0, None, 0.0, 1.0], [1.0, 2.0, None, 1.0, 1.0, 1.0]
    )
    assert result.count == 2 and result.verdict == TOO_FEW
