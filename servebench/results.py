"""The result directory of one run (DESIGN.md's contract), written as the run goes.

    results/<run-id>/
      scenario.yaml        the scenario as run
      run.json             machine, versions, start/end, status and why
      records/<trial>.parquet   one closed file per trial, so a crash loses at most the
                           trial in flight; merged into records.parquet when the run ends
      records.parquet      every per-request record of the run
      trials.csv           one summary row per trial, rewritten after every trial
      telemetry.parquet    samples from the telemetry samplers
      cold_start.csv       server start and model load timings

Nothing here knows how a trial runs: the scenario runner and the Locust integration both
hand finished rows over, so this contract sits below both and imports nothing of
servebench's own.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

RUN_FILE = "run.json"
TRIALS_FILE = "trials.csv"
RECORDS_FILE = "records.parquet"
RECORDS_DIR = "records"
TELEMETRY_FILE = "telemetry.parquet"
COLD_START_FILE = "cold_start.csv"
SCENARIO_FILE = "scenario.yaml"

_VERSIONED = (
    "servebench",
    "torch",
    "onnxruntime",
    "tensorflow",
    "tritonclient",
    "nvidia-pytriton",
    "numpy",
)


def _versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _machine() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    }


def new_run_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


@dataclass
class RunDirectory:
    path: Path
    run: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    cold_starts: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def create(
        cls, root: Path, run_id: str, scenario_text: str, scenario_path: Path
    ) -> RunDirectory:
        path = Path(root) / run_id
        path.mkdir(parents=True, exist_ok=False)
        (path / RECORDS_DIR).mkdir()
        (path / SCENARIO_FILE).write_text(scenario_text)
        directory = cls(path)
        directory.run = {
            "run_id": run_id,
            "scenario": str(scenario_path),
            "status": "running",
            "reason": None,
            "started_at": datetime.now(UTC).isoformat(),
            "ended_at": None,
            "machine": _machine(),
            "versions": _versions(),
            "source": "servebench scenario runner",
            "trials_planned": 0,
        }
        directory.write_run()
        return directory

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """An existing run, for --resume: earlier rows and status are kept."""
        path = Path(path)
        run_file = path / RUN_FILE
        if not run_file.is_file():
            raise FileNotFoundError(f"{path}: no {RUN_FILE}; not a servebench run directory")
        directory = cls(path, run=json.loads(run_file.read_text()))
        if (path / TRIALS_FILE).is_file():
            directory.rows = pd.read_csv(path / TRIALS_FILE).to_dict("records")
        if (path / COLD_START_FILE).is_file():
            directory.cold_starts = pd.read_csv(path / COLD_START_FILE).to_dict("records")
        (path / RECORDS_DIR).mkdir(exist_ok=True)
        directory.run.setdefault("resumed_at", []).append(datetime.now(UTC).isoformat())
        return directory

    # -- run.json ---------------------------------------------------------------------

    def write_run(self) -> None:
        tmp = self.path / f".{RUN_FILE}.tmp"
        tmp.write_text(json.dumps(self.run, indent=2, default=str) + "\n")
        tmp.replace(self.path / RUN_FILE)  # never a half-written run.json

    def finish(self, status: str, reason: str | None = None) -> None:
        self.run.update(status=status, reason=reason, ended_at=datetime.now(UTC).isoformat())
        self.merge_records()
        self.write_run()

    # -- trials -----------------------------------------------------------------------

    def completed_trials(self) -> set[str]:
        """Trials with a summary row and a closed records file: what --resume skips."""
        return {
            row["trial_id"]
            for row in self.rows
            if row.get("status") == "ok" and self.trial_records_path(row["trial_id"]).is_file()
        }

    def trial_records_path(self, trial_id: str) -> Path:
        return self.path / RECORDS_DIR / f"{trial_id}.parquet"

    def add_trial(self, row: dict[str, Any]) -> None:
        """Record (or replace, on resume) a trial's summary row and rewrite trials.csv."""
        self.rows = [r for r in self.rows if r.get("trial_id") != row["trial_id"]]
        self.rows.append(row)
        self.write_trials()

    def write_trials(self) -> None:
        """Rewrite trials.csv from `rows` (also after columns were added to rows in place)."""
        self._write_csv(self.rows, TRIALS_FILE)

    def add_cold_start(self, row: dict[str, Any]) -> None:
        self.cold_starts.append(row)
        self._write_csv(self.cold_starts, COLD_START_FILE)

    def _write_csv(self, rows: list[dict[str, Any]], name: str) -> None:
        tmp = self.path / f".{name}.tmp"
        pd.DataFrame(rows).to_csv(tmp, index=False)
        tmp.replace(self.path / name)

    # -- records and telemetry ----------------------------------------------------------

    def merge_records(self) -> int:
        """Concatenate every per-trial file into records.parquet; return the row count."""
        parts = sorted((self.path / RECORDS_DIR).glob("*.parquet"))
        tables = []
        for part in parts:
            try:
                tables.append(pq.read_table(part))
            except (pa.ArrowInvalid, OSError):
                continue  # a trial killed mid-write; its summary row says so
        if not tables:
            return 0
        merged = pa.concat_tables(tables, promote_options="default")
        pq.write_table(merged, self.path / RECORDS_FILE)
        return merged.num_rows
