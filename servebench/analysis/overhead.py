"""The overhead section: host vs container per metric, from a run's overhead.csv, with the
seed paper's figures beside them (Xu et al., 2017). The HTML report and the terminal
table of `servebench overhead run` both build their rows here, so they never disagree.

Only result files are read: overhead.csv (one row per metric, written by
`servebench.overhead.runner`) and run.json's `overhead` block (which probes could not run
where, and why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from servebench.common.readable import missing
from servebench.results import OVERHEAD_FILE

# What the seed paper found, per kind of measurement, short enough for a table cell
# (`SEED_NOTE` says the rest). Its sign convention is ours: an overhead above 0 means the
# container was worse.
SEED_CPU = "CPU (HPL, HPCG): < 5 %"
SEED_SEQUENTIAL_IO = "sequential I/O: equal"
SEED_RANDOM_IO = "random I/O: differs"
SEED_FIRST_EPOCH = "first epoch: up to 77 % faster"
SEED_NOTE = (
    "Seed paper: Xu et al. (2017), deep learning tools in Docker containers vs the host. "
    "CPU benchmarks (HPL, HPCG) cost the container under 5 %; sequential disk I/O was "
    "equal; random I/O differed between the container's own (overlay) filesystem and a "
    "bind-mounted folder; MXNet's first training epoch was up to 77 % faster in the "
    "container (I/O and caching)."
)

HEADERS = (
    "probe",
    "metric",
    "host median",
    "container median",
    "overhead",
    "interval",
    "CPU time c/h",
    "seed paper",
)
# The columns of words (left-aligned); the rest are figures.
TEXT_COLUMNS = (0, 1, 7)
OVERHEAD_NOTE = (
    "Overhead is positive when the container is worse, whichever way the metric points "
    "(a lower GFLOP/s, a higher latency): (container − host) / host of the medians, sign "
    "turned for higher-is-better metrics. The interval is a percentile bootstrap over the "
    "repetitions of each side. CPU time c/h: the container's median CPU seconds over the "
    "host's for the same step (wall time also counts waiting for a core on a shared "
    "machine; CPU time does not)."
)


def read_overhead(run_dir: Path) -> pd.DataFrame | None:
    """overhead.csv as a frame (None if the run has none); an empty file is an empty frame."""
    path = Path(run_dir) / OVERHEAD_FILE
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path, dtype={"probe": str, "metric": str, "unit": str})
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def seed_figure(probe: str, metric: str) -> str:
    """The seed paper's finding this metric is compared with, or "" where it has none
    (it ran HPL and HPCG, not hpcc's other kernels; no GPU kernels or serving like these)."""
    name = metric.lower()
    if probe == "hpcg" or (probe == "hpcc" and "hpl" in name):
        return SEED_CPU
    if probe in ("ioping", "fio"):
        if "rand" in name:
            return SEED_RANDOM_IO
        if "seq" in name:
            return SEED_SEQUENTIAL_IO
    if probe == "training" and (name.startswith("epoch1") or "first_epoch" in name):
        return SEED_FIRST_EPOCH
    return ""


def value_text(value: Any, unit: str) -> str:
    """A figure with its unit; seconds below one are shown in milliseconds, below a
    millisecond in microseconds (ioping's cached reads take about one)."""
    if missing(value) or value == "":
        return "–"
    value = float(value)
    if unit == "s" and abs(value) < 1e-3:
        return f"{value * 1e6:.4g} µs"
    if unit == "s" and abs(value) < 1:
        return f"{value * 1e3:.4g} ms"
    return f"{value:.4g} {unit}".rstrip()


def _pct(value: Any) -> str:
    return "–" if missing(value) or value == "" else f"{float(value):+.1f} %"


def _interval(row: dict[str, Any]) -> str:
    low, high = row.get("ci_low_pct"), row.get("ci_high_pct")
    if missing(low) or missing(high) or low == "" or high == "":
        return "–"
    return f"[{float(low):+.1f}, {float(high):+.1f}] %"


def overhead_headers(frame: pd.DataFrame) -> list[str]:
    """`HEADERS`, the interval's named with its confidence level (one per run)."""
    levels = frame["ci_level"].dropna() if "ci_level" in frame else pd.Series(dtype=float)
    interval = f"{float(levels.iloc[0]):.0%} interval" if len(levels) else "interval"
    return [interval if h == "interval" else h for h in HEADERS]


def _ratio(value: Any) -> str:
    return "–" if missing(value) or value == "" else f"{float(value):.3f}"


def overhead_rows(frame: pd.DataFrame) -> list[list[str]]:
    """One row of `HEADERS` per metric, in the file's order."""
    rows = []
    for row in frame.to_dict("records"):
        unit = "" if missing(row.get("unit")) else str(row["unit"])
        probe, metric = str(row["probe"]), str(row["metric"])
        rows.append(
            [
                probe,
                metric,
                value_text(row.get("host_median"), unit),
                value_text(row.get("container_median"), unit),
                _pct(row.get("overhead_pct")),
                _interval(row),
                _ratio(row.get("cpu_ratio")),
                seed_figure(probe, metric) or "–",
            ]
        )
    return rows


def overhead_notes(run: dict[str, Any]) -> list[str]:
    """What was not measured and why, from run.json: the container side as a whole, and
    each probe that was unavailable or failed on a side."""
    block = run.get("overhead") or {}
    notes = []
    if block.get("container_not_measured"):
        notes.append(f"Container side not measured: {block['container_not_measured']}")
    for key, word in (("unavailable", "not measured"), ("failed", "failed")):
        for probe, sides in (block.get(key) or {}).items():
            for side, why in sides.items():
                if key == "unavailable" and why == block.get("container_not_measured"):
                    continue  # said once above
                notes.append(f"{probe} on the {side}: {word}: {why}")
    return notes
