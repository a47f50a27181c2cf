"""`servebench load` against the real local Triton: mistakes are one line, exit 2.

Each case is a command a user really types wrong (address, port, model, version,
protocol, output path); before, each printed a 44-103 line traceback. The summary of a
good load shows the server's own queue/compute split when its metrics page is known.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from servebench.cli import app

LOAD = ["load", "--count", "10", "--concurrency", "1"]


def invoke(*args: str):
    return CliRunner().invoke(app, [*LOAD, *args])


@pytest.fixture(scope="module")
def triton(triton_dense_model):
    ep = triton_dense_model.server.endpoints
    return ep.http_url, ep.grpc_address, triton_dense_model.name


def target(url: str, protocol: str, model: str = "{model}") -> list[str]:
    """The arguments that name the server and model `load` sends to."""
    return ["--url", url, "--protocol", protocol, "--model", model]


HTTP_MODEL = target("{http}", "triton-http")

# Each side of Triton: its protocol and how it says a model is missing.
SIDES = {"http": ("triton-http", "not found"), "grpc": ("triton-grpc", "NOT_FOUND")}

CASES = {
    # name: (arguments, what the line must say); {http}, {grpc}, {model} filled in
    **{
        f"wrong model, {side}": (
            target(f"{{{side}}}", protocol, "nope"),
            [f"{{{side}}}", "'nope'", missing],
        )
        for side, (protocol, missing) in SIDES.items()
    },
    **{
        f"unknown version, {side}": (
            [*target(f"{{{side}}}", protocol), "--model-version", "7"],
            [f"{{{side}}}", "version 7"],
        )
        for side, (protocol, _) in SIDES.items()
    },
    "gRPC on the HTTP port": (
        target("{http_hostport}", "triton-grpc"),
        ["{http_hostport}", "try --protocol triton-http"],
    ),
    "HTTP on the gRPC port": (
        target("http://{grpc}", "triton-http"),
        ["not HTTP/1.1", "try --protocol triton-grpc"],
    ),
    "TF Serving REST against Triton": (
        target("{http}", "tfs-rest"),
        ["/v1/models/", "HTTP 404", "try --protocol triton-http"],
    ),
    "records in a missing folder": (
        [*HTTP_MODEL, "--records", "{tmp}/missing/r.parquet"],
        ["--records", "{tmp}/missing does not exist"],
    ),
    "batch over the model's limit": (
        [*HTTP_MODEL, "--batch-size", "1000"],
        ["max_batch_size 64"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_wrong_input_is_one_line_naming_it(case: str, triton, tmp_path: Path):
    http, grpc, model = triton
    values = {
        "http": http,
        "grpc": grpc,
        "model": model,
        "http_hostport": http.removeprefix("http://"),
        "tmp": str(tmp_path),
    }
    args, expected = CASES[case]
    result = invoke(*(a.format(**values) for a in args))
    assert_one_line_error(result, *(e.format(**values) for e in expected))
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("protocol", ["triton-http", "triton-grpc", "http"])
def test_unreachable_address_is_one_line(protocol: str, closed_port: str):
    url = f"http://{closed_port}/x" if protocol == "http" else closed_port
    result = invoke("--url", url, "--protocol", protocol, "--model", "m")
    assert_one_line_error(result, closed_port, "connection refused", "is the server running")


def test_raw_http_to_a_triton_model_says_which_protocol_it_is(triton):
    http, _, model = triton
    result = invoke("--url", f"{http}/v2/models/{model}/infer", "--protocol", "http")
    assert result.exit_code == 3, result.output  # a run of HTTP 400s: INVALID
    assert "Traceback" not in result.output
    assert f"try --protocol triton-http --url {http} --model {model}" in result.output


def test_summary_shows_the_server_side_without_warm_up(triton_dense_model, tmp_path: Path):
    ep = triton_dense_model.server.endpoints
    out = tmp_path / "s.json"
    result = CliRunner().invoke(
        app,
        [
            *("load", "--url", ep.http_url, "--protocol", "triton-http"),
            *("--model", triton_dense_model.name, "--concurrency", "2", "--count", "200"),
            *("--warmup", "0.5", "--metrics-url", ep.metrics_url, "--json", str(out)),
        ],
    )
    assert result.exit_code in (0, 3), result.output
    for row in ("server request (ms)", "queue (ms)", "compute infer (ms)", "client - server"):
        assert row in result.output
    summary = json.loads(out.read_text())
    server = summary["server"]
    # Closed loop in one process: the first reading is taken with no request in flight and
    # before the first measured send, so the server counts this load's measured requests
    # (every one answered ok, perhaps one the client timed out on), never the warm-up's.
    assert summary["ok"] <= server["server_requests"] <= summary["count"], (server, summary)
    assert server["server_queue_s"] > 0 and server["server_compute_infer_s"] > 0
    assert server["server_request_s"] < summary["latency_mean"]
