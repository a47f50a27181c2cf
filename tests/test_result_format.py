"""The result format's version and its one upgrade (issue 36 item 8): a run written before
format versions opens with `report html`, `recommend` and `export`, reads as today's shape
(every column, codes, slo_met words, search steps as records), resumes into today's files,
and a run of a newer format is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_analysis_rundir import make_run_dir
from typer.testing import CliRunner

from servebench.analysis.loader import load_run
from servebench.analysis.search import search_steps
from servebench.cli import app
from servebench.results import (
    FORMAT_VERSION,
    RUN_FILE,
    SETTING_COLUMNS,
    TRIAL_SCHEMA,
    TRIALS_FILE,
    MixModelRecord,
    ResultDirError,
    RunDirectory,
    RunFiles,
    RunStatus,
    SearchStepRecord,
    mix_json,
    read_mix,
    read_run_json,
    read_search_steps,
    upgrade,
)

# Columns trials.csv gained over time: a format-1 run may have none of them.
LATER_COLUMNS = [
    "format_version", "verdict_reason_codes", "verdict_warning_codes", "confidence_level",
    *(f"latency_{p}_{side}" for p in ("p50", "p90", "p95", "p99", "p99_9")
      for side in ("low", "high")),
    "slo_latency_low", "slo_latency_high", "slo_confidence_level", "slo_requests_to_decide",
    "replicate_of", "replicate", "round", "position", "remeasure_of", "remeasured",
    "interference_cpu_pressure", "interference_steal", "interference_other_cpu",
    "client_send_s", "client_recv_s", "network_server_s", "mix_json", "gang_json",
]  # fmt: skip
ERRORS_TEXT = "errors: 3 of 10 requests failed (30.00%, limit 1.00%: timeout 3)"


def older_run(root: Path) -> Path:
    """The analysis fixture as a run written before format versions: run.json without
    format_version, trials.csv without the later columns, slo_met True/False, an INVALID
    row's reason as text only, and an SLO search's steps as positional arrays."""
    path = make_run_dir(root, duration=20)
    run = json.loads((path / RUN_FILE).read_text())
    run.pop("format_version", None)
    (path / RUN_FILE).write_text(json.dumps(run))
    frame = pd.read_csv(path / TRIALS_FILE)
    frame = frame.drop(columns=[c for c in LATER_COLUMNS if c in frame.columns])
    frame["slo_met"] = frame["slo_met"].map({"met": True, "missed": False})
    frame["verdict"] = frame["verdict"].astype(object)
    frame["verdict_reasons"] = frame["verdict_reasons"].astype(object)
    frame.loc[0, ["verdict", "verdict_reasons"]] = ["INVALID", ERRORS_TEXT]
    frame["search_steps"] = frame["search_steps"].astype(object)
    frame.loc[1, "search_steps"] = json.dumps(
        [[4.0, 0.010, True, ""], [8.0, 0.090, False, ERRORS_TEXT, ["errors"]]]
    )
    frame.to_csv(path / TRIALS_FILE, index=False)
    return path


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_an_older_run_reads_as_todays_shape(tmp_path: Path) -> None:
    path = older_run(tmp_path)
    assert "format_version" not in pd.read_csv(path / TRIALS_FILE).columns
    data = load_run(path)
    assert data.run["format_version"] == FORMAT_VERSION and data.run["upgraded_from"] == 1
    assert data.run["status"] == RunStatus.COMPLETE
    trials = data.trials
    assert list(trials.columns[: len(TRIAL_SCHEMA)]) == TRIAL_SCHEMA.names
    assert (trials["format_version"] == FORMAT_VERSION).all()
    assert trials["latency_p99_high"].isna().all()  # a column it never had reads as empty
    assert set(trials["slo_met"].dropna()) == {"met", "missed"}
    assert trials.loc[0, "verdict_reason_codes"] == "errors"  # read from its text, once
    steps = search_steps(trials)
    assert steps["rate"].tolist() == [4.0, 8.0] and steps["chosen"].tolist() == [True, False]
    # Before the judge, a step's interval is its one latency; before codes, its text's.
    assert steps["low"].tolist() == steps["high"].tolist() == [0.010, 0.090]
    assert steps["codes"].tolist() == [(), ("errors",)]


def test_an_older_run_opens_with_report_recommend_and_export(tmp_path: Path) -> None:
    path = older_run(tmp_path)
    done = cli("report", "html", str(path), "-o", str(tmp_path / "r.html"))
    assert done.exit_code == 0, done.output
    assert "servebench report" in (tmp_path / "r.html").read_text()
    done = cli("recommend", str(path), "--qps", "10", "--slo-p99-ms", "200", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["rankings"]
    done = cli("export", str(path), "-o", str(tmp_path / "pa"))
    assert done.exit_code == 0, done.output
    assert list((tmp_path / "pa").glob("*.csv"))


def test_a_resumed_older_run_is_written_in_todays_format(tmp_path: Path) -> None:
    path = older_run(tmp_path)
    directory = RunDirectory.open(path)
    assert [r.slo_met for r in directory.rows[:2]] == [
        "met" if m else "missed" for m in pd.read_csv(path / TRIALS_FILE)["slo_met"][:2]
    ]
    directory.write_trials()
    directory.write_run()
    written = pd.read_csv(path / TRIALS_FILE)
    assert list(written.columns) == TRIAL_SCHEMA.names
    assert (written["format_version"] == FORMAT_VERSION).all()
    assert json.loads(written.loc[1, "search_steps"])[0] == {
        "rate": 4.0, "latency_s": 0.010, "met": True, "reasons": "", "codes": [],
        "verdict": None, "low_s": 0.010, "high_s": 0.010,
    }  # fmt: skip
    run = json.loads((path / RUN_FILE).read_text())
    assert (run["format_version"], run["upgraded_from"]) == (FORMAT_VERSION, 1)
    # Read again, today's run reads the same as the older one did.
    again = load_run(path, records=False).trials
    assert again["verdict_reason_codes"].tolist()[:1] == ["errors"]
    assert search_steps(again)["rate"].tolist() == [4.0, 8.0]


def fixture_run(root: Path, name: str, *, format_2: bool) -> Path:
    """The analysis fixture with a user's imported ONNX model (the first trial of each
    setting: no family, depth or width), as today writes it or (`format_2`) as format 2
    did: the API in `server_kind`, the file's format in `layer_type`, no `format` column.
    Both are read and written back by pandas alike, so they differ only in what format 2
    wrote otherwise."""
    path = make_run_dir(root / name, duration=20)
    frame = pd.read_csv(path / TRIALS_FILE)
    imported = ~frame["setting"].duplicated()
    frame.loc[imported, ["layer_type", "depth", "width"]] = None
    frame["format"] = frame["format"].astype(object)
    frame.loc[imported, "format"] = "onnx"
    if format_2:
        run = json.loads((path / RUN_FILE).read_text())
        (path / RUN_FILE).write_text(json.dumps({**run, "format_version": 2}))
        frame["layer_type"] = frame["layer_type"].where(~imported, frame["format"])
        frame["generators"] = 1
        renamed = {"api": "server_kind", "generators": "processes"}
        frame = frame.drop(columns=["format"]).rename(columns=renamed)
        frame["format_version"] = 2
    frame.to_csv(path / TRIALS_FILE, index=False)
    return path


def test_a_format_2_run_reads_with_api_and_format(tmp_path: Path) -> None:
    path = fixture_run(tmp_path, "old", format_2=True)
    trials = load_run(path).trials
    assert "server_kind" not in trials.columns and set(trials["api"]) == {"triton"}
    assert "processes" not in trials.columns and set(trials["generators"]) == {1}
    imported = trials["format"].notna()
    assert set(trials.loc[imported, "format"]) == {"onnx"} and imported.sum() == 2
    assert trials.loc[imported, "layer_type"].isna().all()
    assert set(trials.loc[~imported, "layer_type"]) == {"conv"}  # generated: kept
    assert (trials["format_version"] == FORMAT_VERSION).all()
    # Resumed, it is written in today's names.
    directory = RunDirectory.open(path)
    directory.write_trials()
    written = pd.read_csv(path / TRIALS_FILE)
    assert list(written.columns) == TRIAL_SCHEMA.names
    assert written["format"].notna().sum() == 2


def test_a_format_2_run_opens_with_report_recommend_and_export_as_before(
    tmp_path: Path,
) -> None:
    old = fixture_run(tmp_path, "old", format_2=True)
    new = fixture_run(tmp_path, "new", format_2=False)
    answers = []
    for path in (old, new):
        report = cli("report", "html", str(path), "-o", str(path / "r.html"))
        assert report.exit_code == 0, report.output
        done = cli("recommend", str(path), "--qps", "10", "--slo-p99-ms", "200", "--json")
        assert done.exit_code == 0, done.output
        answers.append(json.loads(done.output)["rankings"])
        done = cli("export", str(path), "-o", str(path / "pa"))
        assert done.exit_code == 0, done.output
        answers.append({f.name: f.read_text() for f in sorted((path / "pa").glob("*.csv"))})
    assert answers[0] == answers[2] and answers[1] == answers[3]


def test_a_format_2_settings_file_has_api(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"trial_id": ["t1"], "server_kind": ["tfs"], "status": ["ok"], "format_version": [2]}
    )
    settings = upgrade(RunFiles(settings=frame), tmp_path).settings
    assert settings is not None and list(settings.columns) == list(SETTING_COLUMNS)
    assert settings.loc[0, "api"] == "tfs"


def test_writers_write_todays_version(tmp_path: Path) -> None:
    directory = RunDirectory.create(tmp_path, "r", "name: r\n", tmp_path / "r.yaml")
    assert json.loads((directory.path / RUN_FILE).read_text())["format_version"] == 3
    directory.write_settings([{"trial_id": "t1", "status": "ok"}])
    settings = pd.read_csv(directory.path / "settings.csv")
    assert list(settings.columns) == list(SETTING_COLUMNS)
    assert settings["format_version"].tolist() == [FORMAT_VERSION]
    directory.finish(RunStatus.COMPLETE)
    assert read_run_json(directory.path / RUN_FILE)["status"] == "complete"
    with pytest.raises(ValueError, match="not a valid RunStatus"):
        directory.finish("done")


@pytest.mark.parametrize("where", ["run.json", "trials.csv"])
def test_a_newer_format_is_refused_in_one_line(tmp_path: Path, where: str) -> None:
    path = make_run_dir(tmp_path, duration=10)
    newer = FORMAT_VERSION + 1
    if where == "run.json":
        run = json.loads((path / RUN_FILE).read_text())
        (path / RUN_FILE).write_text(json.dumps({**run, "format_version": newer}))
    else:
        frame = pd.read_csv(path / TRIALS_FILE)
        frame.loc[2, "format_version"] = newer
        frame.to_csv(path / TRIALS_FILE, index=False)
    with pytest.raises(ResultDirError, match=f"{where}: written in result format {newer}, newer"):
        load_run(path)
    done = cli("report", "html", str(path))
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert "newer than this servebench reads" in done.output


def test_run_status_is_one_of_the_enum(tmp_path: Path) -> None:
    path = make_run_dir(tmp_path, duration=10)
    run = json.loads((path / RUN_FILE).read_text())
    (path / RUN_FILE).write_text(json.dumps({**run, "status": "done"}))
    with pytest.raises(ResultDirError, match="field status: 'done' is not one of running"):
        read_run_json(path / RUN_FILE)
    del run["status"], run["run_id"]
    (path / RUN_FILE).write_text(json.dumps(run))
    read = read_run_json(path / RUN_FILE)
    assert (read["status"], read["run_id"]) == (RunStatus.UNKNOWN, path.name)


@pytest.mark.parametrize(
    "positional",
    [
        [200.0, 0.02, True, ""],
        [200.0, 0.02, True, "", []],
        [200.0, 0.02, True, "", [], "met", 0.015, 0.025],
    ],
)
def test_each_older_step_shape_becomes_a_record(tmp_path: Path, positional: list) -> None:
    path = tmp_path / "old"
    path.mkdir()
    (path / RUN_FILE).write_text(json.dumps({"run_id": "old", "status": "complete"}))
    cell = json.dumps([positional])
    pd.DataFrame({"trial_id": ["s"], "search_steps": [cell]}).to_csv(path / TRIALS_FILE)
    (step,) = read_search_steps(load_run(path).trials.loc[0, "search_steps"])
    judged = len(positional) == 8
    assert step == SearchStepRecord(
        rate=200.0, latency_s=0.02, met=True, reasons="", codes=(),
        verdict="met" if judged else None,
        low_s=0.015 if judged else 0.02, high_s=0.025 if judged else 0.02,
    )  # fmt: skip


def test_a_mix_cell_is_typed_records() -> None:
    figures = {"weight": 3.0, "share": 0.75, "count": 30, "ok": 29, "errors": 1,
               "latency_p50": 0.002, "latency_p99": 0.009}  # fmt: skip
    cell = mix_json({"a": figures})
    assert read_mix(cell) == {"a": MixModelRecord(**figures)}
    assert read_mix(None) == {}
    with pytest.raises(ValueError, match=r"mix_json: .*unexpected keyword argument 'p99'"):
        read_mix(json.dumps({"a": {**figures, "p99": 0.009}}))
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'ok'"):
        mix_json({"a": {k: v for k, v in figures.items() if k != "ok"}})
