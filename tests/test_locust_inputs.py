"""Locust users and `servebench ui` sending the user's own input data (`--input-data`,
a scenario's `workload.inputs`), in real headless Locust runs against the local Triton.

The expected outputs are computed with the torch module the served model was exported
from, so an answer that matches came from exactly the sample it was paired with: a run
whose every answer matches sent the file's samples, each in its place of the cycle; the
same file with its expected outputs shifted by one sample gets nothing but `wrong_answer`
failures, in Locust's statistics and in servebench's records. A file that does not fit
the model is one failure message (and a non-zero exit), never an exception per request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from cli_checks import assert_one_line_error
from cluster_checks import remote_scenario
from test_locust import _env, check_clean_run, run_locust
from typer.testing import CliRunner

from servebench.cli import app

SAMPLES = 6


@pytest.fixture(scope="module")
def samples(triton_dense_model):
    """The served model, `SAMPLES` inputs and the outputs its torch module gives them."""
    import torch

    served = triton_dense_model
    x = np.random.default_rng(11).standard_normal((SAMPLES, *served.spec.served_input_shape))
    x = x.astype(np.float32)
    with torch.no_grad():
        y = served.module(torch.from_numpy(x)).numpy()
    return served, x, y


def _write(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    np.savez(path, input=x, **{"expected/output": y})
    return path


def test_users_send_the_files_samples_and_check_the_answers(samples, tmp_path):
    served, x, y = samples
    good = _write(tmp_path / "good.npz", x, y)
    http = served.server.endpoints.http_url
    # Batches of 4 through 6 samples: a cycle of 3 distinct requests, two wrapping round.
    outcome = run_locust(
        tmp_path, "TritonHttpUser", "--host", http, "--model", served.name,
        "--batch-size", "4", "--input-data", str(good), stop_after=12,
    )  # fmt: skip
    check_clean_run(outcome, f"{served.name} b4 triton-http", batch_size=4)
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["locust"]["input_data"] == str(good)

    shifted_dir = tmp_path / "shifted"
    shifted_dir.mkdir()
    shifted = _write(shifted_dir / "shifted.npz", x, np.roll(y, 1, axis=0))
    outcome = run_locust(
        shifted_dir, None, "--grpc-host", served.server.endpoints.grpc_address,
        "--protocol", "triton-grpc", "--model", served.name, "--batch-size", "2",
        "--input-data", str(shifted), stop_after=12,
    )  # fmt: skip
    entry = outcome.entry(f"{served.name} b2 triton-grpc")
    assert entry["num_requests"] >= 12
    assert entry["num_failures"] == entry["num_requests"]
    assert outcome.returncode == 1  # Locust's exit code when requests failed
    (error,) = outcome.errors()
    assert f"wrong_answer: the answer differs from {shifted}'s expected outputs" in error
    row = outcome.trials().iloc[0]
    assert json.loads(row["errors_by_kind"]) == {"wrong_answer": entry["num_requests"]}
    frame = outcome.records().to_pandas()
    assert (frame["error_kind"] == "wrong_answer").all()
    assert (frame["response_bytes"] > 0).all()  # answered, with other values than expected


def test_a_file_that_does_not_fit_is_one_error_before_any_request(samples, tmp_path):
    served, x, y = samples
    bad = _write(tmp_path / "narrow.npz", x[:, :3], y)
    outcome = run_locust(
        tmp_path, "TritonHttpUser", "--host", served.server.endpoints.http_url,
        "--model", served.name, "--input-data", str(bad), users=2, stop_after=2,
    )  # fmt: skip
    assert outcome.returncode != 0
    (error,) = outcome.errors()  # every user's try, one message
    assert (
        f"client_error: --input-data {bad}: input 'input' has per-sample shape [3], "
        f"the model's is {list(served.spec.served_input_shape)}"
    ) in error
    frame = outcome.records().to_pandas()
    assert (frame["error_kind"] == "client_error").all()
    assert (frame["request_bytes"] == 0).all()  # nothing was sent

    # `servebench ui` refuses it in one line, before Locust starts.
    result = CliRunner().invoke(
        app,
        [
            "ui", "--host", served.server.endpoints.http_url, "--model", served.name,
            "--input-data", str(bad), "--headless", "-t", "1s",
            "--results", str(tmp_path / "ui-results"),
        ],
    )  # fmt: skip
    assert_one_line_error(result, f"--input-data {bad}", "input 'input' has per-sample shape")
    assert not (tmp_path / "ui-results").exists()


def test_ui_from_a_scenario_sends_its_workload_inputs(samples, tmp_path):
    """The scenario's `workload.inputs` (relative to the scenario file) reaches the users:
    with its expected outputs one sample off, every request is a wrong answer."""
    served, x, y = samples
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "shifted.npz", x, np.roll(y, 1, axis=0))
    scenario = tmp_path / "inputs.yaml"
    scenario.write_text(
        remote_scenario("inputs", served).replace(
            "workload:\n", "workload:\n  inputs: data/shifted.npz\n"
        )
    )
    proc = subprocess.run(
        [
            sys.executable, "-c", "from servebench.cli import main; main()", "ui",
            str(scenario), "--headless", "-u", "2", "-t", "2s",
            "--results", str(tmp_path / "results"),
        ],
        capture_output=True, text=True, timeout=180, env=_env(), cwd=tmp_path / "data",
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]  # Locust's exit code when requests failed
    assert f"input data {tmp_path / 'data' / 'shifted.npz'}" in proc.stdout
    (run_dir,) = (tmp_path / "results").iterdir()
    row = pd.read_csv(run_dir / "trials.csv").iloc[0]
    assert row["count"] > 0
    assert json.loads(row["errors_by_kind"]) == {"wrong_answer": row["count"]}


def test_users_of_a_process_share_one_cycle_in_the_files_order(tmp_path, closed_port):
    """Two users with the same settings get one `Prepared` and take turns on its cycle: the
    process sends the file's samples in order; a new swarm (the cache cleared) starts at
    the first sample. The signature comes from a file, so no server is asked."""
    from servebench.locust.settings import user_settings
    from servebench.locust.transport import PayloadCache, open_transport

    signature = tmp_path / "sig.json"
    tensor = {"dtype": "float32", "shape": [1]}
    signature.write_text(
        json.dumps(
            {
                "inputs": [{"name": "x", **tensor}],
                "outputs": [{"name": "y", **tensor}],
                "max_batch_size": 8,
            }
        )
    )
    data = tmp_path / "five.npz"
    np.savez(data, x=np.arange(5, dtype=np.float32).reshape(5, 1))
    options = SimpleNamespace(
        model="m", batch_size=2, signature=str(signature), input_data=str(data)
    )
    url = f"http://{closed_port}"
    settings = user_settings(options, url)
    transport = open_transport(settings, url)
    cache = PayloadCache()
    try:
        first, second = (cache.get(settings, url, transport) for _ in range(2))
        assert first is second and first.source == str(data)
        sent = [(first if i % 2 else second).next_payload() for i in range(7)]
        rows = [payload.inputs["x"][:, 0].astype(int).tolist() for payload in sent]
        assert rows == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4], [0, 1], [2, 3]]
        cache.clear()
        again = cache.get(settings, url, transport).next_payload()
        assert again.inputs["x"][:, 0].tolist() == [0, 1]
    finally:
        transport.close()
