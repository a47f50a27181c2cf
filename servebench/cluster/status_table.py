"""The jobs and followers a leader reports, as the tables `servebench cluster status`
prints (and refreshes live): ages in the unit a person reads, a reason cut to its first
60 characters, every name escaped (a scenario's name is the user's text, not markup).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_tables(jobs: list[dict[str, Any]], followers: list[dict[str, Any]], now: float) -> Group:
    """The jobs and followers as one rich table group (what `status` prints)."""
    table = Table(
        "job",
        "scenario",
        "state",
        "follower",
        "try",
        "waited",
        "ran",
        "est.",
        "reason",
        title="jobs",
    )
    for job in jobs:
        end = job.get("finished_at") or now
        started = job.get("started_at")
        waited = (started or end) - job["submitted_at"]
        table.add_row(
            job["id"], escape(job["scenario_name"]), job["state"], escape(job.get("follower") or ""),
            str(job["attempts"]), _age(waited), _age(end - started if started else None),
            _age(job["estimate_s"]), escape((job.get("reason") or "")[:60]),
        )  # fmt: skip
    people = Table("follower", "address", "GPUs", "labels", "running", "queued", title="followers")
    for f in followers:
        labels = ", ".join(f"{k}={v}" for k, v in f["labels"].items())
        people.add_row(
            escape(f["name"]), f["address"], str(f["gpus"]), escape(labels),
            " ".join(f["running"]), str(len(f["queued"])),
        )  # fmt: skip
    return Group(table, people)
