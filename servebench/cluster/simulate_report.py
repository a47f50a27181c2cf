"""A simulated comparison of scheduling policies as `servebench cluster simulate` gives it:
a JSON document for machines (NaN, a figure with nothing to average, as null), or a table
for people, with how the JCT ratio reads.
"""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from servebench.cluster.policy import FIFO_REFERENCE
from servebench.cluster.simulate import SimResult


def comparison_json(
    results: list[SimResult], source: str, jobs: int, followers: int
) -> dict[str, Any]:
    """The comparison as `--json` prints it."""
    return {
        "source": source,
        "jobs": jobs,
        "followers": followers,
        "fifo_reference": FIFO_REFERENCE,
        "policies": [_finite(r.as_dict()) for r in results],
    }


def _finite(data: dict[str, object]) -> dict[str, object]:
    """JSON has no NaN: a figure with nothing to average is null."""
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in data.items()
    }


def comparison_table(results: list[SimResult], source: str, jobs: int, followers: int) -> Table:
    """The comparison as a table, one row per policy."""
    table = Table(
        "policy", "avg JCT s", "p95 JCT s", "queueing s", "makespan s", "utilization",
        "JCT ratio", "pauses", "sim s",
        title=f"{jobs:,} jobs ({source}) on {followers:,} followers",
        caption=f"JCT ratio: {FIFO_REFERENCE}'s average JCT over the policy's (higher is better)",
    )  # fmt: skip
    for r in results:
        table.add_row(
            r.policy, f"{r.avg_jct_s:,.1f}", f"{r.p95_jct_s:,.1f}", f"{r.mean_queueing_s:,.1f}",
            f"{r.makespan_s:,.0f}", f"{r.utilization:.1%}",
            "-" if r.jct_ratio is None else f"{r.jct_ratio:.2f}", f"{r.preemptions:,}",
            f"{r.wall_s:.2f}",
        )  # fmt: skip
    return table
