"""Real input data (`servebench load --input-data FILE`) against the real local Triton.

The model is the session's dense model; its expected outputs are computed here with the
torch module it was exported from, so an answer that matches came from exactly the sample
it was paired with: a load whose every answer matches its file's `expected/` arrays sent
the file's samples, each in its own place of the cycle (and one whose expected arrays are
shifted by one sample gets nothing but `wrong_answer`). The cycle's order is checked on
the payloads themselves. Files that do not fit the model are refused with one line before
any inference reaches the server (Triton's own statistics say how many it ran).
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from servebench.cli import app
from servebench.clients.base import ModelSignature, TensorSpec
from servebench.clients.factory import create_client
from servebench.clients.input_data import (
    ATOL,
    RTOL,
    InputData,
    InputDataError,
    answer_matches,
    read_input_data,
)
from servebench.clients.payloads import check_data, data_payloads
from servebench.clients.rawhttp import RawHttpClient
from servebench.telemetry.prometheus import PrometheusSampler

SAMPLES = 6


@pytest.fixture(scope="module")
def model(triton_dense_model):
    """The served model, its signature and `SAMPLES` inputs with their torch outputs."""
    import torch

    served = triton_dense_model
    client = create_client("triton-http", served.server.endpoints.http_url, served.name)

    async def read() -> ModelSignature:
        await client.connect()
        try:
            return await client.signature()
        finally:
            await client.close()

    signature = asyncio.run(read())
    (tensor,) = signature.inputs
    (output,) = signature.outputs
    x = np.random.default_rng(7).standard_normal((SAMPLES, *tensor.shape)).astype(np.float32)
    with torch.no_grad():
        y = served.module(torch.from_numpy(x)).numpy()
    return served, signature, tensor.name, output.name, x, y


def inferences(served) -> int:
    """How many inferences Triton has run for the model (its statistics extension)."""
    url = f"{served.server.endpoints.http_url}/v2/models/{served.name}/stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        stats = json.load(answer)
    return int(stats["model_stats"][0]["inference_count"])


def load(served, protocol: str, data: Path, *extra: str) -> tuple[object, dict]:
    ep = served.server.endpoints
    url = ep.http_url if protocol == "triton-http" else ep.grpc_address
    out = data.with_suffix(".summary.json")
    result = CliRunner().invoke(
        app,
        [
            "load",
            *("--url", url, "--protocol", protocol, "--model", served.name),
            *("--input-data", str(data), "--json", str(out), "--metrics-url", ""),
            *extra,
        ],
    )
    summary = json.loads(out.read_text()) if out.exists() else {}
    return result, summary


def test_requests_cycle_through_the_samples_in_order():
    """Batch b takes the next b samples, wrapping: 5 samples in batches of 2 make a cycle of
    5 distinct requests, each pre-encoded once."""
    spec = TensorSpec("x", "float32", (3,))
    signature = ModelSignature("m", (spec,), (TensorSpec("y", "float32", (1,)),))
    samples = np.arange(15, dtype=np.float32).reshape(5, 3)
    data = InputData("f.npz", 5, {"x": samples}, {})
    client = create_client("triton-http", "http://127.0.0.1:1", "m", signature=signature)
    payloads = data_payloads(client.encode, signature, 2, data)
    rows = [[int(r[0]) // 3 for r in p.inputs["x"]] for p in payloads]
    assert rows == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    assert len({id(p.encoded) for p in payloads}) == 5
    assert all(p.expected is None for p in payloads)


def test_a_client_with_no_tensors_refuses_input_data():
    """The raw `http` client sends its fixed body: its signature names no tensors to put a
    file's samples in, so the check and the build both refuse, before anything is sent."""
    client = RawHttpClient("http://127.0.0.1:1/")
    signature = asyncio.run(client.signature())
    data = InputData("f.npz", 1, {"x": np.zeros((1, 3), np.float32)}, {})
    with pytest.raises(ValueError, match=r"f\.npz: input data needs a model protocol"):
        check_data(signature, 1, data)
    with pytest.raises(ValueError, match=r"f\.npz: input data needs a model protocol"):
        data_payloads(client.encode, signature, 1, data)


def test_answers_match_within_allclose_bound_only():
    want = np.array([[1.0, -2.0]], np.float32)
    bound = ATOL + RTOL * np.abs(want)
    assert answer_matches({"y": want + bound * 0.5}, {"y": want})
    assert not answer_matches({"y": want + bound * 2}, {"y": want})
    assert not answer_matches({"y": np.full_like(want, np.nan)}, {"y": want})
    assert not answer_matches({"y": want[:, :1]}, {"y": want})  # another shape
    assert not answer_matches({}, {"y": want})  # output missing
    labels = np.array([3, 4], np.int64)
    assert answer_matches({"k": labels.copy()}, {"k": labels})
    assert not answer_matches({"k": labels + 1}, {"k": labels})  # integers: exactly


@pytest.mark.parametrize("protocol", ["triton-http", "triton-grpc"])
def test_npz_samples_reach_the_server_and_answers_are_checked(model, protocol, tmp_path):
    served, _, name, output, x, y = model
    good = tmp_path / "good.npz"
    np.savez(good, **{name: x, f"expected/{output}": y})
    result, summary = load(served, protocol, good, "--count", "12", "--concurrency", "2")
    assert result.exit_code == 0, result.output
    assert summary["ok"] == summary["count"] >= 12 and summary["errors_by_kind"] == {}

    # Expected outputs one sample off: every answer is someone else's.
    shifted = tmp_path / "shifted.npz"
    np.savez(shifted, **{name: x, f"expected/{output}": np.roll(y, 1, axis=0)})
    result, summary = load(
        served, protocol, shifted, "--count", "12", "--concurrency", "2", "--batch-size", "4"
    )
    assert result.exit_code == 3, result.output
    assert summary["ok"] == 0 and summary["errors_by_kind"] == {"wrong_answer": summary["count"]}
    assert "wrong_answer" in result.output


def test_perf_analyzer_json_with_b64_and_validation_data(model, tmp_path):
    """perf_analyzer's format: flat lists, `content`/`shape` and `b64`, with outputs."""
    served, signature, name, output, x, y = model
    steps, expected = [], []
    for i in range(SAMPLES):
        if i % 3 == 0:
            value = x[i].tolist()
        elif i % 3 == 1:
            value = {"content": x[i].tolist(), "shape": list(x[i].shape)}
        else:
            value = {"b64": base64.b64encode(x[i].astype("<f4").tobytes()).decode()}
        steps.append({name: value})
        expected.append({output: {"content": y[i].tolist(), "shape": list(y[i].shape)}})
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"data": steps, "validation_data": expected}))

    samples = read_input_data(path).match(signature)
    np.testing.assert_array_equal(samples.inputs[name], x)  # b64 bytes decode exactly
    result, summary = load(served, "triton-grpc", path, "--count", "12", "--concurrency", "1")
    assert result.exit_code == 0, result.output
    assert summary["ok"] == summary["count"] and summary["errors_by_kind"] == {}


def test_a_file_that_does_not_fit_the_model_is_refused_before_sending(model, tmp_path):
    served, _, name, _, x, _ = model
    cases = {
        "wrong name": ({"pixels": x}, ["'pixels' is not an input", "bad.npz"]),
        "wrong dtype": ({name: x.astype(np.float64)}, [repr(name), "float64", "float32"]),
        "wrong shape": ({name: x[:, :5]}, [repr(name), "[5]", f"[{x.shape[1]}]"]),
        "unknown output": ({name: x, "expected/nope": x}, ["'nope' is not an output"]),
    }
    # The earlier tests' last answers may not be counted yet (Triton counts a request just
    # after its answer left): read the count once the server's counters stop moving.
    assert PrometheusSampler(served.server.endpoints.metrics_url).wait_until_quiet()
    before = inferences(served)
    for arrays, words in cases.values():
        bad = tmp_path / "bad.npz"
        np.savez(bad, **arrays)
        for protocol in ("triton-http", "triton-grpc"):
            result, _ = load(served, protocol, bad, "--count", "5", "--concurrency", "1")
            assert_one_line_error(result, *words)
    steps = tmp_path / "bad.json"
    steps.write_text(json.dumps({"data": [{name: [1.0, 2.0]}]}))
    result, _ = load(served, "triton-http", steps, "--count", "5", "--concurrency", "1")
    assert_one_line_error(result, "bad.json", "data[0]", "2 values", f"[{x.shape[1]}]")
    assert inferences(served) == before


@pytest.mark.parametrize(
    "document, words",
    [
        ({"data": []}, ['"data"']),
        ({"data": [[{"x": [1.0]}]]}, ["data[0]", "sequence streams"]),
        ({"data": [{"x": {"b64": "not base64!"}}]}, ["data[0] 'x'", "base64"]),
        ({"data": [{"x": ["a"]}]}, ["data[0] 'x'", "numbers"]),
        ({"data": [{"x": [1.0]}], "validation_data": []}, ['"validation_data"']),
    ],
)
def test_unreadable_json_is_one_line(tmp_path, document, words):
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputDataError) as caught:
        read_input_data(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    for word in words:
        assert word in message, message


def test_protocol_http_has_no_tensors_for_input_data(tmp_path, closed_port):
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.zeros((2, 3), np.float32))
    result = CliRunner().invoke(
        app,
        [
            *("load", "--url", f"http://{closed_port}/", "--count", "1", "--concurrency", "1"),
            *("--input-data", str(path)),
        ],
    )
    assert_one_line_error(result, "inputs.npz", "model protocol")


@pytest.mark.parametrize("protocol", ["tfs-rest", "tfs-grpc"])
def test_tf_serving_protocols_send_the_samples(tfs_family, protocol, tmp_path):
    """The same file through TF Serving's REST and gRPC APIs (the test-only servicer that
    runs the exported SavedModel), answers checked against torch."""
    import torch

    model = next(m for m, spec in tfs_family.specs.items() if spec.layer_type == "dense")
    spec = tfs_family.specs[model]
    x = np.random.default_rng(3).standard_normal((SAMPLES, *spec.input_shape)).astype(np.float32)
    with torch.no_grad():
        y = tfs_family.modules[model](torch.from_numpy(x)).numpy()
    path = tmp_path / "samples.npz"
    np.savez(path, input=x, **{"expected/output": y})
    double = tfs_family.double
    url = double.rest_url if protocol == "tfs-rest" else double.grpc_address
    out = tmp_path / "summary.json"
    result = CliRunner().invoke(
        app,
        [
            *("load", "--url", url, "--protocol", protocol, "--model", model),
            *("--input-data", str(path), "--count", "8", "--concurrency", "2"),
            *("--batch-size", "4", "--json", str(out), "--metrics-url", ""),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["ok"] == summary["count"] >= 8 and summary["errors_by_kind"] == {}


def test_scenario_workload_inputs(model, tmp_path):
    """`workload.inputs` (relative to the scenario file) feeds a trial's requests, from one
    process or a gang: with the expected outputs one sample off, every answer lands in
    trials.csv as wrong_answer (the CLI tests show the same file with the right ones answers
    without errors). A file that cannot be read is a `file:line field` error before anything
    runs."""
    import pandas as pd
    from cluster_checks import remote_scenario

    from servebench.scenario.runner import ScenarioRunner
    from servebench.scenario.validate import ScenarioError, load_scenario

    served, _, name, output, x, y = model
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "shifted.npz", **{name: x, f"expected/{output}": np.roll(y, 1, 0)})
    text = remote_scenario("shifted", served, duration=0.5)
    path = tmp_path / "shifted.yaml"
    path.write_text(text.replace("workload:\n", "workload:\n  inputs: data/shifted.npz\n"))
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    (row,) = pd.read_csv(outcome.directory.path / "trials.csv").to_dict("records")
    assert row["status"] == "ok", row["reason"]
    assert row["count"] > 0 and json.loads(row["errors_by_kind"]) == {"wrong_answer": row["count"]}
    assert row["verdict"] == "INVALID"

    # A gang's generators send the same samples (each builds its own payloads from them).
    path.write_text(
        text.replace(
            "workload:\n", "workload:\n  inputs: data/shifted.npz\n  generators: {count: 2}\n"
        )
    )
    outcome = ScenarioRunner(path, output=tmp_path / "gang").run()
    (row,) = pd.read_csv(outcome.directory.path / "trials.csv").to_dict("records")
    assert row["status"] == "ok" and row["generators"] == 2, row["reason"]
    assert row["count"] > 0 and json.loads(row["errors_by_kind"]) == {"wrong_answer": row["count"]}

    path.write_text(text.replace("workload:\n", "workload:\n  inputs: data/none.npz\n"))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert "shifted.yaml:" in message and "workload.inputs" in message and "none.npz" in message
