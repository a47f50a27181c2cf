"""How sure each look of an early stop must be, so that all the looks of a load together
are wrong no more often than 1 − confidence.

A load that asks "is the p99 within the bound?" once a second and stops at the first
answer gets a wrong answer far more often than one look would: each look at 95 % is
wrong 5 % of the time at worst, and sixty looks add up (at a p99 right at the bound,
about a third of loads decided wrongly, tests/test_error_spending.py). MLPerf LoadGen avoids
it by deciding once, at the end. Early stop here spends the error instead:

- **The rule.** Lan & DeMets' alpha spending (Lan & DeMets 1983, "Discrete sequential
  boundaries for clinical trials", Biometrika 70(3)): by a fraction τ of the planned load
  the looks together may be wrong at most α(τ) of the time, and α(1) = α, the whole
  budget. Before the end, α(τ) is half of O'Brien & Fleming's shape,
  ½ · 2(1 − Φ(z₁₋α/₂ / √τ)): early looks get almost nothing (by τ = 0.25, 0.00004 of a
  0.05 budget), so only a load far from its bound stops early. The final look, at the end
  of the load, uses what the earlier looks left — at least half the budget, and with the
  looks' correlation its own level stays close to the one asked (95.4 % at 95 % after 59
  looks, where the full O'Brien–Fleming shape would leave it 97.3 %): the trial's row,
  which is that final look, stays as sharp as without early stop.
- **Each look's boundary.** The share of requests at or under the bound is a running
  binomial count; standardized, it is close to Brownian motion in the number of requests
  (the information), so the looks' statistics are correlated, Corr(Z_j, Z_k) =
  √(n_j / n_k). Look k's boundary c_k is the one at which the chance of crossing it for
  the first time at look k is α(τ_k) − α(τ_{k−1}), found by recursive numerical
  integration over the looks (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000,
  "Group Sequential Methods with Applications to Clinical Trials", ch. 19). The looks'
  times need not be planned: each look gives its own τ and information.
- **The decision.** The boundary is turned into a two-sided level, 1 − 2(1 − Φ(c_k)), and
  the look decides with the binomial order statistics at that level
  (`common.slo_judge.judge_counts`), so each look keeps the exact, distribution-free
  interval the trial's row shows; the normal law only shares the budget between looks.

Written here rather than taken from a library: no maintained Python package computes
Lan–DeMets boundaries (gsDesign and ldbounds are R); scipy gives the normal law and the
root finder.
"""

from __future__ import annotations

import math

import numpy as np

# A look whose information (requests) grew by less than this share since the last look
# that spent is skipped: it adds almost nothing, and the integration's kernel would be
# narrower than its grid. Its share of the budget is not lost; the next look spends it.
MIN_GROWTH = 0.01
# The share of the budget the looks before the end may spend in all; the rest is the
# final look's.
EARLY_SHARE = 0.5
# A look that may spend less than this is skipped, its share kept for later looks: it could
# only decide a load so far from its bound that the next looks decide it too, and a level
# closer to 1 than this is not a float that keeps its tail.
MIN_SPEND = 1e-10
# Grid step (in standard deviations) of the integration, and the widest the continuation
# region is tracked (beyond 8.5 the normal density is below 1e-15).
STEP = 0.02
REACH = 8.5


class ErrorSpending:
    """The looks of one load: each `level(fraction, information)` call is one look, in
    order; `final_level` is the last, at the end of the load.

    `confidence` is the two-sided level of the whole sequence: the chance that any look
    decides wrongly (met when the percentile is over the bound, or missed when it is
    within) is at most 1 − confidence.
    """

    def __init__(self, confidence: float):
        import scipy.optimize  # every look needs them: loaded once, up front
        import scipy.special  # noqa: F401

        if not 0 < confidence < 1:
            raise ValueError(f"confidence level: must be in (0, 1), got {confidence}")
        self.alpha = 1.0 - confidence
        self._z = float(_isf(self.alpha / 2))
        self.spent = 0.0  # α(τ) of the last look that spent
        self._information = 0.0
        # The sub-density of the standardized statistic at the last look, over the grid
        # of values that did not cross: the chance of having reached it undecided.
        self._grid: np.ndarray | None = None
        self._density: np.ndarray | None = None

    def budget_at(self, fraction: float) -> float:
        """α(τ): how much of the error budget the looks up to `fraction` of the load may
        spend in all (half of O'Brien–Fleming's shape before the end, all of it at it)."""
        if fraction <= 0:
            return 0.0
        if fraction >= 1:
            return self.alpha
        return float(EARLY_SHARE * 2 * _sf(self._z / math.sqrt(fraction)))

    def level(self, fraction: float, information: float) -> float | None:
        """The two-sided level look at `fraction` of the planned load (τ in (0, 1)), with
        `information` requests answered, decides at; None where the look is skipped (too
        little new since the last one, almost no budget to spend yet, or the planned end
        reached: the end is the final look's)."""
        if fraction >= 1:
            return None
        if information < self._information * (1 + MIN_GROWTH) or information <= 0:
            return None
        target = self.budget_at(fraction) - self.spent
        if target < MIN_SPEND:
            return None
        boundary = self._boundary(target, information)
        self._advance(boundary, information)
        self.spent += target
        return self._level_of(boundary)

    def final_level(self, information: float) -> float:
        """The level of the last look, at the end of the load: what the earlier looks left
        of the budget (all of it, if there were none)."""
        target = self.alpha - self.spent
        if self._grid is None or information <= self._information:
            # No earlier look, or nothing new since it: the rest of the budget on its own.
            return 1.0 - target
        boundary = self._boundary(target, information, fine=True)
        self.spent = self.alpha
        return self._level_of(boundary)

    # -- the integration -----------------------------------------------------------------

    @staticmethod
    def _level_of(boundary: float) -> float:
        return float(1.0 - 2.0 * _sf(boundary))

    def _step(self, information: float) -> tuple[float, float]:
        """r and s of Z_k = r·Z_{k−1} + s·ε: how the last look's statistic carries over."""
        r = math.sqrt(self._information / information)
        return r, math.sqrt(max(1.0 - r * r, 0.0))

    def _crossing(self, boundary: float, information: float, fine: bool = False) -> float:
        """The chance of reaching this look undecided and crossing `boundary` at it."""
        if self._grid is None:
            return float(2.0 * _sf(boundary))
        r, s = self._step(information)
        grid, density = self._grid, self._density
        if fine and s < 5 * STEP:
            # The last look's kernel is narrower than the grid: integrate on a finer one.
            grid = np.linspace(grid[0], grid[-1], _odd(int((grid[-1] - grid[0]) / (s / 5))))
            density = np.interp(grid, self._grid, self._density)
        tails = _sf((boundary - r * grid) / s) + _sf((boundary + r * grid) / s)
        return float(np.dot(_simpson(grid), density * tails))

    def _boundary(self, target: float, information: float, fine: bool = False) -> float:
        """The c whose crossing chance is `target` (found on a log scale: early looks'
        targets are as small as 1e-30)."""
        from scipy.optimize import brentq

        if self._grid is None:
            return float(_isf(target / 2))
        log_target = math.log(target)

        def gap(c: float) -> float:
            return math.log(max(self._crossing(c, information, fine), 1e-300)) - log_target

        low, high = 0.0, 40.0
        if gap(low) <= 0:
            return low  # the whole remaining chance is less than the target: decide freely
        return float(brentq(gap, low, high, xtol=1e-10))

    def _advance(self, boundary: float, information: float) -> None:
        """Carry the density of not having crossed over to this look's grid."""
        reach = min(boundary, REACH)
        grid = np.linspace(-reach, reach, _odd(int(2 * reach / STEP) + 1))
        if self._grid is None:
            density = _pdf(grid)
        else:
            r, s = self._step(information)
            kernel = _pdf((grid[:, None] - r * self._grid[None, :]) / s) / s
            density = kernel @ (_simpson(self._grid) * self._density)
        self._grid, self._density, self._information = grid, density, information


# The standard normal law through scipy.special's ufuncs: scipy.stats' `norm` checks its
# arguments on every call, several times slower on the small arrays each look integrates.
def _sf(x: float | np.ndarray) -> float | np.ndarray:
    """P(Z > x)."""
    from scipy.special import ndtr

    return ndtr(-np.asarray(x)) if isinstance(x, np.ndarray) else float(ndtr(-x))


def _isf(p: float) -> float:
    """The x with P(Z > x) = p."""
    from scipy.special import ndtri

    return float(-ndtri(p))


def _pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _odd(count: int) -> int:
    """Simpson's rule needs an odd number of points (at least 3)."""
    count = max(count, 3)
    return count if count % 2 else count + 1


def _simpson(grid: np.ndarray) -> np.ndarray:
    """Simpson's weights on an even grid of odd length."""
    weights = np.ones(grid.size)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return weights * (grid[1] - grid[0]) / 3.0
