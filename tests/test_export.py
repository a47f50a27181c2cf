"""`servebench export`: perf_analyzer's CSV, byte for byte in its layout, and the plain
trial table with units.

The headers below are copied from perf_analyzer's own writer (report_writer.cc,
ReportWriter::GenerateReport, triton-inference-server/perf_analyzer at 263c5f6e): the
mode column, Inferences/Second, Client Send, the server columns when it has Triton's
statistics, Client Recv, then p50/p90/p95/p99 latency. Values are whole microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from cli_checks import assert_one_line_error
from test_analysis_rundir import make_run_dir
from typer.testing import CliRunner

from servebench.analysis.export import microseconds
from servebench.cli import app
from servebench.results import TRIAL_SCHEMA

REQUEST_RATE_HEADER = (
    "Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)
CONCURRENCY_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)
# TF Serving: perf_analyzer has no server statistics, so no server columns.
NO_SERVER_STATS_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)


def closed_row(level: int, ips: float, **extra) -> dict:
    row = {
        "trial_id": f"c{level}-{extra.get('api', 'triton')}",
        "status": "ok",
        "verdict": "VALID",
        "server": "triton",
        "api": "triton",
        "setting": "triton[dynamic_batching=on]",
        "protocol": "grpc",
        "model": "dense-d2-w16-abcdef",
        "batch_size": 1,
        "link": "direct",
        "load_kind": "concurrency",
        "load_level": level,
        "mode": "closed",
        "concurrency": level,
        "throughput_ips": ips,
        "client_send_s": 42.5e-6,
        "client_recv_s": 18.9e-6,
        "network_server_s": 0.0031,
        "server_queue_s": 0.0005,
        "server_compute_input_s": 10e-6,
        "server_compute_infer_s": 0.0012,
        "server_compute_output_s": 20e-6,
        "server_compute_s": 0.00123,
        "latency_p50": 0.0035,
        "latency_p90": 0.0041,
        "latency_p95": 0.0044,
        "latency_p99": 0.0052,
    }
    row.update(extra)
    return row


def write_run(root: Path, rows: list[dict]) -> Path:
    path = root / "closed-run"
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": "closed-run", "status": "complete"}))
    pd.DataFrame(rows).to_csv(path / "trials.csv", index=False)
    return path


def export(*args: str):
    return CliRunner().invoke(app, ["export", *args])


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_request_rate_files_have_perf_analyzers_header_and_microseconds(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, duration=20)
    out = tmp_path / "pa"
    result = export(str(run), "-o", str(out))
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.csv"))
    # 2 settings × 2 batch sizes × 2 links; the failed trial has no row.
    assert len(files) == 8
    assert "failed or INVALID trials have no row" in result.output
    trials = pd.read_csv(run / "trials.csv").set_index("trial_id")
    for path in files:
        header, *rows = lines(path)
        assert header == REQUEST_RATE_HEADER
        assert [r.split(",")[0] for r in rows] == ["4", "8"]  # by inferences/s
    path = (
        out
        / "triton_dynamic_batching=on_instance_count=2___conv-d3-w64-1a9df3__b16__wifi__request_rate.csv"
    )
    cells = dict(zip(REQUEST_RATE_HEADER.split(","), lines(path)[2].split(","), strict=True))
    row = trials[
        (trials.setting == "triton[dynamic_batching=on,instance_count=2]")
        & (trials.batch_size == 16)
        & (trials.link == "wifi")
        & (trials.load_level == 8)
    ].iloc[0]
    us = lambda seconds: str(int(seconds * 1e6))  # noqa: E731
    assert cells["Inferences/Second"] == f"{row.throughput_ips:g}"
    assert cells["Client Send"] == us(row.client_send_s)
    assert cells["Client Recv"] == us(row.client_recv_s)
    assert cells["Server Queue"] == us(row.server_queue_s)
    waited = row.network_server_s - row.server_queue_s - row.server_compute_s
    assert cells["Network+Server Send/Recv"] == us(waited)
    assert cells["p99 latency"] == us(row.latency_p99) and cells["p50 latency"] == us(
        row.latency_p50
    )
    # The fixture's server reports its compute as a total only: the parts are empty.
    assert cells["Server Compute Infer"] == "" and cells["Server Compute Input"] == ""
    assert "empty cells where the run did not measure: server compute" in result.output


def test_concurrency_file_by_hand(tmp_path: Path) -> None:
    rows = [
        closed_row(4, 1234.5678),
        closed_row(1, 400.0, client_send_s=None, network_server_s=0.0010, server_compute_s=None),
        closed_row(2, 700.25),
    ]
    out = tmp_path / "pa"
    result = export(str(write_run(tmp_path, rows)), "-o", str(out))
    assert result.exit_code == 0, result.output
    (path,) = out.glob("*.csv")
    assert (
        path.name == "triton_dynamic_batching=on___dense-d2-w16-abcdef__b1__direct__concurrency.csv"
    )
    assert lines(path) == [
        CONCURRENCY_HEADER,
        # gRPC's send is not timed: empty. Without a compute total its parts are summed:
        # 1000 − (500 + 10 + 1200 + 20) < 0, capped at 0 as perf_analyzer does.
        "1,400,,0,500,10,1200,20,18,3500,4100,4400,5200",
        "2,700.25,42,1370,500,10,1200,20,18,3500,4100,4400,5200",
        # 3100 µs waited − 500 queue − 1230 compute = 1370 µs network+server.
        "4,1234.57,42,1370,500,10,1200,20,18,3500,4100,4400,5200",
    ]
    assert "empty cells where the run did not measure: client send" in result.output


def test_tf_serving_has_no_server_columns(tmp_path: Path) -> None:
    row = closed_row(2, 50.0, api="tfs", server="tfs", setting="tfs")
    out = tmp_path / "pa"
    assert export(str(write_run(tmp_path, [row])), "-o", str(out)).exit_code == 0
    (path,) = out.glob("*.csv")
    assert lines(path) == [NO_SERVER_STATS_HEADER, "2,50,42,18,3500,4100,4400,5200"]


def _search_files(path: Path, windows: dict[str, tuple[float, float, float]]) -> None:
    """records.parquet and telemetry.parquet of a search trial `c0-triton` whose steps
    (step id -> start, end, queue µs per request) each answer 10 requests per telemetry
    sample, Triton's counters sampled every 0.5 s from 0.2 s into each step."""
    records, samples = [], []
    success = queue = compute = 0.0
    for step_id, (start, end, queue_us) in windows.items():
        for seq, sent in enumerate(np.arange(start, end, 0.05)):
            records.append(
                {"trial_id": step_id, "seq": seq, "intended_time": sent, "send_time": sent,
                 "completion_time": sent + 0.004, "latency": 0.004, "ok": True,
                 "error_kind": None, "batch_size": 1, "request_bytes": 100,
                 "response_bytes": 100}
            )  # fmt: skip
        for stamp in np.arange(start + 0.2, end, 0.5):
            success, queue, compute = success + 10, queue + 10 * queue_us, compute + 10 * 1200
            labels = json.dumps({"model": "dense-d2-w16-abcdef", "version": "1"})
            for metric, value in (
                ("nv_inference_request_success", success),
                ("nv_inference_queue_duration_us", queue),
                ("nv_inference_compute_input_duration_us", 100.0 * success),
                ("nv_inference_compute_infer_duration_us", compute),
                ("nv_inference_compute_output_duration_us", 200.0 * success),
            ):
                samples.append(
                    {"trial_id": "c0-triton", "timestamp": float(stamp),
                     "source": "server_metrics", "metric": metric, "value": value,
                     "labels": labels}
                )  # fmt: skip
    pd.DataFrame(records).to_parquet(path / "records.parquet")
    pd.DataFrame(samples).to_parquet(path / "telemetry.parquet")


def test_a_search_trial_is_its_chosen_rate(tmp_path: Path) -> None:
    """Issue 33: the row's server columns span every step (an overloaded last step puts
    its queue time at 20 ms, above the chosen rate's p50 of 3.5 ms); the export takes
    the server's split from the telemetry samples of the chosen step alone."""
    steps = [[10.0, 0.004, True, ""], [20.0, 0.006, True, ""], [40.0, 0.09, False, ""]]
    row = closed_row(
        0,
        20.0,
        load_kind="search",
        load_level=None,
        mode="open",
        concurrency=None,
        search_steps=json.dumps(steps),
        max_rate=20.0,
        server_queue_s=0.020,  # over every step
    )
    run = write_run(tmp_path, [row])
    _search_files(
        run,
        {"c0-triton.s0": (100.0, 102.0, 50.0), "c0-triton.s1": (103.0, 105.0, 300.0),
         "c0-triton.s2": (106.0, 108.0, 60_000.0)},
    )  # fmt: skip
    out = tmp_path / "pa"
    result = export(str(run), "-o", str(out))
    assert result.exit_code == 0, result.output
    (path,) = out.glob("*.csv")
    header, line = lines(path)
    assert header == REQUEST_RATE_HEADER
    cells = dict(zip(header.split(","), line.split(","), strict=True))
    assert cells["Request Rate"] == "20" and cells["Inferences/Second"] == "20"
    assert cells["Server Queue"] == "300"  # µs per request in the chosen step (s1)
    assert cells["Server Compute Infer"] == "1200"
    assert int(cells["Server Queue"]) < int(cells["p50 latency"]) == 3500
    # 3100 µs waited − 300 queue − (100 + 1200 + 200) compute = 1300 µs network+server.
    assert cells["Network+Server Send/Recv"] == "1300"
    assert "server times from the telemetry samples of that step alone" in result.output
    # Without the telemetry to date it, the split is empty, not every step's.
    (run / "telemetry.parquet").unlink()
    empty = tmp_path / "empty"
    assert export(str(run), "-o", str(empty)).exit_code == 0
    cells = dict(
        zip(header.split(","), lines(next(empty.glob("*.csv")))[1].split(","), strict=True)
    )
    assert cells["Server Queue"] == "" and cells["Server Compute Infer"] == ""


def test_microseconds_truncate_like_integer_nanoseconds() -> None:
    assert microseconds(0.000123) == "123"  # 0.000123 * 1e6 is 122.99999999999999
    assert microseconds(1.9999e-6) == "1"
    assert microseconds(0.0) == "0"


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_plain_table_keeps_every_trial_and_its_units(tmp_path: Path, fmt: str) -> None:
    run = make_run_dir(tmp_path, duration=20)
    result = export(str(run), "--format", fmt)
    assert result.exit_code == 0, result.output
    path = run / "export" / f"trials.{fmt}"
    original = pd.read_csv(run / "trials.csv")
    if fmt == "parquet":
        table = pq.read_table(path)
        assert table.num_rows == len(original) == 17
        assert table.schema.field("latency_p99").metadata[b"unit"] == b"s"
        assert table.schema.field("batch_size").type == TRIAL_SCHEMA.field("batch_size").type
        frame = table.to_pandas()
    elif fmt == "json":
        data = json.loads(path.read_text())
        assert data["run"]["run_id"] == "fixture-20261129T120000Z"
        assert data["columns"]["cost_per_million"]["unit"] == "USD/1e6 inferences"
        assert data["columns"]["client_send_s"]["unit"] == "s"
        frame = pd.DataFrame(data["trials"])
    else:
        frame = pd.read_csv(path)
    assert list(frame["trial_id"]) == list(original["trial_id"])
    assert frame["latency_p99"].tolist() == pytest.approx(
        original["latency_p99"].tolist(), nan_ok=True
    )
    # The columns come in the schema's order, whatever order trials.csv had them in.
    order = [c for c in TRIAL_SCHEMA.names if c in frame.columns]
    assert list(frame.columns) == order


def test_errors_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(export(str(tmp_path / "nope")), "no such run directory")
    failed = write_run(tmp_path / "a", [closed_row(1, 10.0, status="failed")])
    assert_one_line_error(export(str(failed)), "no ok, VALID trial to export")
    good = write_run(tmp_path / "b", [closed_row(1, 10.0)])
    (tmp_path / "file").write_text("x")
    assert_one_line_error(
        export(str(good), "-o", str(tmp_path / "file")), "perf_analyzer files go in a folder"
    )
