"""Read a result directory (`results/<run-id>/`) into data frames: the one reader every
report, comparison, export and recommendation goes through.

The analysis layer sees a run only through its files, so a report can be rebuilt from a
copied folder long after the servers are gone, and a run that failed half-way still gets
one: every file except `run.json` is optional (no trials.csv: no trial finished yet), and
a missing column reads as empty rather than failing the whole report. What is there must
be readable: a file that is not (torn, empty, binary, a field or cell of the wrong type)
is a `ResultDirError` naming the file and the field, which the commands print as one
line, exit 2.

Whatever format a run was written in, it is read as today's: the files pass through
`results.upgrade` as they are read (run.json by `results.read_run_json`), which brings an
older run's rows to today's shape once (its verdict codes read from its texts, its
True/False `slo_met` as met/missed, the columns it lacks as empty); nothing after the
loader asks how old a run is, nor looks at a reason's text to decide anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from servebench.results import (
    COLD_START_COLUMNS,
    COLD_START_FILE,
    RECORDS_DIR,
    RECORDS_FILE,
    RUN_FILE,
    SCENARIO_FILE,
    SETTING_COLUMNS,
    SETTINGS_FILE,
    SLO_DECISIONS,
    TELEMETRY_DIR,
    TELEMETRY_FILE,
    TRIAL_SCHEMA,
    TRIALS_FILE,
    TUNE_FILE,
    ResultDirError,
    RunFiles,
    conform_records,
    read_run_json,
    read_setting_rows,
    read_tune_json,
    upgrade,
)

REPORT_FILE = "report.html"

# What trials.csv's columns hold, from the one schema its producers write to: text stays
# text (a trial id such as "1e5" must not become a number), numbers are coerced, booleans
# are read back from their CSV spelling.
TEXT_COLUMNS = tuple(f.name for f in TRIAL_SCHEMA if pa.types.is_string(f.type))
BOOL_COLUMNS = tuple(f.name for f in TRIAL_SCHEMA if pa.types.is_boolean(f.type))
NUMBER_COLUMNS = tuple(
    f.name for f in TRIAL_SCHEMA if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
)


@dataclass
class RunData:
    """Everything one run left on disk, as frames; optional files are None when absent."""

    path: Path
    run: dict[str, Any]
    trials: pd.DataFrame
    records: pd.DataFrame | None
    cold_start: pd.DataFrame | None
    telemetry: pd.DataFrame | None
    scenario_text: str | None
    tune: dict[str, Any] | None = None  # the configuration search's path (tune.json)
    # settings.csv: one row per setting over its replicates (None: a run from before them).
    settings: pd.DataFrame | None = None

    @property
    def replicated(self) -> bool:
        """Whether the run measured its settings more than once (workload.repeats > 1)."""
        if self.settings is None or self.settings.empty:
            return False
        return bool((self.settings["replicates_planned"].fillna(1) > 1).any())

    @property
    def ok_decisions(self) -> pd.DataFrame:
        """`decisions` that measured something usable (status ok)."""
        rows = self.decisions
        return rows[rows["status"] == "ok"]

    @property
    def decisions(self) -> pd.DataFrame:
        """The rows a decision rests on, shaped like `trials`: in a replicated run one row
        per setting (`by_setting`), else the trials themselves."""
        if not self.replicated or self.settings is None:
            return self.trials
        return by_setting(self.trials, self.settings)

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])

    @property
    def status(self) -> str:
        return str(self.run["status"])

    @property
    def ok_trials(self) -> pd.DataFrame:
        """Trials that measured something usable (status ok)."""
        return self.trials[self.trials["status"] == "ok"]


def load_run(path: str | Path, *, records: bool = True, trials: bool = False) -> RunData:
    """Read a run directory; `records=False` skips the per-request file (summary only);
    `trials=True`: a run without a trial row is an error (nothing to compare, export or
    recommend from), said with the run's status and why."""
    path = Path(path)
    if not path.exists():
        raise ResultDirError(f"{path}: no such run directory")
    if not path.is_dir():
        raise ResultDirError(f"{path}: not a directory (give the run's folder, results/<run-id>)")
    data = RunData(
        path=path,
        run=read_run_json(path / RUN_FILE),
        trials=read_trials(path / TRIALS_FILE),
        records=read_run_records(path) if records else None,
        cold_start=read_cold_start(path / COLD_START_FILE),
        telemetry=_read_merged_or_parts(path, TELEMETRY_FILE, TELEMETRY_DIR),
        scenario_text=_read_text(path / SCENARIO_FILE),
        tune=read_tune_json(path / TUNE_FILE),
        settings=read_settings(path),
    )
    if trials and data.trials.empty:
        why = f": {data.run['reason']}" if data.run["reason"] else ""
        raise ResultDirError(f"{path / TRIALS_FILE}: no trial rows (the run is {data.status}{why})")
    return data


def _read_text(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ResultDirError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise ResultDirError(f"{path}: cannot read it ({err.strerror})") from None


# The figures a setting row replaces in its template trial row: the median over replicates
# and the interval of that median, where settings.csv has one (`SETTING_STATISTICS`).
_OVER_REPLICATES = (
    "latency_p50", "latency_p90", "latency_p95", "latency_p99", "latency_p99_9",
    "slo_latency_s", "throughput_rps", "throughput_ips", "achieved_rate", "max_rate",
    "cost_per_million",
)  # fmt: skip
# trials.csv's name for each figure's interval columns, where it has them.
_INTERVAL_OF = {
    **{f"latency_{p}": (f"latency_{p}_low", f"latency_{p}_high") for p in
       ("p50", "p90", "p95", "p99", "p99_9")},
    "slo_latency_s": ("slo_latency_low", "slo_latency_high"),
}  # fmt: skip


def by_setting(trials: pd.DataFrame, settings: pd.DataFrame) -> pd.DataFrame:
    """One trial-shaped row per setting of a replicated run: its first counted replicate's
    row (coordinates, sizes, telemetry) with the figures settings.csv summarizes over the
    replicates put in — each the median, its interval the median's interval over replicates
    (not one replicate's request-level one), `slo_met` the setting's judgement — so every
    reader that takes trial rows (recommend, the report's first screen) decides on the
    setting, not on a replicate. A setting no replicate counted in keeps a failed row."""
    rows = []
    for setting in settings.to_dict("records"):
        ids = str(setting.get("replicate_ids") or "").split(";")
        mine = trials[trials["trial_id"].isin([i for i in ids if i])]
        if mine.empty:
            mine = trials[trials["replicate_of"] == setting["trial_id"]]
        if mine.empty:
            continue
        row = mine.iloc[0].to_dict()
        row["trial_id"] = setting["trial_id"]
        for figure in _OVER_REPLICATES:
            row[figure] = setting.get(figure)
            if figure in _INTERVAL_OF:
                low, high = _INTERVAL_OF[figure]
                row[low], row[high] = setting.get(f"{figure}_low"), setting.get(f"{figure}_high")
        row["slo_met"] = setting.get("slo_met")
        if setting.get("status") == "failed":
            row["status"] = "failed"
            row["reason"] = "no replicate counted (every one failed or was INVALID)"
        rows.append(row)
    return pd.DataFrame(rows, columns=trials.columns)


def read_settings(run_dir: Path) -> pd.DataFrame | None:
    """settings.csv as a frame with every `SETTING_SCHEMA` column (None: no such file)."""
    if not (run_dir / SETTINGS_FILE).is_file():
        return None
    try:
        rows = read_setting_rows(run_dir)
    except OSError as err:
        raise ResultDirError(
            f"{run_dir / SETTINGS_FILE}: cannot read it ({err.strerror})"
        ) from None
    return pd.DataFrame(rows, columns=list(SETTING_COLUMNS))


def read_trials(path: Path) -> pd.DataFrame:
    """trials.csv with typed columns, upgraded to today's shape (`results.upgrade`).

    A run interrupted before its first trial has no trials.csv: that is an empty table,
    not an error, so the report can still say what happened. An empty file is damage (the
    runner writes none without a row): an error, like a file that does not parse.
    """
    if not path.is_file():
        frame = pd.DataFrame({"trial_id": pd.Series(dtype=str)})
    else:
        try:
            frame = pd.read_csv(
                path,
                dtype=dict.fromkeys(TEXT_COLUMNS, str),
                float_precision="round_trip",  # each number as written, to the last bit
            )
        except pd.errors.EmptyDataError:
            raise ResultDirError(
                f"{path}: empty, not even a header (a run writes it with its first trial)"
            ) from None
        except (ValueError, UnicodeDecodeError) as err:  # pandas' ParserError is a ValueError
            raise ResultDirError(f"{path}: not a readable CSV ({_first_line(err)})") from None
        except OSError as err:
            raise ResultDirError(f"{path}: cannot read it ({err.strerror})") from None
        if "trial_id" not in frame.columns:
            raise ResultDirError(f"{path}: no trial_id column (found {list(frame.columns)[:8]})")
    frame = upgrade(RunFiles(trials=frame), path.parent).trials
    assert frame is not None
    for name in TEXT_COLUMNS:
        frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    frame["slo_met"] = _slo_decisions(frame["slo_met"], path)
    for name in NUMBER_COLUMNS:
        try:
            frame[name] = pd.to_numeric(frame[name])
        except (ValueError, TypeError):
            bad = frame[name][pd.to_numeric(frame[name], errors="coerce").isna()]
            bad = bad[bad.notna()]
            raise ResultDirError(
                f"{path}: column {name}: {bad.iloc[0]!r} is not a number"
            ) from None
    for name in BOOL_COLUMNS:
        frame[name] = frame[name].map(_to_bool).astype(object)
    # One block per type again: the column-by-column conversions above leave one each.
    return frame.reset_index(drop=True).copy()


def _slo_decisions(column: pd.Series, path: Path) -> pd.Series:
    """`slo_met` as met/missed/undecided; any other word is damage."""
    decided = column.astype(object)
    bad = decided[decided.notna() & ~decided.isin(SLO_DECISIONS)]
    if len(bad):
        raise ResultDirError(
            f"{path}: column slo_met: {bad.iloc[0]!r} is not one of {', '.join(SLO_DECISIONS)}"
        )
    return decided.where(decided.notna(), None)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _to_bool(value: Any) -> bool | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    return None


def read_run_records(path: Path) -> pd.DataFrame | None:
    """Per-request records: the merged file, else the per-trial files a crash left behind."""
    merged = path / RECORDS_FILE
    if merged.is_file():
        tables = [_read_table(merged)]
    else:
        parts = (
            sorted((path / RECORDS_DIR).glob("*.parquet")) if (path / RECORDS_DIR).is_dir() else []
        )
        tables = []
        for part in parts:
            try:
                tables.append(_read_table(part))
            except ResultDirError:
                continue  # a trial killed mid-write has no footer; its summary row says so
        if not tables:
            return None
    table = pa.concat_tables(tables, promote_options="default")
    try:
        table = conform_records(table, merged)
    except ValueError as err:
        raise ResultDirError(str(err)) from None
    frame = table.to_pandas()
    frame["trial_id"] = frame["trial_id"].astype(object)
    return frame


def read_cold_start(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path, dtype={"server": str, "setting": str, "model": str, "phase": str})
    except pd.errors.EmptyDataError:
        return None
    except (ValueError, UnicodeDecodeError) as err:
        raise ResultDirError(f"{path}: not a readable CSV ({_first_line(err)})") from None
    except OSError as err:
        raise ResultDirError(f"{path}: cannot read it ({err.strerror})") from None
    missing = [c for c in COLD_START_COLUMNS if c not in frame.columns]
    if missing:
        raise ResultDirError(f"{path}: missing columns {missing}")
    frame["seconds"] = pd.to_numeric(frame["seconds"], errors="coerce")
    for name in ("server", "setting", "model", "phase"):
        frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    return frame


def _read_table(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise ResultDirError(f"{path}: not a readable Parquet file ({err})") from None


def _read_parquet(path: Path) -> pd.DataFrame | None:
    return _read_table(path).to_pandas() if path.is_file() else None


def _read_merged_or_parts(path: Path, name: str, folder: str) -> pd.DataFrame | None:
    """The merged file, else the per-trial files of a run that never merged them (killed,
    or a full disk at the merge); a part without its footer holds nothing and is skipped."""
    if (path / name).is_file():
        return _read_parquet(path / name)
    tables = []
    for part in sorted((path / folder).glob("*.parquet")) if (path / folder).is_dir() else []:
        try:
            tables.append(_read_table(part))
        except ResultDirError:
            continue
    return pa.concat_tables(tables, promote_options="default").to_pandas() if tables else None
