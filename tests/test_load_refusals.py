"""`servebench load` refuses before it sends (issue 33): what it cannot run is one line,
exit 2, and no request reaches the server; what it can run without being told (a named
model's protocol, a served model's metrics page) it finds and says.

Against the real local Triton, whose own counters (`nv_inference_request_success` and
`_failure`, per model) say whether a request reached it, and a stand-in HTTP server that
counts the POSTs it is sent. The model whose input declares 1e9 float32 elements (3.7 GiB a
request) is a python-backend model that is loaded but never has to run.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from server_checks import StubHandler, http_stub, python_config, scaling_model, write_python_model
from typer.testing import CliRunner

from servebench.cli import app
from servebench.telemetry.prometheus import TRITON_PREFIXES, parse_metrics

HUGE_MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("never asked: servebench load refuses the request before it")
"""
# 1e9 float32 elements per sample: 3,815 MiB a request, over the 256 MiB default limit.
HUGE_CONFIG = python_config(8, 1000000000, 1)


def _repository(root: Path) -> Path:
    write_python_model(root / "echo", scaling_model(1), python_config(8, 4, 4))
    write_python_model(root / "huge", HUGE_MODEL, HUGE_CONFIG)
    return root


@pytest.fixture(scope="module")
def triton(local_triton_module, tmp_path_factory):
    repository = _repository(tmp_path_factory.mktemp("refusal-models"))
    return local_triton_module(repository, load_models=["echo", "huge"]).endpoints


def requests_reached(metrics_url: str, model: str) -> int:
    """Requests the server has counted for `model`, answered or failed."""
    with urllib.request.urlopen(metrics_url, timeout=5) as answer:
        page = answer.read().decode()
    return int(
        sum(
            r.value
            for r in parse_metrics(page, TRITON_PREFIXES)
            if r.metric in ("nv_inference_request_success", "nv_inference_request_failure")
            and r.labels.get("model") == model
        )
    )


def load(*args: str):
    return CliRunner().invoke(app, ["load", "--count", "10", "--concurrency", "1", *args])


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_named_model_is_sent_the_protocol_its_address_answers(triton, transport, tmp_path):
    """No --protocol: the address is asked once, the protocol said, and every request is
    the model's (before, plain http sent each to the bare URL and failed every one)."""
    url = triton.http_url if transport == "http" else triton.grpc_address
    before = requests_reached(triton.metrics_url, "echo")
    out = tmp_path / "summary.json"
    result = load("--url", url, "--model", "echo", "--json", str(out))
    assert result.exit_code in (0, 3), result.output  # 3: this loaded machine may lag
    assert f"protocol: triton-{transport} (what {url} answers" in result.output
    summary = json.loads(out.read_text())
    assert summary["count"] == summary["ok"] == 10
    assert requests_reached(triton.metrics_url, "echo") - before == 10


@pytest.mark.parametrize("protocol", [None, "triton-http", "triton-grpc"])
def test_a_request_over_the_size_limit_is_refused_before_sending(triton, protocol):
    """The served input's 1e9 elements are over limits.max_request_mb: one line naming the
    model, its input and the limit, before a payload is built (it was a 7.45 GiB
    allocation) and so before a request is sent."""
    url = triton.grpc_address if protocol == "triton-grpc" else triton.http_url
    chosen = ["--protocol", protocol] if protocol else []
    result = load("--url", url, "--model", "huge", *chosen)
    assert_one_line_error(
        result,
        "model 'huge': a request of batch 1 is 3,815 MiB",
        "input 'x' is [1000000000] float32 per sample",
        "must be <= 256 MiB, as a scenario's limits.max_request_mb",
    )
    assert requests_reached(triton.metrics_url, "huge") == 0


class _Counting(StubHandler):
    """Answers GETs with a page no model server gives, and counts the POSTs (the load's
    requests) it is sent."""

    protocol_version = "HTTP/1.1"
    posts = 0

    def do_GET(self) -> None:
        self.reply(200, b"<html>not a model server</html>", "text/html")

    def do_POST(self) -> None:
        self.read_body()
        type(self).posts += 1
        self.reply(200, b"{}", "application/json")


@pytest.fixture
def counting_server():
    _Counting.posts = 0
    with http_stub(_Counting) as url:
        yield url


def test_an_address_no_model_protocol_answers_is_refused_before_sending(counting_server):
    result = load("--url", counting_server, "--model", "m")
    assert_one_line_error(
        result,
        f"--protocol: {counting_server} answers none of the model protocols' questions",
        "triton-http, triton-grpc, tfs-rest, tfs-grpc",
        "Give --protocol",
    )
    assert _Counting.posts == 0


def test_a_local_gang_beyond_the_cores_is_refused_before_sending(counting_server):
    """One generator more than this machine's cores (Dask's count) is one line; with a
    --scheduler the cluster's workers are the bound, checked when it is reached."""
    from dask.system import CPU_COUNT

    n = CPU_COUNT + 1
    result = load("--url", f"{counting_server}/work", "--generators", str(n))
    assert_one_line_error(
        result,
        f"--generators {n}: a local gang runs a process per generator",
        f"this machine has {CPU_COUNT} core",
        f"give at most {CPU_COUNT}",
        "--scheduler tcp://HOST:PORT",
    )
    assert _Counting.posts == 0


def test_models_serve_prints_a_load_line_with_its_metrics_page(tmp_path):
    """`models serve` picks free ports, so its line names the metrics page (load would
    try :8002): run as printed, the summary has the server's side of each request."""
    repository = _repository(tmp_path / "repo")
    (repository / "huge").rename(tmp_path / "huge")  # one model: its line is the one
    serve = subprocess.Popen(
        [sys.executable, "-m", "servebench.cli", "models", "serve", str(repository)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        shown: list[str] = []
        line = _line_starting(serve, "load ", shown, timeout_s=120)
        command = shlex.split(line.removeprefix("load").strip())
        assert command[:2] == ["servebench", "load"], line
        assert "--protocol" in command and "--metrics-url" in command, line
        assert command[command.index("--model") + 1] == "echo"
        command[command.index("--duration") : command.index("--duration") + 2] = ["--count", "40"]
        result = CliRunner().invoke(app, command[1:])
        assert result.exit_code in (0, 3), result.output
        assert (
            "server request (ms)" in result.output and "server metrics: none" not in result.output
        )
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        serve.wait(timeout=60)


def _line_starting(proc: subprocess.Popen, prefix: str, shown: list[str], timeout_s: float) -> str:
    """The first line `proc` prints that starts with `prefix` (a reader thread, so a
    silent process fails the test after `timeout_s` instead of hanging it)."""
    found: list[str] = []

    def read() -> None:
        for text in proc.stdout:
            shown.append(text)
            if text.startswith(prefix):
                found.append(text.strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert found, f"no line starting {prefix!r} after {timeout_s} s:\n{''.join(shown)}"
    return found[0]
