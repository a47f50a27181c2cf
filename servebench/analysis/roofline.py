"""Roofline: how close each trial came to what the hardware could do for its model.

Arithmetic intensity is the zoo's FLOPs over the bytes one batch must move — the weights
once per batch plus each sample's activations — so it grows with batch size, which is
why batching helps until the compute ceiling is reached. Achieved FLOP/s is inferences/s
times FLOPs per sample. The ceiling is the host's measured GEMM peak (`host_peak_flops`)
and, where the run measured it, the memory-bandwidth slope (`host_peak_bw`, bytes/s);
run.json's `host_peak` says when and how both were measured (telemetry/host_peak.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Ceiling:
    """The roof: flat compute peak, optionally a bandwidth slope (None: not measured),
    and a sentence on how they were measured (None: the run did not say)."""

    peak_flops: float | None
    peak_bw: float | None
    provenance: str | None = None

    @property
    def ridge(self) -> float | None:
        """Intensity (FLOP/byte) where the bandwidth slope meets the compute peak."""
        if self.peak_flops is None or self.peak_bw is None:
            return None
        return self.peak_flops / self.peak_bw

    def attainable(self, intensity: np.ndarray) -> np.ndarray:
        """Best FLOP/s at each intensity; NaN where no peak was measured."""
        intensity = np.asarray(intensity, dtype=float)
        if self.peak_flops is None:
            return np.full_like(intensity, np.nan)
        if self.peak_bw is None:
            return np.full_like(intensity, self.peak_flops)
        return np.minimum(self.peak_flops, self.peak_bw * intensity)


def arithmetic_intensity(
    flops_per_sample: float, weight_bytes: float, activation_bytes: float, batch_size: float
) -> float:
    """FLOP per byte for one batch: weights read once, activations once per sample."""
    moved = weight_bytes + activation_bytes * batch_size
    return flops_per_sample * batch_size / moved if moved > 0 else float("nan")


def host_ceiling(trials: pd.DataFrame, run: Mapping[str, Any] | None = None) -> Ceiling:
    """The run's ceiling: the `host_peak_*` columns (equal on every row), else run.json's
    keys of the same names (a run whose trials all failed still has its measurement)."""

    def first(column: str) -> float | None:
        values = pd.to_numeric(trials.get(column, pd.Series(dtype=float)), errors="coerce")
        values = values[values > 0].dropna()
        if len(values):
            return float(values.iloc[0])
        value = (run or {}).get(column)
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    return Ceiling(
        first("host_peak_flops"), first("host_peak_bw"), _provenance((run or {}).get("host_peak"))
    )


def _provenance(meta: object) -> str | None:
    """'measured 2026-11-30 with 2 BLAS threads, best of 8 rounds (cached; load 2.3)'."""
    if not isinstance(meta, Mapping) or not meta.get("measured_at"):
        return None
    text = f"measured {str(meta['measured_at'])[:10]}"
    if meta.get("threads"):
        text += f" with {meta['threads']} BLAS threads"
    rounds = meta.get("flops_rounds")
    if isinstance(rounds, list) and rounds:
        text += f", best of {len(rounds)} rounds"
    notes = []
    if meta.get("cached"):
        notes.append("cached for this machine")
    load, threads = meta.get("load_average"), meta.get("threads")
    if isinstance(load, (int, float)):
        busy = isinstance(threads, int) and load >= threads
        notes.append(
            f"load average {load:.1f} on {threads} threads then: the host was busy and the "
            "roofs may read low"
            if busy
            else f"load average {load:.1f} then"
        )
    return text + (f" ({'; '.join(notes)})" if notes else "")


def above_roof(points: pd.DataFrame, tolerance: float = 1.0) -> pd.DataFrame:
    """The points whose achieved FLOP/s exceed the measured roof at their intensity."""
    if points.empty:
        return points
    return points[points["efficiency"] > tolerance]


def uncounted_models(trials: pd.DataFrame) -> list[str]:
    """Models of ok trials whose FLOPs are unknown (a user's file its graph did not allow
    to count, an older run's repository model): the roofline cannot place them."""
    if "flops_per_sample" not in trials or trials.empty:
        return []
    ok = trials[trials["status"] == "ok"]
    return list(dict.fromkeys(ok.loc[ok["flops_per_sample"].isna(), "model"].dropna()))


def roofline_points(trials: pd.DataFrame, ceiling: Ceiling | None = None) -> pd.DataFrame:
    """One point per ok trial that has the zoo's counts and a throughput.

    Columns: trial_id, setting, model, batch_size, link, load_level, intensity
    (FLOP/byte), achieved_flops (FLOP/s), attainable_flops and efficiency
    (achieved / attainable; empty without a measured ceiling).
    """
    needed = [
        "flops_per_sample",
        "weight_bytes",
        "activation_bytes",
        "batch_size",
        "throughput_ips",
    ]
    ok = trials[(trials["status"] == "ok")].dropna(subset=needed)
    ok = ok[(ok["flops_per_sample"] > 0) & (ok["throughput_ips"] > 0)]
    columns = [
        "trial_id",
        "setting",
        "model",
        "batch_size",
        "link",
        "load_level",
        "intensity",
        "achieved_flops",
        "attainable_flops",
        "efficiency",
    ]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    out = ok[["trial_id", "setting", "model", "batch_size", "link", "load_level"]].copy()
    out["intensity"] = [
        arithmetic_intensity(r.flops_per_sample, r.weight_bytes, r.activation_bytes, r.batch_size)
        for r in ok.itertuples()
    ]
    out["achieved_flops"] = ok["throughput_ips"] * ok["flops_per_sample"]
    ceiling = ceiling or host_ceiling(trials)
    out["attainable_flops"] = ceiling.attainable(out["intensity"].to_numpy())
    out["efficiency"] = out["achieved_flops"] / out["attainable_flops"]
    return out[columns].reset_index(drop=True)
