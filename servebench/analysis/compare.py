"""Compare two runs trial by trial, flagging only differences beyond run-to-run noise.

How big a difference must be before it means something is decided per trial and metric:

- latency quantiles (p50, p99): a moving-block bootstrap of the trial's requests in
  order (blocks keep requests that queued together together, which an i.i.d. interval
  would treat as independent evidence). Seeded, so the same files give the same
  verdict, and it widens honestly when a trial has few requests — a p99 from 200
  requests says little;
- throughput: the spread of completions across `WINDOWS` equal time windows of the trial
  (standard error of the mean window rate), which also catches a trial that drifted;
- a floor, `NOISE_FLOOR`, under both: the intervals above only see sampling noise inside
  one run, while two runs of the same trial also differ by systematic drift (clock
  frequency, other tenants, page cache). 10 % is perf_analyzer's default stability
  criterion (it accepts a measurement once max/min of three windows, for both
  throughput and latency, is within 10 %): a difference inside it is one perf_analyzer
  would itself call "the same"; differences worth acting on in serving (InferBench
  reports 1.4x and up) lie far outside it.

Both runs' bands add in log space (independent errors); a ratio is flagged when its log
lies outside the combined band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from servebench.analysis.labels import trial_label
from servebench.analysis.loader import RunData
from servebench.analysis.search import trial_records
from servebench.common.paired import (
    HIGHER,
    INDISTINGUISHABLE,
    TOO_FEW,
    Comparison,
    compare_unpaired,
)
from servebench.common.quantiles import CONFIDENCE, percentiles

NOISE_FLOOR = 0.10
# Two-sided 99.9 % nominal. A bootstrap of a tail quantile is too narrow when only a
# few requests lie beyond it: on simulated run pairs differing only in their seed,
# nominal 99 % flagged 2.1 % of p99 comparisons and 99.9 % flagged 0.8 % (the ~1 % that
# was meant); benchmarks/analysis_report.py measures it. With the nearest-rank estimator
# the rows use, 20 such pairs flag 2 of 1,020 comparisons (0.2 %), and 1.3x and 2x
# service-time regressions are found as often as before (2026-12-01).
Z = 3.29
BANDS = "99.9 % block bootstrap of each trial's latencies, 99 % window spread of its rate"
BOOTSTRAP_RESAMPLES = 300
WINDOWS = 10
T_WINDOWS = 3.25  # Student's t, two-sided 99 %, 9 degrees of freedom (WINDOWS - 1)


@dataclass(frozen=True)
class Metric:
    name: str
    column: str
    higher_is_better: bool
    quantile: float | None  # None: a rate, not a latency quantile


METRICS = (
    Metric("throughput", "throughput_ips", True, None),
    Metric("p50", "latency_p50", False, 0.50),
    Metric("p99", "latency_p99", False, 0.99),
)


def quantile_log_halfwidth(
    latencies: np.ndarray, q: float, *, z: float = Z, resamples: int = BOOTSTRAP_RESAMPLES
) -> float:
    """Half-width, in log units, of quantile q's interval by a moving-block bootstrap.

    `latencies` must be in request order. Requests that queue behind the same busy
    period are not independent, so resampling single requests would understate the
    noise (we saw tail quantiles of a half-loaded server differ by 25 % between seeds
    while an i.i.d. interval claimed ±10 %); resampling blocks of about √n consecutive
    requests keeps those runs together. Infinite when there are too few requests for
    the quantile to sit inside the sample (fewer than ~5 beyond it).
    """
    x = np.asarray(latencies, dtype=float)
    n = x.size
    if n * (1 - q) < 5 or n * q < 5 or (x <= 0).any():
        return math.inf
    block = max(1, math.ceil(math.sqrt(n)))
    blocks = math.ceil(n / block)
    rng = np.random.default_rng(0)  # fixed: the same files always give the same verdict
    starts = rng.integers(0, n, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, :n] % n
    # The row's own estimator (nearest rank), so the band is that of the number shown.
    logs = np.log(percentiles(x[index], [q * 100], axis=1)[0])
    return z * float(logs.std(ddof=1))


def rate_log_halfwidth(completion: np.ndarray, windows: int = WINDOWS) -> float:
    """Half-width, in log units, of the mean completion rate from per-window counts."""
    t = np.asarray(completion, dtype=float)
    if t.size < 2 * windows:
        return math.inf
    edges = np.linspace(t.min(), t.max(), windows + 1)
    counts, _ = np.histogram(t, bins=edges)
    mean = counts.mean()
    if mean <= 0:
        return math.inf
    se = counts.std(ddof=1) / math.sqrt(windows) / mean
    return math.log1p(T_WINDOWS * se)


def trial_noise(records: pd.DataFrame | None) -> dict[str, dict[str, float]]:
    """Per trial id, per metric name: the sampling half-width in log units."""
    if records is None or records.empty:
        return {}
    ok = records[records["ok"]].sort_values(["trial_id", "seq"])
    noise: dict[str, dict[str, float]] = {}
    for trial_id, group in ok.groupby("trial_id", sort=False):
        latencies = group["latency"].to_numpy()
        noise[str(trial_id)] = {
            m.name: (
                rate_log_halfwidth(group["completion_time"].to_numpy())
                if m.quantile is None
                else quantile_log_halfwidth(latencies, m.quantile)
            )
            for m in METRICS
        }
    return noise


def compare_trials(
    trials_a: pd.DataFrame,
    trials_b: pd.DataFrame,
    records_a: pd.DataFrame | None = None,
    records_b: pd.DataFrame | None = None,
    *,
    floor: float = NOISE_FLOOR,
) -> pd.DataFrame:
    """One row per trial id in either run: values, ratio B/A, band, and a verdict each.

    For each metric m the columns are `m_a`, `m_b`, `m_ratio`, `m_band` (the relative
    difference that would still be noise) and `m_flag` ("regression", "improvement" or
    ""). `presence` says "both", "only A" or "only B"; `note` says why nothing could be
    compared (a failed trial).
    """
    noise_a = trial_noise(trial_records(trials_a, records_a))
    noise_b = trial_noise(trial_records(trials_b, records_b))
    a = trials_a.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    b = trials_b.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    ids = list(dict.fromkeys([*a.index, *b.index]))
    floor_log = math.log1p(floor)
    rows = []
    for trial_id in ids:
        in_a, in_b = trial_id in a.index, trial_id in b.index
        source = a.loc[trial_id] if in_a else b.loc[trial_id]
        row: dict[str, object] = {
            "trial_id": trial_id,
            "label": trial_label(source),
            "presence": "both" if in_a and in_b else ("only A" if in_a else "only B"),
            "status_a": a.loc[trial_id, "status"] if in_a else None,
            "status_b": b.loc[trial_id, "status"] if in_b else None,
            "note": "",
        }
        comparable = in_a and in_b and row["status_a"] == "ok" and row["status_b"] == "ok"
        if in_a and in_b and not comparable:
            failed = [n for n, s in (("A", row["status_a"]), ("B", row["status_b"])) if s != "ok"]
            row["note"] = f"trial {', '.join(failed)} not ok"
        for metric in METRICS:
            va = float(a.loc[trial_id, metric.column]) if in_a else math.nan
            vb = float(b.loc[trial_id, metric.column]) if in_b else math.nan
            row[f"{metric.name}_a"], row[f"{metric.name}_b"] = va, vb
            ratio = vb / va if comparable and va > 0 and vb > 0 else math.nan
            half = math.hypot(
                noise_a.get(str(trial_id), {}).get(metric.name, 0.0),
                noise_b.get(str(trial_id), {}).get(metric.name, 0.0),
            )
            band_log = max(floor_log, half)
            row[f"{metric.name}_ratio"] = ratio
            row[f"{metric.name}_band"] = (
                math.expm1(band_log) if math.isfinite(band_log) else math.inf
            )
            flag = ""
            if math.isfinite(ratio) and abs(math.log(ratio)) > band_log:
                better = ratio > 1 if metric.higher_is_better else ratio < 1
                flag = "improvement" if better else "regression"
            row[f"{metric.name}_flag"] = flag
        rows.append(row)
    return pd.DataFrame(rows)


REPLICATE_BANDS = "each setting's replicates in A against B's: an exact Mann-Whitney test at 95 %"


def compare_settings(a: RunData, b: RunData, level: float = CONFIDENCE) -> pd.DataFrame:
    """Two replicated runs, setting by setting: per metric the medians over replicates,
    their ratio B/A and a verdict from the replicates themselves (`common.paired.
    compare_unpaired`: the two runs were measured apart, so their rounds do not pair).
    The columns are `compare_trials`'s, with `m_said` saying the comparison in a few
    words ("too few to tell" where the runs are too short to decide, "within noise", or
    the difference) and `m_band` empty."""
    ids = list(dict.fromkeys([*_setting_ids(a), *_setting_ids(b)]))
    by_a, by_b = _replicates_by_setting(a), _replicates_by_setting(b)
    rows = []
    for trial_id in ids:
        in_a, in_b = trial_id in by_a, trial_id in by_b
        source = (by_a if in_a else by_b)[trial_id].iloc[0].to_dict()
        row: dict[str, object] = {
            "trial_id": trial_id,
            "label": trial_label(source),
            "presence": "both" if in_a and in_b else ("only A" if in_a else "only B"),
            "note": "",
        }
        for metric in METRICS:
            xs = by_a[trial_id][metric.column].tolist() if in_a else []
            ys = by_b[trial_id][metric.column].tolist() if in_b else []
            result = compare_unpaired(xs, ys, level)
            row[f"{metric.name}_a"] = float(np.median(xs)) if xs else math.nan
            row[f"{metric.name}_b"] = float(np.median(ys)) if ys else math.nan
            row[f"{metric.name}_ratio"] = result.ratio if in_a and in_b else math.nan
            row[f"{metric.name}_band"] = math.nan
            flag = ""
            if result.different:
                better = (result.verdict == HIGHER) == metric.higher_is_better
                flag = "improvement" if better else "regression"
            row[f"{metric.name}_flag"] = flag
            row[f"{metric.name}_said"] = _said(result) if in_a and in_b else ""
        if in_a and in_b and not any(row[f"{m.name}_said"] for m in METRICS):
            row["note"] = "no counted replicate in one of the runs"
        rows.append(row)
    return pd.DataFrame(rows)


def _said(result: Comparison) -> str:
    """A comparison in a table cell: criterion's words, or the difference the test found."""
    if result.verdict == TOO_FEW:
        return "too few to tell"
    if result.verdict == INDISTINGUISHABLE:
        return "within noise"
    return f"{result.ratio - 1:+.0%}"


def _setting_ids(run: RunData) -> list[str]:
    return [] if run.settings is None else [str(i) for i in run.settings["trial_id"]]


def _replicates_by_setting(run: RunData) -> dict[str, pd.DataFrame]:
    """Each setting's counted replicates (ok, VALID, not measured again), by trial id."""
    trials = run.trials
    counted = trials[
        (trials["status"] == "ok") & (trials["verdict"] == "VALID") & (trials["remeasured"] != True)  # noqa: E712 - NaN: not measured again
    ]
    return {str(k): rows for k, rows in counted.groupby("replicate_of")}


def scenario_difference(a: RunData, b: RunData) -> str | None:
    """Why two runs are not of one scenario, in a line, or None where they are (or
    nothing tells): their run.json's `scenario_hash` (the validated scenario, what
    `--resume` checks), else the scenario files they kept. Trials of two scenarios
    may still share ids (the same coordinates), so the comparison goes on, said."""
    hashes = [run.run.get("scenario_hash") for run in (a, b)]
    if all(hashes):
        if hashes[0] == hashes[1]:
            return None
        what = f"scenario hash {str(hashes[0])[:12]} vs {str(hashes[1])[:12]}"
    elif a.scenario_text is not None and b.scenario_text is not None:
        if a.scenario_text == b.scenario_text:
            return None
        what = "their scenario.yaml files differ"
    else:
        return None
    return (
        f"{a.run_id} and {b.run_id} ran different scenarios ({what}): only trials with the "
        "same coordinates are compared"
    )
