"""servebench's Locust users in real headless Locust runs, and the pieces around them.

Locust monkey-patches the standard library with gevent when imported, so every Locust run
here is a `python -m locust` subprocess against servers this test process holds: the real
local Triton (`triton_dense_model`) and the TF Serving protocol double (`tfs_family`).
Each run is checked twice over: Locust's own statistics (`--json-file`, written after the
last user stopped; `--csv` only for the failure messages, its counts are sampled every
second) and servebench's result directory (run.json, trials.csv, records.parquet), which
must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from link_checks import p50_floor_s

from servebench.cli.ui_launcher import UiSetup, resolve, setup_from_scenario
from servebench.load.records import RECORD_SCHEMA, Chunk
from servebench.locust.launch import LaunchError, Target, locust_argv
from servebench.locust.records import Coordinates, RecordCollector
from servebench.locust.results import LocustRun
from servebench.locust.settings import read_signature_file, user_settings
from servebench.netem import resolve_link

ROOT = Path(__file__).resolve().parents[1]
# The bound on a broken run: a swarm stops once it has seen the requests a test asked for.
RUN_TIME = "60s"
# What every locustfile the tests run adds: the swarm stops once STOP_AFTER requests have
# ended (answered or failed), the way the run-time limit stops it (runner.quit), instead of
# after a fixed second, which a loaded machine can spend before the first user has even
# connected (an emulated link's worker starting, a worker process importing Locust). A
# process that sends counts its own requests; a master, its workers' reports. At the quit
# it writes Locust's errors to errors.json: its failures CSV is rewritten once a second,
# so a short run can end before it holds them.
STOP_WHEN_SEEN = """
import json

import gevent
from locust import events
from locust.runners import WorkerRunner
from locust.stats import StatsError

_state = {{"seen": 0, "environment": None, "quitting": False}}


@events.init.add_listener
def _keep_environment(environment, **_):
    _state["environment"] = environment


def _saw(requests):
    _state["seen"] += requests
    if _state["seen"] >= {stop_after} and not _state["quitting"]:
        _state["quitting"] = True
        gevent.spawn(_state["environment"].runner.quit)


@events.request.add_listener
def _on_request(**_):
    if not isinstance(_state["environment"].runner, WorkerRunner):
        _saw(1)


@events.worker_report.add_listener
def _on_worker_report(client_id, data, **_):
    _saw(data["stats_total"]["num_requests"])


@events.quitting.add_listener
def _write_errors(environment, **_):
    if not isinstance(environment.runner, WorkerRunner):
        errors = environment.runner.stats.errors.values()
        with open("errors.json", "w") as out:
            json.dump([StatsError.parse_error(e.error) for e in errors], out)
"""


@dataclass
class LocustOutcome:
    returncode: int
    output: str
    run_dir: Path
    stats: list[dict[str, Any]]  # Locust's final statistics (--json-file)
    failures: list[str]  # Locust's errors when it quit, as its failures CSV words them

    def entry(self, name: str) -> dict[str, Any]:
        found = [e for e in self.stats if e["name"] == name]
        assert found, f"no Locust statistics for {name!r}: {[e['name'] for e in self.stats]}"
        return found[0]

    def errors(self) -> list[str]:
        return self.failures

    def trials(self) -> pd.DataFrame:
        return pd.read_csv(self.run_dir / "trials.csv")

    def records(self):
        return pq.read_table(self.run_dir / "records.parquet")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_locust(
    tmp_path: Path,
    user_class: str | None,
    *args: str,
    users: int = 3,
    stop_after: int = 20,
    run_time: str = RUN_TIME,
) -> LocustOutcome:
    """A headless Locust run of one servebench user class (None: what the shipped
    locustfile holds) until `stop_after` requests have ended."""
    imported = "locust.locustfile import *" if user_class is None else f"locust import {user_class}"
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(
        f"from servebench.{imported}\n{STOP_WHEN_SEEN.format(stop_after=stop_after)}"
    )
    cmd = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "-u", str(users), "-r", str(users), "-t", run_time, "--only-summary",
        "--results-dir", str(tmp_path / "results"), "--run-id", "run",
        "--json-file", str(tmp_path / "stats"), "--csv", str(tmp_path / "locust"), *args,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, env=_env(), cwd=tmp_path
    )
    output = proc.stdout + proc.stderr
    stats_file = tmp_path / "stats.json"
    assert stats_file.is_file(), f"Locust wrote no statistics:\n{output[-3000:]}"
    return LocustOutcome(
        proc.returncode,
        output,
        tmp_path / "results" / "run",
        json.loads(stats_file.read_text()),
        json.loads((tmp_path / "errors.json").read_text()),
    )


def check_clean_run(outcome: LocustOutcome, name: str, batch_size: int) -> pd.Series:
    """Non-zero requests, zero failures, and servebench's files agreeing with Locust."""
    assert outcome.returncode == 0, outcome.output[-3000:]
    entry = outcome.entry(name)
    assert entry["num_requests"] > 0
    assert entry["num_failures"] == 0, outcome.output[-3000:]
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["status"] == "complete"
    assert run["source"] == "locust"
    trials = outcome.trials()
    assert len(trials) == 1
    row = trials.iloc[0]
    assert row["count"] == entry["num_requests"]  # one record per Locust request event
    assert row["errors"] == 0 and row["verdict"] == "VALID"
    assert row["load_kind"] == "users" and row["batch_size"] == batch_size
    records = outcome.records()
    assert records.schema.names == RECORD_SCHEMA.names
    assert records.num_rows == entry["num_requests"]
    frame = records.to_pandas()
    assert frame["ok"].all()
    assert (frame["batch_size"] == batch_size).all()
    assert (frame["latency"] > 0).all()
    assert (frame["request_bytes"] > 0).all() and (frame["response_bytes"] > 0).all()
    assert np.allclose(frame["latency"], frame["completion_time"] - frame["send_time"])
    return row


# -- the user classes against real servers ------------------------------------------------


@pytest.mark.parametrize(
    ("user_class", "protocol"),
    [("TritonHttpUser", "triton-http"), ("TritonGrpcUser", "triton-grpc")],
)
def test_triton_user_classes_run_clean(triton_dense_model, tmp_path, user_class, protocol):
    endpoints = triton_dense_model.server.endpoints
    host = endpoints.http_url if protocol == "triton-http" else endpoints.grpc_address
    outcome = run_locust(
        tmp_path, user_class, "--host", host, "--model", triton_dense_model.name,
        "--batch-size", "2",
    )  # fmt: skip
    name = f"{triton_dense_model.name} b2 {protocol}"
    row = check_clean_run(outcome, name, batch_size=2)
    assert row["client_protocol"] == protocol and row["api"] == "triton"


@pytest.mark.parametrize(
    ("user_class", "protocol"), [("TfsRestUser", "tfs-rest"), ("TfsGrpcUser", "tfs-grpc")]
)
def test_tfs_user_classes_run_clean(tfs_family, tmp_path, user_class, protocol):
    model = next(name for name, spec in tfs_family.specs.items() if spec.layer_type == "dense")
    double = tfs_family.double
    host = double.rest_url if protocol == "tfs-rest" else double.grpc_address
    outcome = run_locust(tmp_path, user_class, "--host", host, "--model", model)
    row = check_clean_run(outcome, f"{model} b1 {protocol}", batch_size=1)
    assert row["api"] == "tfs"


def _wrong_signature(path: Path, spec, max_batch_size: int) -> Path:
    """The model's true input, but one more output value than it answers with."""
    path.write_text(
        json.dumps(
            {
                "inputs": [
                    {"name": "input", "dtype": "float32", "shape": list(spec.served_input_shape)}
                ],
                "outputs": [
                    {"name": "output", "dtype": "float32", "shape": [spec.num_outputs + 1]}
                ],
                "max_batch_size": max_batch_size,
            }
        )
    )
    return path


def test_wrong_shape_from_triton_is_a_failure(triton_dense_model, tmp_path):
    signature = _wrong_signature(tmp_path / "sig.json", triton_dense_model.spec, 64)
    outcome = run_locust(
        tmp_path, "TritonGrpcUser", "--host", triton_dense_model.server.endpoints.grpc_address,
        "--model", triton_dense_model.name, "--signature", str(signature),
    )  # fmt: skip
    _check_all_bad_responses(outcome, f"{triton_dense_model.name} b1 triton-grpc")


def test_wrong_shape_from_tfs_is_a_failure(tfs_family, tmp_path):
    model, spec = next((n, s) for n, s in tfs_family.specs.items() if s.layer_type == "dense")
    signature = _wrong_signature(tmp_path / "sig.json", spec, 0)
    outcome = run_locust(
        tmp_path, "TfsRestUser", "--host", tfs_family.double.rest_url, "--model", model,
        "--signature", str(signature),
    )  # fmt: skip
    _check_all_bad_responses(outcome, f"{model} b1 tfs-rest")


def _check_all_bad_responses(outcome: LocustOutcome, name: str) -> None:
    entry = outcome.entry(name)
    assert entry["num_requests"] > 0
    assert entry["num_failures"] == entry["num_requests"]  # not one counted as a success
    assert outcome.returncode == 1  # Locust's exit code when requests failed
    (error,) = outcome.errors()
    assert "bad_response" in error and "has shape" in error and "expected" in error
    row = outcome.trials().iloc[0]
    assert row["ok"] == 0 and row["errors"] == entry["num_requests"]
    assert row["verdict"] == "INVALID"
    assert json.loads(row["errors_by_kind"]) == {"bad_response": entry["num_requests"]}
    frame = outcome.records().to_pandas()
    assert (~frame["ok"]).all() and (frame["error_kind"] == "bad_response").all()
    assert (frame["response_bytes"] == 0).all()


def test_refused_connection_is_a_classified_failure(closed_port, tmp_path):
    outcome = run_locust(
        tmp_path, "TritonHttpUser", "--host", f"http://{closed_port}", "--model", "m", users=1,
        stop_after=1,
    )  # fmt: skip
    entry = outcome.entry("m b1 triton-http")
    assert entry["num_failures"] == entry["num_requests"] > 0
    (error,) = outcome.errors()
    # The signature read failed: the message names the kind and the URL asked.
    assert f"connection_refused: http://{closed_port}/v2/models/m: connection refused" in error
    frame = outcome.records().to_pandas()
    assert (frame["error_kind"] == "connection_refused").all()
    assert json.loads((outcome.run_dir / "run.json").read_text())["status"] == "complete"


def test_servebench_user_sends_through_an_emulated_link(triton_dense_model, tmp_path):
    """ServebenchUser (the UI's class) with --protocol and --link from the options."""
    outcome = run_locust(
        tmp_path, None, "--grpc-host", triton_dense_model.server.endpoints.grpc_address,
        "--protocol", "triton-grpc", "--model", triton_dense_model.name, "--link", "wifi",
    )  # fmt: skip
    row = check_clean_run(outcome, f"{triton_dense_model.name} b1 triton-grpc", batch_size=1)
    assert row["link"] == "wifi" and row["link_rtt_s"] == pytest.approx(0.020)
    # The wifi profile's 20 ms round trip sits under the answers: their p50 is above the
    # least its RTT and 5 ms jitter allow (link_checks).
    assert row["latency_p50"] >= p50_floor_s(resolve_link("wifi"), row["count"]), row


def test_processes_send_their_records_to_the_master(triton_dense_model, tmp_path):
    outcome = run_locust(
        tmp_path, "TritonHttpUser", "--host", triton_dense_model.server.endpoints.http_url,
        "--model", triton_dense_model.name, "--processes", "2", users=4,
    )  # fmt: skip
    check_clean_run(outcome, f"{triton_dense_model.name} b1 triton-http", batch_size=1)


def headless_ui(tmp_path: Path, served, *scenario: str) -> tuple[str, Path]:
    """`servebench ui [SCENARIO] --host <served> --headless` for 2 s with 2 users, which must
    succeed; (its stdout, the one run directory it wrote)."""
    proc = subprocess.run(
        [
            sys.executable, "-c", "from servebench.cli import main; main()", "ui", *scenario,
            "--host", served.server.endpoints.http_url,
            "--model", served.name, "--headless", "-u", "2", "-t", "2s",
            "--results", str(tmp_path / "results"),
        ],
        capture_output=True, text=True, timeout=180, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    return proc.stdout, run_dir


def test_servebench_ui_headless(triton_dense_model, tmp_path):
    stdout, run_dir = headless_ui(tmp_path, triton_dense_model)
    assert f"results: {run_dir}" in stdout
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["source"] == "locust"
    assert pd.read_csv(run_dir / "trials.csv").iloc[0]["count"] > 0


# -- settings, records and results without Locust ------------------------------------------


def test_user_settings_name_the_option_at_fault():
    options = SimpleNamespace(model="m", batch_size=1, protocol="triton-grpc", grpc_host="")
    with pytest.raises(ValueError, match="--grpc-host: triton-grpc needs"):
        user_settings(options, None)
    with pytest.raises(ValueError, match="--model: the name"):
        user_settings(SimpleNamespace(model=""), "http://h:1")
    with pytest.raises(ValueError, match="--batch-size: must be >= 1"):
        user_settings(SimpleNamespace(model="m", batch_size=0), "http://h:1")
    with pytest.raises(ValueError, match="--protocol: 'udp'"):
        user_settings(SimpleNamespace(model="m"), "http://h:1", "udp")
    with pytest.raises(ValueError, match="--host: url:"):
        user_settings(SimpleNamespace(model="m"), "ftp://h:1")
    settings = user_settings(
        SimpleNamespace(model="m", batch_size="4", model_version="2", grpc_host=""),
        "h:8001",
        "tfs-grpc",
    )
    assert settings.url == "h:8001" and settings.batch_size == 4
    assert settings.request_name == "m v2 b4 tfs-grpc"


def test_signature_file_errors_name_file_and_field(tmp_path):
    path = tmp_path / "sig.json"
    path.write_text(json.dumps({"inputs": [{"name": "x", "dtype": "float32", "shape": [3]}]}))
    with pytest.raises(ValueError, match=r"sig.json: outputs: a non-empty list"):
        read_signature_file(str(path))
    path.write_text(json.dumps({"inputs": [{"name": "x"}], "outputs": []}))
    with pytest.raises(ValueError, match=r"inputs\[0\]: needs name"):
        read_signature_file(str(path))
    with pytest.raises(ValueError, match="cannot read it"):
        read_signature_file(str(tmp_path / "missing.json"))


COORDS = Coordinates("http://h:1", "triton", "triton-http", "m", "", 2, "direct")


def _fill(collector: RecordCollector, n: int, start: float = 1000.0) -> None:
    for i in range(n):
        collector.add(COORDS, start + i, start + i + 0.01, None if i % 4 else "timeout", 10, 20)


def test_collector_round_trip_through_a_worker_report():
    worker, master = RecordCollector(), RecordCollector()
    _fill(worker, 5)
    master.extend(json.loads(json.dumps(worker.drain())))  # what msgpack carries: plain lists
    _fill(worker, 3, start=2000.0)
    master.extend(worker.drain())
    assert len(worker) == 0
    ((coords, chunk),) = master.snapshot()
    assert coords == COORDS
    assert chunk.seq.tolist() == list(range(8))
    assert np.allclose(chunk.completion - chunk.send, 0.01)
    assert (chunk.code != 0).sum() == 3  # i = 0, 4 of the first part, 0 of the second
    assert len(master.snapshot()[0][1]) == 8  # a snapshot keeps the rows


def test_locust_run_writes_what_the_report_reads(tmp_path):
    from servebench.analysis.report import write_report

    run = LocustRun(tmp_path, "r1", options={"model": "m"})
    assert json.loads((run.path / "run.json").read_text())["status"] == "running"
    collector = RecordCollector()
    _fill(collector, 8)
    swarm = run.start_swarm()
    (row,) = run.add_swarm(swarm, collector.snapshot(), users=3)
    assert row["count"] == 8 and row["errors"] == 2 and row["load_level"] == 3
    _fill(collector, 4, start=3000.0)  # late records: the same trial, written again
    (again,) = run.add_swarm(swarm, collector.snapshot(), users=3)
    assert again["trial_id"] == row["trial_id"] and again["count"] == 12
    assert len(pd.read_csv(run.path / "trials.csv")) == 1
    run.finish()
    run_json = json.loads((run.path / "run.json").read_text())
    assert run_json["status"] == "complete" and run_json["source"] == "locust"
    assert pq.read_table(run.path / "records.parquet").num_rows == 12
    page = write_report(run.path).path.read_text()
    assert 'id="load-source"' in page and "closed-loop Locust users" in page


def test_run_without_swarms_says_so(tmp_path):
    run = LocustRun(tmp_path, "empty")
    run.finish()
    run_json = json.loads((run.path / "run.json").read_text())
    assert run_json["status"] == "interrupted" and run_json["reason"] == "no swarm ran"


def test_concatenated_chunks_keep_every_column():
    from servebench.locust.records import concat

    part = Chunk(*(np.arange(3, dtype=d) for d in ("i8", "f8", "f8", "f8", "i1", "i8", "i8")))
    merged = concat([part, part])
    assert len(merged) == 6 and merged.code.dtype == np.int8


# -- the launcher, without starting anything ---------------------------------------------


def test_setup_from_the_quickstart_scenario(tmp_path):
    scenario = ROOT / "scenarios" / "quickstart.yaml"
    setup = setup_from_scenario(scenario, None, tmp_path)
    assert setup.to_start is not None  # a local Triton to export and start
    assert setup.to_start.setting.server.server_kind.name == "triton-local"
    assert setup.target.protocol == "triton-http"
    assert (setup.target.model,) == tuple(spec.id for spec in setup.to_start.specs)
    assert setup.target.model.startswith("dense-")
    assert setup.target.batch_size == 1 and setup.target.link == "direct"
    setup = resolve(setup, {"host": "http://127.0.0.1:9", "link": "lte", "batch_size": None})
    assert setup.to_start is None  # an address given: nothing is started
    assert setup.target.link == "lte" and setup.target.batch_size == 1


def test_setup_takes_a_batch_size_its_settings_serve(tmp_path):
    """The scenario's first trial (plan.expand), not its first batch size: 8 is above the
    first combination's max_batch_size, so that combination's first trial has batch 2."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: ui-batch\n"
        "models: {specs: [{layer_type: dense, depth: 2, width: 16, input_shape: [8]}]}\n"
        "servers: [{name: t, kind: triton, launch: local, settings: {max_batch_size: [4, 16]}}]\n"
        "workload: {mode: closed, concurrency: [1], batch_sizes: [8, 2], duration_s: 1}\n"
        "links: [wifi]\n"
    )
    setup = setup_from_scenario(scenario, None, tmp_path)
    assert setup.to_start is not None and setup.to_start.setting.values["max_batch_size"] == 4
    assert setup.target.batch_size == 2 and setup.target.link == "wifi"
    assert setup.run_prefix == "ui-batch-locust"


def test_every_server_servebench_starts_is_started_as_a_run_starts_it(tmp_path):
    """A container server is started through its kind like a local one; a remote one is
    only addressed."""
    scenario = ROOT / "scenarios" / "tfs_vs_triton.yaml"
    for name, kind in (("tfs", "tfs-docker"), ("triton", "triton-docker")):
        setup = resolve(setup_from_scenario(scenario, name, tmp_path), {})
        assert setup.to_start is not None and setup.target.host == ""
        assert setup.to_start.setting.server.server_kind.name == kind
    remote = tmp_path / "remote.yaml"
    remote.write_text(
        "name: ui-remote\n"
        "models: {specs: [{layer_type: dense, depth: 2, width: 16, input_shape: [8]}]}\n"
        "servers: [{name: r, kind: tfs, launch: remote, url: 'http://127.0.0.1:9'}]\n"
        "workload: {mode: closed, concurrency: [1], duration_s: 1}\n"
    )
    setup = setup_from_scenario(remote, None, tmp_path)
    assert setup.to_start is None and setup.target.host == "http://127.0.0.1:9"
    assert setup.target.protocol == "tfs-rest"


def test_launcher_refuses_what_it_cannot_start(tmp_path):
    with pytest.raises(LaunchError, match="--host: give the server's address"):
        resolve(UiSetup(Target(model="m")), {})
    with pytest.raises(LaunchError, match="--model"):
        resolve(UiSetup(Target(host="http://h:1")), {})
    with pytest.raises(LaunchError, match=r"--server: .* has no server 'x'"):
        setup_from_scenario(ROOT / "scenarios" / "quickstart.yaml", "x", tmp_path)


def test_locust_command_line_binds_the_ui_to_loopback():
    argv = locust_argv(
        Target(host="http://h:1", model="m", protocol="triton-http"),
        results_dir=Path("out"), run_id="r", scenario=None, port=8089, headless=False,
        users=2, spawn_rate=1.0, run_time=None, extra=["--processes", "2"],
    )  # fmt: skip
    assert argv[argv.index("--web-host") + 1] == "127.0.0.1"
    assert argv[argv.index("--web-port") + 1] == "8089"
    assert argv[argv.index("--model") + 1] == "m" and argv[-2:] == ["--processes", "2"]
    assert "--headless" not in argv


def test_launcher_and_cli_do_not_import_locust():
    """`servebench ui` itself must not monkey-patch: it exports models and runs Triton."""
    code = (
        "import sys, servebench.cli, servebench.cli.ui_launcher, servebench.locust.launch;"
        "assert 'locust' not in sys.modules, 'locust imported';"
        "import gevent.monkey; assert not gevent.monkey.is_module_patched('socket')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_the_adapter_imports_no_application_layer():
    """servebench.locust sits under scenarios, servers and model export (DESIGN.md)."""
    import ast

    upward = ("servebench.scenario", "servebench.servers", "servebench.cli", "model_zoo")
    upward_dots = tuple(f"{name}." for name in upward)
    found = []
    for path in sorted((ROOT / "servebench" / "locust").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{path.name}: {n}" for n in names if n in upward or n.startswith(upward_dots)
            ]
    assert not found


def test_process_state_lives_on_each_environment():
    """No module-global state: each Environment gets its own, listening to its own events."""
    code = """
from locust.env import Environment
from servebench.locust.hooks import RECORD_KEY, process_state
from servebench.locust.users import TritonHttpUser

first, second = (Environment(user_classes=[TritonHttpUser]) for _ in range(2))
state = process_state(first)
assert process_state(first) is state and first.servebench is state
assert process_state(second) is not state
state.recording = True
record = (object(), 1.0, 1.5, None, 10, 20)
first.events.request.fire(context={RECORD_KEY: record})
second.events.request.fire(context={RECORD_KEY: record})
assert len(state.collector) == 1 and len(process_state(second).collector) == 0
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_one_link_emulator_per_process_and_profile(silent_server):
    """Every user of a process asking for the same link to the same server shares one proxy."""
    from servebench.locust.links import LinkPool

    pool = LinkPool()
    http = user_settings(SimpleNamespace(model="m", link="wifi"), f"http://{silent_server}")
    grpc = user_settings(
        SimpleNamespace(model="m", link="wifi", grpc_host=silent_server), None, "triton-grpc"
    )
    direct = user_settings(SimpleNamespace(model="m"), f"http://{silent_server}")
    try:
        first = pool.connect_url(http)
        assert pool.connect_url(http) == first  # the same emulator, not a second one
        assert first.startswith("http://127.0.0.1:") and first != f"http://{silent_server}"
        assert pool.connect_url(grpc) == first.removeprefix("http://")  # same link and server
        assert pool.connect_url(direct) == f"http://{silent_server}"  # nothing to emulate
    finally:
        stats = pool.stop_all()
    assert list(stats) == [f"wifi->{silent_server}"]


def test_a_link_profile_file_is_read_once_per_process(silent_server, tmp_path, monkeypatch):
    """Users starting and the swarm's rows all take the `--link` file's profile from one
    read (servebench.locust.settings.link_profile), relative to the working folder."""
    from servebench.locust.links import LinkPool
    from servebench.netem import profiles

    monkeypatch.chdir(tmp_path)
    Path("office.yaml").write_text("name: office-link\nrtt_s: 0.002\n")
    reads = []
    real = profiles.load_yaml
    monkeypatch.setattr(profiles, "load_yaml", lambda path: reads.append(path) or real(path))
    settings = user_settings(
        SimpleNamespace(model="m", link="office.yaml"), f"http://{silent_server}"
    )
    pool = LinkPool()
    try:
        first = pool.connect_url(settings)
        assert pool.connect_url(settings) == first != f"http://{silent_server}"
    finally:
        pool.stop_all()
    run = LocustRun(tmp_path / "results", "r1")
    collector = RecordCollector()
    office = Coordinates("http://h:1", "triton", "triton-http", "m", "", 2, "office.yaml")
    for swarm in (run.start_swarm(), run.start_swarm()):
        collector.add(office, 1000.0, 1000.01, None, 10, 20)
        (row,) = run.add_swarm(swarm, collector.snapshot(), users=1)
        assert row["link"] == "office-link" and row["link_rtt_s"] == 0.002
    assert len(reads) == 1, reads


def test_ui_hands_locust_the_scenarios_resolved_link(tmp_path):
    """A scenario's profile file reaches Locust as the profile the plan resolved, written
    out in the work folder; a built-in as its name."""
    from servebench.netem import resolve_link

    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "slow.yaml").write_text("down_mbps: 5\nrtt_s: 0.05\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: ui-link\n"
        "models: {specs: [{layer_type: dense, depth: 2, width: 16, input_shape: [8]}]}\n"
        "servers: [{name: t, kind: triton, launch: local, settings: {max_batch_size: 4}}]\n"
        "workload: {mode: closed, concurrency: [1], batch_sizes: [1], duration_s: 1}\n"
        "links: [links/slow.yaml, wifi]\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    setup = setup_from_scenario(scenario, None, work)
    handed = Path(setup.target.link)
    assert handed.parent == work  # not the scenario's file, read again
    assert resolve_link(str(handed)) == resolve_link("links/slow.yaml", tmp_path)
    assert resolve_link(str(handed)).name == "slow"
    given = resolve(setup, {"host": "http://127.0.0.1:9", "link": "wifi"})
    assert given.target.link == "wifi"


def test_ui_refuses_a_bad_link_before_locust_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setup = UiSetup(Target(host="http://127.0.0.1:9", model="m"))
    with pytest.raises(LaunchError, match=r"^--link: link '5g': not a built-in link"):
        resolve(setup, {"link": "5g"})
    with pytest.raises(LaunchError, match=r"^--link: profile file missing\.yaml: cannot read"):
        resolve(setup, {"link": "missing.yaml"})
    Path("mine.yml").write_text("rtt_s: 0.01\n")
    assert resolve(setup, {"link": "mine.yml"}).target.link == "mine.yml"
