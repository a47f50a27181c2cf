"""The result directory of one run (DESIGN.md's contract), written as the run goes.

    results/<run-id>/
      scenario.yaml        the scenario as run
      run.json             machine, versions, start/end, status and why, warnings
      records/<trial>.parquet   one file per trial, streamed while the trial runs
      telemetry/<trial>.parquet one closed file per trial, written when the trial ends
      records.parquet      every per-request record of the run   } merged from the per-trial
      telemetry.parquet    samples from the telemetry samplers   } files when the run ends
      trials.csv           one summary row per trial, rewritten after every trial
      cold_start.csv       server start and model load timings

Every file is either complete or recoverable after a kill at any instant: whole files are
written to a hidden temp file and renamed over the old one, and the only file written in
place (the records of the trial in flight) belongs to a trial with no summary row yet, so
`recover` removes what a kill tore and --resume runs that trial again. A full disk fails
the write with the path it could not write (`OSError.filename`) and leaves no temp file.

Nothing here knows how a trial runs: the scenario runner and the Locust integration both
hand finished rows over, so this contract sits below both and imports nothing of
servebench's own.
"""

from __future__ import annotations

import errno
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RUN_FILE = "run.json"
TRIALS_FILE = "trials.csv"
RECORDS_FILE = "records.parquet"
RECORDS_DIR = "records"
TELEMETRY_FILE = "telemetry.parquet"
TELEMETRY_DIR = "telemetry"
COLD_START_FILE = "cold_start.csv"
SCENARIO_FILE = "scenario.yaml"
TEMP_SUFFIX = ".tmp"
# The merged files and the per-trial files they are made of.
MERGED = ((RECORDS_DIR, RECORDS_FILE), (TELEMETRY_DIR, TELEMETRY_FILE))

_VERSIONED = (
    "servebench",
    "torch",
    "onnxruntime",
    "tensorflow",
    "tritonclient",
    "nvidia-pytriton",
    "numpy",
)


class ResultDirError(Exception):
    """A results folder or run directory that cannot be used, said in one line for a person
    (a bad --output or --resume: the command exits 2)."""


def no_space(err: BaseException) -> OSError | None:
    """The "no space left on device" error behind `err`, if any.

    Writers wrap it (the load engine raises "writing records failed" from it), so the
    chain of causes is searched."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        stack += [current.__cause__, current.__context__]
    return None


def no_space_reason(path: str | Path) -> str:
    """The run's reason when the disk filled up (what run.json and the last line say)."""
    return f"no space left on device ({path})"


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then rename tmp over `path`: a kill leaves the old file or the new one.

    On failure the temp file is removed; a full disk is raised as ENOSPC naming `path`
    (pyarrow's own error names no file)."""
    tmp = path.parent / f".{path.name}{TEMP_SUFFIX}"
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if no_space(err) is not None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from err
        raise


def _readable(path: Path) -> bool:
    """Whether a Parquet file has its footer (a kill mid-write leaves none)."""
    try:
        pq.read_metadata(path)
    except (pa.ArrowInvalid, OSError):
        return False
    return True


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
        cls,
        root: Path,
        run_id: str,
        scenario_text: str,
        scenario_path: Path,
        *,
        unique: bool = False,
    ) -> RunDirectory:
        """A new run directory under `root`.

        `unique`: `run_id` is a generated one (to the second), so a run started in the same
        second gets `<run_id>-2`, `-3`, …; without it an existing directory is an error
        (callers that told another process the id need exactly that one)."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise ResultDirError(f"{root}: not a directory (the results folder holds runs)")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ResultDirError(f"{root}: cannot make the results folder ({err})") from None
        path, suffix = root / run_id, 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                if not unique:
                    raise
                suffix += 1
                path = root / f"{run_id}-{suffix}"
            except OSError as err:
                raise ResultDirError(f"{path}: cannot make the run directory ({err})") from None
        directory = cls(path)
        directory.run = {
            "run_id": path.name,
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
        try:
            (path / RECORDS_DIR).mkdir()
            write_atomically(path / SCENARIO_FILE, lambda tmp: tmp.write_text(scenario_text))
            directory.write_run()
        except OSError as err:
            raise ResultDirError(f"{path}: cannot write the run directory ({err})") from None
        return directory

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """An existing run, for --resume: earlier rows and status are read, nothing is
        changed yet (see `recover`). Anything unreadable is a `ResultDirError`."""
        path = Path(path)
        if not path.exists():
            raise ResultDirError(f"{path}: no such run directory")
        if not path.is_dir():
            raise ResultDirError(f"{path}: not a directory (give the run's folder)")
        run_file = path / RUN_FILE
        if not run_file.is_file():
            raise ResultDirError(f"{path}: no {RUN_FILE}; not a servebench run directory")
        try:
            run = json.loads(run_file.read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise ResultDirError(f"{run_file}: not valid JSON ({err})") from None
        if not isinstance(run, dict):
            raise ResultDirError(f"{run_file}: expected a JSON object, found {type(run).__name__}")
        directory = cls(path, run=run)
        directory.rows = _read_rows(path / TRIALS_FILE, "trial_id")
        directory.cold_starts = _read_rows(path / COLD_START_FILE, "phase")
        return directory

    def recover(self) -> list[str]:
        """Make a run ready to resume: note the resume and repair what a kill left; return
        what was repaired (each line is also kept in run.json's warnings).

        Temp files are writes cut short: removed. A per-trial file without its footer is
        the trial that was in flight (or a damaged file): removed, so that trial runs
        again. A torn merged file is removed: the merge at the end rebuilds it. A
        telemetry.parquet from before per-trial telemetry files is split into them.
        """
        self.run.setdefault("resumed_at", []).append(datetime.now(UTC).isoformat())
        notes: list[str] = []
        folders = [self.path, *(self.path / folder for folder, _ in MERGED)]
        for tmp in sorted(t for f in folders for t in f.glob(f".*{TEMP_SUFFIX}")):
            tmp.unlink()
            notes.append(f"{tmp.relative_to(self.path)}: a write cut short; removed")
        for folder, merged in MERGED:
            (self.path / folder).mkdir(exist_ok=True)
            for part in sorted((self.path / folder).glob("*.parquet")):
                if not _readable(part):
                    part.unlink()
                    notes.append(
                        f"{part.relative_to(self.path)}: torn (the run stopped while writing "
                        f"it); removed, trial {part.stem} runs again"
                    )
            if (self.path / merged).is_file() and not _readable(self.path / merged):
                (self.path / merged).unlink()
                notes.append(f"{merged}: torn; removed (rebuilt from {folder}/ at the end)")
        legacy = self.path / TELEMETRY_FILE
        parts = self.path / TELEMETRY_DIR
        if legacy.is_file() and not any(parts.iterdir()):
            table = pq.read_table(legacy)
            for trial_id in pc.unique(table["trial_id"]).to_pylist():
                self.write_trial_telemetry(
                    trial_id, table.filter(pc.equal(table["trial_id"], trial_id))
                )
        for note in notes:
            self.warn(note)
        return notes

    def warn(self, text: str) -> None:
        """Keep a warning in run.json (written with the next `write_run`)."""
        self.run.setdefault("warnings", []).append(text)

    # -- run.json ---------------------------------------------------------------------

    def write_run(self) -> None:
        text = json.dumps(self.run, indent=2, default=str) + "\n"
        try:
            write_atomically(self.path / RUN_FILE, lambda tmp: tmp.write_text(text))
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            # A full disk has no room for a second copy, but run.json must still say why
            # the run stopped: rewriting it in place needs no new space while it fits in
            # the blocks it already has (it is a few KB). Not atomic; only for this case.
            with open(self.path / RUN_FILE, "r+") as out:
                out.write(text)
                out.truncate()

    def finish(self, status: str, reason: str | None = None) -> None:
        """Merge the per-trial files and close run.json with `status` and why.

        A merge the disk has no room for fails the run (unless it already failed) and
        leaves the per-trial files, which hold every record, in place of the merged file.
        """
        for folder, merged in MERGED:
            try:
                self._merge(folder, merged)
            except OSError as err:
                if no_space(err) is None:
                    raise
                (self.path / merged).unlink(missing_ok=True)  # stale: parts are newer
                self.warn(f"{merged} not written ({err.strerror}): {folder}/ holds it per trial")
                if status != "failed":
                    status, reason = "failed", no_space_reason(err.filename or self.path)
        self.run.update(status=status, reason=reason, ended_at=datetime.now(UTC).isoformat())
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

    def trial_telemetry_path(self, trial_id: str) -> Path:
        return self.path / TELEMETRY_DIR / f"{trial_id}.parquet"

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
        frame = pd.DataFrame(rows)
        write_atomically(self.path / name, lambda tmp: frame.to_csv(tmp, index=False))

    # -- records and telemetry ----------------------------------------------------------

    def write_trial_telemetry(self, trial_id: str, table: pa.Table) -> Path:
        """Write one trial's telemetry as a closed file (written whole, then renamed)."""
        path = self.trial_telemetry_path(trial_id)
        path.parent.mkdir(exist_ok=True)
        write_atomically(path, lambda tmp: pq.write_table(table, tmp))
        return path

    def _merge(self, folder: str, name: str) -> int:
        """Concatenate `folder/*.parquet` into `name` (atomically); return the row count.

        A part without a footer (a trial whose writer died) holds nothing readable: it is
        removed, with a warning."""
        tables = []
        for part in sorted((self.path / folder).glob("*.parquet")):
            try:
                tables.append(pq.read_table(part))
            except (pa.ArrowInvalid, OSError):
                part.unlink()
                self.warn(f"{part.relative_to(self.path)}: torn (its writer died); removed")
        if not tables:
            return 0
        merged = pa.concat_tables(tables, promote_options="default")
        write_atomically(self.path / name, lambda tmp: pq.write_table(merged, tmp))
        return merged.num_rows


def _read_rows(path: Path, key: str) -> list[dict[str, Any]]:
    """The rows of one of the run's CSV files (none if it is absent or empty)."""
    if not path.is_file():
        return []
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return []
    except (ValueError, UnicodeDecodeError) as err:  # pandas' ParserError is a ValueError
        raise ResultDirError(f"{path}: not a readable CSV ({err})") from None
    if key not in frame.columns:
        raise ResultDirError(f"{path}: no {key} column (found {list(frame.columns)[:8]})")
    return frame.to_dict("records")
