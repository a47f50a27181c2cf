"""The one executor interface: what an executor is given (`LoadRun`) and what it does with
it (`Executor.run`). `load.in_process.InProcess` and `load.gang.DaskGang` implement it;
`load.dispatch` picks one, so that neither needs the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servebench.load.events import Events, LoadControl
from servebench.load.plan import LoadPlan
from servebench.load.records import RecordSink
from servebench.load.summary import LoadSummary


@dataclass(frozen=True)
class LoadRun:
    """One load to run: its plan, where its records go (a Parquet path or a sink, or
    None), the control that stops it, its events' subscribers and its loop (uvloop when
    installed, unless `use_uvloop` says otherwise)."""

    plan: LoadPlan
    records: str | Path | RecordSink | None
    control: LoadControl
    events: Events
    use_uvloop: bool | None = None


class Executor(Protocol):
    """Runs a load: its parts, its rules, its events; returns the merged summary."""

    def run(self, load: LoadRun) -> LoadSummary: ...
