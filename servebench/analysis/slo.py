"""Whether a measured latency meets an SLO, as the result files let analysis decide it:
the one place `recommend`, the report's box and its chart ask.

A trial row carries its SLO percentile's confidence interval (trials.csv's `_low` and
`_high` columns, `common.quantiles.percentile_bounds`); a latency meets a bound only when
the whole interval is within it, misses it only when the whole interval is over it, and
is undecided otherwise — a side too few requests bound decides nothing, so a short
trial's p99 is never read as a failure. Rows without an interval (SLO-search steps, runs
written before intervals) are decided on their one value, as the runner decided them.

When the SLO asked about is the one the row was run with, its `slo_met` and
`slo_requests_to_decide` say the same on the same requests; for another bound, the count
that would at least bound the percentile comes from `common.quantiles`. (The common
judge of issue 34 is the place this module should ask once it exists.)
"""

from __future__ import annotations

import math
from typing import Any

from servebench.analysis.labels import missing
from servebench.common.quantiles import CONFIDENCE, requests_to_decide
from servebench.results import SLO_MET, SLO_MISSED, SLO_UNDECIDED

__all__ = ["SLO_MET", "SLO_MISSED", "SLO_UNDECIDED", "decide", "requests_needed", "too_few"]


def decide(low: float, high: float, bound_s: float) -> str:
    """met (the interval's high end within `bound_s`), missed (its low end over it) or
    undecided; a side that is NaN (too few requests bound it) decides nothing."""
    if not math.isnan(high) and high <= bound_s:
        return SLO_MET
    if not math.isnan(low) and low > bound_s:
        return SLO_MISSED
    return SLO_UNDECIDED


def requests_needed(
    row: dict[str, Any], percentile: float, bound_s: float, answered: int
) -> int | None:
    """How many answered requests the row's trial would need to decide `percentile` ≤
    `bound_s`: the runner's own count when that is the row's SLO, else the fewest that
    bound the percentile from above at the row's confidence (a floor: more may be needed
    once some requests are over the bound). None where no count is known."""
    same = (
        not missing(row.get("slo_percentile"))
        and not missing(row.get("slo_bound_s"))
        and math.isclose(float(row["slo_percentile"]), percentile)
        and math.isclose(float(row["slo_bound_s"]), bound_s)
    )
    written = row.get("slo_requests_to_decide")
    if same and not missing(written):
        return int(written)
    if answered <= 0:
        return None
    level = row.get("confidence_level")
    level = CONFIDENCE if missing(level) else float(level)
    return requests_to_decide(answered, 0, percentile, level)


def too_few(answered: int, needed: int | None) -> str | None:
    """'too few requests (175 of 368)' where `needed` is more than were answered; None
    where the count does not explain the undecided interval."""
    if needed is None or needed <= answered:
        return None
    return f"too few requests ({answered:,} of {needed:,})"
