"""SLO-search trials as their files hold them.

A search trial is one row in trials.csv but several load runs ("steps") on disk: the
runner names each step's records `<trial id>.s<N>` (N counts from 0 in the order the
steps ran) and writes the steps into the row's `search_steps` column as JSON
`[[rate, latency, met, reasons, codes, verdict, low, high], ...]` — the offered rate
(req/s), the SLO-percentile latency in seconds, whether the step met the SLO, why the
step's run was INVALID, those reasons' codes (`servebench.common.verdict_codes`; steps
written before codes existed have four entries, and their codes are read from the text by
`loader.legacy_codes`), and the judge's word with the percentile's interval (steps written
before the judge have none: their interval is their one latency). The row's own figures are those of the chosen step: the highest rate that met the SLO, else
the last step run. Readers that join records to trials by id go through
`trial_records`, so a search trial's latencies are found and mean what its row says.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from servebench.analysis.labels import missing
from servebench.results import legacy_codes

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
    cannot be read as the runner writes it contributes no steps rather than failing the
    report.
    """
    rows = []
    column = trials.get("search_steps", pd.Series([None] * len(trials), index=trials.index))
    for trial_id, text in zip(trials["trial_id"], column, strict=True):
        steps = _parse(text)
        if not steps:
            continue
        met = [i for i, s in enumerate(steps) if s[2]]
        chosen = max(met, key=lambda i: steps[i][0]) if met else len(steps) - 1
        for i, (rate, latency, ok, reasons, codes, low, high) in enumerate(steps):
            rows.append(
                {
                    "trial_id": trial_id,
                    "step": i,
                    "step_id": step_id(trial_id, i),
                    "rate": rate,
                    "latency": latency,
                    "met": ok,
                    "reasons": reasons,
                    "codes": codes,
                    "chosen": i == chosen,
                    "low": low,
                    "high": high,
                }
            )
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def _parse(
    text: object,
) -> list[tuple[float, float, bool, str, tuple[str, ...], float, float]]:
    if missing(text) or not str(text).strip():
        return []
    try:
        raw = json.loads(str(text))
        steps = []
        for s in raw:
            reasons = str(s[3]) if len(s) > 3 and s[3] else ""
            codes = tuple(str(c) for c in s[4]) if len(s) > 4 else legacy_codes(reasons)
            latency = np.nan if s[1] is None else float(s[1])
            if len(s) > 7:  # the judge's interval (NaN: a side nothing bounds)
                low, high = (np.nan if v is None else float(v) for v in s[6:8])
            else:  # written before the judge: decided on its one latency
                low = high = latency
            steps.append((float(s[0]), latency, bool(s[2]), reasons, codes, low, high))
        return steps
    except (ValueError, TypeError, IndexError, KeyError):
        return []


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
