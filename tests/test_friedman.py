"""The test a race drops settings by (`common.friedman`): Friedman's statistic with ties as
scipy computes it, Conover's critical difference from the leader, and the calibrated level
of each look — why 5 % per look would not do."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import friedmanchisquare, rankdata

from servebench.common.friedman import friedman, look, look_level


def test_looking_every_round_at_5_percent_would_drop_far_more_often() -> None:
    """Why each look gets a calibrated level: testing an A/A race of 5 settings at 5 % in
    every one of rounds 5 to 20 rejects in well over 5 % of races; the calibrated level
    keeps the whole sequence near 5 %, and is less strict than Bonferroni's 5 % / 16."""
    rng = np.random.default_rng(7)
    level = look_level(5, 5, 20, 0.05)
    assert 0.05 / 16 < level < 0.05
    plain = calibrated = 0
    races = 600
    for _ in range(races):
        values = rng.lognormal(0.0, 0.05, (20, 5)) * rng.lognormal(0.0, 0.1, (20, 1))
        ps = [look(values[:n], 1.0).p for n in range(5, 21)]
        plain += min(ps) <= 0.05
        calibrated += min(ps) <= level
    assert plain > 0.12 * races, plain
    assert calibrated <= 0.07 * races, calibrated  # about 5 %, give or take the draw


def test_two_settings_over_too_few_rounds_can_never_be_told_apart() -> None:
    # Five rounds of two settings: all five one way happens 2/32 = 6.25 % of the time.
    assert look_level(2, 5, 5, 0.05) == 0.0
    values = np.array([[1.0, 2.0]] * 5)
    assert not look(values, look_level(2, 5, 5, 0.05)).rejected


def test_friedman_agrees_with_scipy_ties_included() -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 4, (9, 5)).astype(float)  # small integers: many ties
    statistic, p = friedman(rankdata(values, axis=1))
    expected = friedmanchisquare(*values.T)
    assert statistic == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue)
    assert friedman(np.ones((4, 3))) == (0.0, 1.0)  # every round one tie: nothing to tell


def test_conover_drops_what_is_clearly_worse_and_keeps_the_close() -> None:
    # Six rounds under a drift: a and b take turns first, c is always third, d last.
    drift = np.array([[1.0], [1.3], [0.8], [1.1], [0.9], [1.2]])
    turns = np.array([[1.0, 1.01], [1.01, 1.0]] * 3)
    values = np.hstack([turns, np.full((6, 1), 1.3), np.full((6, 1), 2.0)]) * drift
    found = look(values, 0.05)
    assert found.rejected and found.rank_sums == (9.0, 9.0, 18.0, 24.0)
    # Conover: t(0.975, 15) × sqrt(2 × (6 × 180 − 1062) / 15) = 2.1314 × 1.5492.
    assert found.critical == pytest.approx(3.302, abs=1e-3)
    assert found.keep == (True, True, False, False)
    kept = look(values, 1e-9)  # a level nothing reaches: Friedman does not reject
    assert not kept.rejected and all(kept.keep)
