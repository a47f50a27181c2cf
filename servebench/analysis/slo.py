"""Whether a measured latency meets an SLO, as the result files let analysis ask it: the
one place `recommend`, the report's box and its chart ask the judge
(`common.slo_judge`).

A trial row carries its SLO percentile's confidence interval (trials.csv's `_low` and
`_high` columns, `common.quantiles.percentile_bounds`); a latency meets a bound only when
the whole interval is within it, misses it only when the whole interval is over it, and
is undecided otherwise — a side too few requests bound decides nothing, so a short
trial's p99 is never read as a failure. Rows without an interval (runs written before
intervals) are an interval of their one value.

The SLO a run was held to is read from its rows here too (`run_slo`, `trial_slos`): the
report's box and `recommend` without `--slo-p99-ms` ask the same reader.

When the SLO asked about is the one the row was run with, its `slo_met` and
`slo_requests_to_decide` say the same on the same requests; for another bound, the count
that would at least bound the percentile comes from `common.quantiles`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servebench.common.quantiles import CONFIDENCE, requests_to_decide
from servebench.common.readable import missing
from servebench.common.slo_judge import judge_slo
from servebench.results import SLO_MET, SLO_MISSED, SLO_UNDECIDED

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SLO_MET",
    "SLO_MISSED",
    "SLO_UNDECIDED",
    "RunSlo",
    "decide",
    "holds",
    "requests_needed",
    "run_slo",
    "too_few",
    "trial_slos",
]


@dataclass(frozen=True)
class RunSlo:
    """An SLO as trial rows carry it: the latency percentile and its bound (s)."""

    percentile: float
    bound_s: float

    @property
    def words(self) -> str:
        return f"p{self.percentile:g} ≤ {self.bound_s * 1e3:,.4g} ms"


def trial_slos(trials: pd.DataFrame) -> list[RunSlo]:
    """The SLOs the rows were run with, each once, in the rows' order (bounds to the ns:
    a bound read back from a CSV is the same SLO); none where the scenario named none."""
    rows = trials.dropna(subset=["slo_percentile", "slo_bound_s"])
    pairs = zip(rows["slo_percentile"], rows["slo_bound_s"], strict=True)
    return list(dict.fromkeys(RunSlo(float(q), round(float(b), 9)) for q, b in pairs))


def run_slo(trials: pd.DataFrame) -> RunSlo | None:
    """The SLO the scenario named, as its trial rows carry it (None: it named none)."""
    return next(iter(trial_slos(trials)), None)


def decide(low: float, high: float, bound_s: float, percentile: float) -> str:
    """met (the interval's high end within `bound_s`), missed (its low end over it) or
    undecided, as the judge says; a side that is NaN (too few requests bound it) decides
    nothing."""
    return judge_slo(low, high, percentile=percentile, bound_s=bound_s).verdict


def holds(end_s: float, bound_s: float, percentile: float, *, optimistic: bool = False) -> bool:
    """Whether one end of a latency interval keeps the SLO: the high end (the safe side)
    met, or — `optimistic` — the low end not missed. For a load between measured ones,
    where `recommend` interpolates each end between the points around it."""
    if optimistic:
        return decide(end_s, math.nan, bound_s, percentile) != SLO_MISSED
    return decide(math.nan, end_s, bound_s, percentile) == SLO_MET


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
