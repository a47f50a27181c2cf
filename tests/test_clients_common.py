"""What the four inference clients share: addresses, error classification, signatures, registry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servebench.clients.base import ErrorKind, TensorSpec
from servebench.clients.endpoints import grpc_target, http_base
from servebench.clients.errors import grpc_failure, http_status
from servebench.clients.factory import create_client
from servebench.clients.registry import names
from servebench.clients.tfs_signature import tfs_signature
from servebench.clients.triton_signature import triton_signature


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://host:8000/", "http://host:8000"),
        ("https://host/prefix/", "https://host/prefix"),
    ],
)
def test_http_base(url, expected):
    assert str(http_base(url)) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("127.0.0.1:8001", "127.0.0.1:8001"),
        ("grpc://host:8500/", "host:8500"),
        ("http://[::1]:8500", "[::1]:8500"),
    ],
)
def test_grpc_target(url, expected):
    assert grpc_target(url) == expected


@pytest.mark.parametrize("url", ["ftp://host:1", "http://host:1/?q=1", "http://:80"])
def test_bad_http_url_is_named(url):
    with pytest.raises(ValueError, match="url"):
        http_base(url)


@pytest.mark.parametrize("url", ["host", "https://host:1", "host:1/path", "grpc://:1"])
def test_bad_grpc_address_is_named(url):
    with pytest.raises(ValueError, match="url"):
        grpc_target(url)


@pytest.mark.parametrize(
    ("code", "details", "kind"),
    [
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", ErrorKind.TIMEOUT),
        (
            "StatusCode.UNAVAILABLE",
            "ipv4:127.0.0.1:1: Connection refused",
            ErrorKind.CONNECTION_REFUSED,
        ),
        ("UNAVAILABLE", "Socket closed", ErrorKind.CONNECTION_RESET),
        ("UNAVAILABLE", "Connection reset by peer", ErrorKind.CONNECTION_RESET),
        ("UNAVAILABLE", "model is loading", ErrorKind.GRPC_STATUS),
        ("NOT_FOUND", "unknown model", ErrorKind.GRPC_STATUS),
    ],
)
def test_grpc_status_classification(code, details, kind):
    error = grpc_failure(code, details, "host:1")
    assert error.kind is kind
    assert "host:1" in str(error)


def test_http_status_carries_the_servers_message():
    error = http_status(
        404, b'{ "error": "Servable not found for request: Latest(m)" }', "http://h/x"
    )
    assert error.kind is ErrorKind.HTTP_STATUS and error.status == 404
    assert "Latest(m)" in str(error) and "http://h/x" in str(error)
    assert "bad gateway" in str(http_status(502, b"bad gateway", "http://h/x"))


def test_triton_signature_from_grpc_json_and_http_json():
    http = {"name": "m", "versions": ["1", "3"], "inputs": [{"name": "x", "datatype": "INT64", "shape": [-1, 2, 3]}],
            "outputs": [{"name": "y", "datatype": "FP16", "shape": [-1, 5]}]}  # fmt: skip
    grpc = {**http, "inputs": [{"name": "x", "datatype": "INT64", "shape": ["-1", "2", "3"]}],
            "outputs": [{"name": "y", "datatype": "FP16", "shape": ["-1", "5"]}]}  # fmt: skip
    for metadata in (http, grpc):
        signature = triton_signature(metadata, {"max_batch_size": 8})
        assert signature.inputs == (TensorSpec("x", "int64", (2, 3)),)
        assert signature.outputs == (TensorSpec("y", "float16", (5,)),)
        assert (signature.version, signature.max_batch_size) == ("3", 8)
    # Without Triton batching the leading -1 is the model's own batch dimension...
    assert triton_signature(http, {}).inputs[0].shape == (2, 3)
    # ...and a model without one cannot take batches.
    fixed = {**http, "inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 3]}]}
    with pytest.raises(ValueError, match=r"'x'.*no batch dimension"):
        triton_signature(fixed, {})


def test_tfs_signature_refuses_what_cannot_be_batched():
    def info(*sizes, dtype="DT_FLOAT"):
        return {"dtype": dtype, "tensor_shape": {"dim": [{"size": str(s)} for s in sizes]}}

    defs = {"signature_def": {"serving_default": {"inputs": {"a": info(-1, 3), "b": info(-1)},
            "outputs": {"o": info(-1, -1, dtype="DT_INT32")}}}}  # fmt: skip
    signature = tfs_signature("m", defs, version="2")
    assert signature.inputs == (TensorSpec("a", "float32", (3,)), TensorSpec("b", "float32", ()))
    assert signature.outputs == (TensorSpec("o", "int32", (-1,)),)
    defs["signature_def"]["serving_default"]["inputs"]["a"] = info(1, 3)
    with pytest.raises(ValueError, match=r"'a'.*no dynamic batch dimension"):
        tfs_signature("m", defs)
    defs["signature_def"]["serving_default"]["inputs"]["a"] = info(-1, dtype="DT_STRING")
    with pytest.raises(ValueError, match=r"'a'.*DT_STRING"):
        tfs_signature("m", defs)


def test_registry_builds_every_client_without_loading_tensorflow():
    """Building clients (as the CLI does to validate options) must not import TensorFlow."""
    assert {"triton-http", "triton-grpc", "tfs-rest", "tfs-grpc"} <= set(names())
    code = (
        "import sys\n"
        "from servebench.clients.factory import create_client\n"
        "for protocol in ('triton-http', 'triton-grpc', 'tfs-rest', 'tfs-grpc'):\n"
        "    create_client(protocol, '127.0.0.1:1', 'm', version='1', timeout=1.0)\n"
        "print(sorted(m for m in ('tensorflow', 'tensorflow_serving') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_registry_reports_bad_options():
    with pytest.raises(ValueError, match="request_format"):
        create_client("tfs-rest", "127.0.0.1:1", "m", request_format="rows")
    with pytest.raises(ValueError, match="bad client option"):
        create_client("triton-grpc", "127.0.0.1:1", "m", connections=4)
