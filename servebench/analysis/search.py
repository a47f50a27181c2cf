"""SLO-search trials as their files hold them.

A search trial is one row in trials.csv but several load runs ("steps") on disk: the
runner names each step's records `<trial id>.s<N>` (N counts from 0 in the order the
steps ran) and writes the steps into the row's `search_steps` column, one
`results.SearchStepRecord` each: the offered rate (req/s), the SLO-percentile latency in
seconds, whether the step met the SLO, why the step's run was INVALID and those reasons'
codes (`servebench.common.verdict_codes`), and the judge's word with the percentile's
interval (an older run's steps are brought to this shape as the run is read,
`results.upgrade`). The row's own figures are those of the chosen step: the highest rate
that met the SLO, else the last step run. Readers that join records to trials by id go
through `trial_records`, so a search trial's latencies are found and mean what its row
says.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servebench.common.readable import missing
from servebench.results import SearchStepRecord, read_search_steps

STEP_COLUMNS = (
    "trial_id", "step", "step_id", "rate", "latency", "met", "reasons", "codes", "chosen",
    "low", "high",
)  # fmt: skip


def step_id(trial_id: str, step: int) -> str:
    """The records' trial id of one step (the runner's naming, scenario/trial.py)."""
    return f"{trial_id}.s{step}"


def search_steps(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per step of every search trial, in the order the steps ran.

    `chosen` marks the step whose summary is the trial's row. A row whose `search_steps`
    cannot be read as the runner writes it (a hand-edited cell) contributes no steps
    rather than failing the report.
    """
    rows = []
    for trial_id, text in zip(trials["trial_id"], trials["search_steps"], strict=True):
        steps = _steps(text)
        if not steps:
            continue
        met = [i for i, s in enumerate(steps) if s.met]
        chosen = max(met, key=lambda i: steps[i].rate) if met else len(steps) - 1
        for i, step in enumerate(steps):
            rows.append(
                {
                    "trial_id": trial_id,
                    "step": i,
                    "step_id": step_id(trial_id, i),
                    "rate": step.rate,
                    "latency": _nan(step.latency_s),
                    "met": step.met,
                    "reasons": step.reasons,
                    "codes": step.codes,
                    "chosen": i == chosen,
                    "low": _nan(step.low_s),
                    "high": _nan(step.high_s),
                }
            )
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def _steps(text: object) -> list[SearchStepRecord]:
    try:
        return read_search_steps(None if missing(text) else text)
    except (ValueError, TypeError, KeyError):
        return []


def _nan(seconds: float | None) -> float:
    return np.nan if seconds is None else seconds


def trial_records(trials: pd.DataFrame, records: pd.DataFrame | None) -> pd.DataFrame | None:
    """Records keyed by the trial ids of `trials`: a search trial's chosen step's records
    under the trial's own id, its other steps' records left out (they belong to other
    rates; the steps figure shows them), every other record as it is."""
    if records is None:
        return None
    steps = search_steps(trials)
    if steps.empty:
        return records
    picked = steps[steps["chosen"]]
    chosen = dict(zip(picked["step_id"], picked["trial_id"], strict=True))
    other = set(steps.loc[~steps["chosen"], "step_id"])
    keep = records[~records["trial_id"].isin(other)].copy()
    keep["trial_id"] = keep["trial_id"].map(lambda t: chosen.get(t, t)).astype(object)
    return keep
