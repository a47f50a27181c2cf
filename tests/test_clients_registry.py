"""The protocol registry is the one list of protocols, and codecs are the one wire format.

Every consumer (factory, scenario runner, Locust settings and transports, `servebench
load`, the sniffer) must see exactly the registry's protocols, and nothing outside
`servebench.clients` may keep a list, test a name's suffix or import a protocol's module.
The codec tests drive each protocol's request building and answer reading with canned
answers and no socket: the core both edges (async clients, Locust transports) share.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    ModelSignature,
    TensorSpec,
    random_inputs,
)
from servebench.clients.codec import GrpcCodec, HttpAnswer, HttpCodec, drive
from servebench.clients.factory import create_client
from servebench.clients.probe import default_metrics_url
from servebench.clients.registry import PROTOCOLS, for_server, model_protocols, names, protocol
from servebench.clients.tfs_rest import TfsRestCodec
from servebench.clients.triton_http import TritonHttpCodec
from servebench.locust import settings as locust_settings
from servebench.scenario.schema import ServerSection

ROOT = Path(__file__).resolve().parents[1] / "servebench"
CLIENTS = ROOT / "clients"
# The protocol modules of the registry (where its clients and their codecs are).
PROTOCOL_MODULES = {
    f"servebench.clients.{spec.client.partition(':')[0]}" for spec in PROTOCOLS.values()
}
# Where a model protocol's name may be written outside servebench.clients: the Locust
# user classes that each speak one protocol (public API), and Locust's default protocol.
NAME_ALLOWED = {"locust/users.py": 4, "locust/settings.py": 1}
# The one import of a protocol module outside servebench.clients: the choices of Locust's
# --tfs-request-format option, which only that protocol has.
IMPORT_ALLOWED = {("locust/settings.py", "servebench.clients.tfs_rest")}

SIGNATURE = ModelSignature(
    name="m",
    inputs=(TensorSpec("x", "float32", (3,)),),
    outputs=(TensorSpec("y", "float32", (2,)),),
    version="1",
)


def _outside_clients() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if CLIENTS not in p.parents]


# -- one list ------------------------------------------------------------------------------


def test_every_consumer_sees_the_registry_protocols():
    assert names() == sorted(PROTOCOLS)
    assert set(model_protocols()) == {n for n, s in PROTOCOLS.items() if s.codec_class()}
    assert model_protocols() == locust_settings.PROTOCOLS
    for name in names():  # the factory builds every one, without a connection
        create_client(name, "127.0.0.1:1" if name != "http" else "http://127.0.0.1:1", "m")
    with pytest.raises(ValueError, match=re.escape(", ".join(names()))):
        create_client("triton-rest", "127.0.0.1:1", "m")


def test_every_scenario_server_and_transport_has_exactly_one_protocol():
    kinds = get_args(ServerSection.model_fields["api"].annotation)
    transports = get_args(ServerSection.model_fields["protocol"].annotation)
    served = {(s.server, s.transport) for s in PROTOCOLS.values() if s.server is not None}
    assert served == {(k, t) for k in kinds for t in transports}
    assert len(served) == len(model_protocols())  # no pair claimed twice
    for kind in kinds:
        for transport in transports:
            spec = for_server(kind, transport)
            assert (spec.server, spec.transport) == (kind, transport)
    with pytest.raises(ValueError, match="'onnx'"):
        for_server("onnx", "http")


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_entries_agree_with_their_code(name):
    spec = protocol(name)
    codec = spec.codec_class()
    if codec is None:
        assert spec.server is None
        return
    assert issubclass(codec, HttpCodec if spec.transport == "http" else GrpcCodec)
    assert codec.probe_path  # the sniffer can ask an address about it
    assert spec.default_port is not None
    assert spec.accepts("request_format") == (name == "tfs-rest")


def test_default_metrics_page_comes_from_the_registry():
    for name, spec in PROTOCOLS.items():
        url = "127.0.0.1:9" if spec.transport == "grpc" else "http://127.0.0.1:9"
        found = default_metrics_url(name, url)
        expected = spec.metrics_port and f"http://127.0.0.1:{spec.metrics_port}/metrics"
        assert found == (expected or None), name


def test_no_protocol_list_outside_clients():
    """Protocol names are written only where NAME_ALLOWED says; no suffix tests on names."""
    counts: dict[str, int] = {}
    for path in _outside_clients():
        source = path.read_text()
        where = str(path.relative_to(ROOT))
        assert not re.search(r"\.(endswith|startswith)\(\"(grpc|triton|tfs)", source), where
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and node.value in model_protocols():
                counts[where] = counts.get(where, 0) + 1
    assert counts == NAME_ALLOWED


def test_no_protocol_module_is_imported_outside_clients():
    """Outside servebench.clients protocols are reached through the registry only."""
    found = set()
    for path in _outside_clients():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in PROTOCOL_MODULES:
                found.add((str(path.relative_to(ROOT)), node.module))
            if isinstance(node, ast.ImportFrom) and node.module == "servebench.clients":
                modules = {f"servebench.clients.{alias.name}" for alias in node.names}
                found |= {(str(path.relative_to(ROOT)), m) for m in modules & PROTOCOL_MODULES}
    assert found == IMPORT_ALLOWED


# -- the codecs, with no I/O ---------------------------------------------------------------


def _json(status: int, document: object) -> HttpAnswer:
    return HttpAnswer(status, json.dumps(document).encode(), {})


TRITON_METADATA = {
    "name": "m",
    "versions": ["1"],
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}


def test_triton_http_codec_reads_the_signature_from_canned_answers():
    codec = TritonHttpCodec("http://h:8000", "m")
    asked = []
    answers = iter(
        [_json(200, TRITON_METADATA), _json(200, {"max_batch_size": 8}), HttpAnswer(200, b"", {})]
    )

    def send(url):
        asked.append(str(url))
        return next(answers)

    signature = drive(codec.read_signature(), send)
    assert asked == [
        "http://h:8000/v2/models/m",
        "http://h:8000/v2/models/m/config",
        "http://h:8000/v2/models/m/ready",
    ]
    assert signature.inputs == SIGNATURE.inputs and signature.max_batch_size == 8


@pytest.mark.parametrize(
    ("answers", "kind", "words"),
    [
        ([_json(400, {"error": "Request for unknown model: 'm'"})], ErrorKind.HTTP_STATUS,
         "h:8000 model 'm': HTTP 400: Request for unknown model"),
        ([_json(200, TRITON_METADATA), _json(200, {}), HttpAnswer(400, b"", {})],
         ErrorKind.SERVER_ERROR, "not ready"),
        ([HttpAnswer(200, b"<html>", {})], ErrorKind.BAD_RESPONSE, "not JSON"),
    ],
)  # fmt: skip
def test_triton_http_codec_signature_failures_are_classified(answers, kind, words):
    answers = iter(answers)
    with pytest.raises(InferenceError) as caught:
        drive(TritonHttpCodec("h:8000", "m").read_signature(), lambda url: next(answers))
    assert caught.value.kind is kind
    assert words in str(caught.value)


def test_http_codec_answers_are_judged_the_same_for_every_edge():
    codec = TfsRestCodec("h:8501", "m")
    payload = codec.encode(SIGNATURE, 2, random_inputs(SIGNATURE.inputs, 2, seed=1))
    assert json.loads(payload.encoded.data)["instances"] == payload.inputs["x"].tolist()
    good = _json(200, {"predictions": [[1.0, 2.0], [3.0, 4.0]]})
    np.testing.assert_array_equal(
        codec.outputs(good, SIGNATURE.outputs, 2)["y"], [[1.0, 2.0], [3.0, 4.0]]
    )
    cases = [
        (_json(503, {"error": "overloaded"}), ErrorKind.HTTP_STATUS),
        (HttpAnswer(200, good.body, {"Content-Encoding": "gzip"}), ErrorKind.BAD_RESPONSE),
        (_json(200, {"predictions": [[1.0, 2.0]]}), ErrorKind.BAD_RESPONSE),  # one row of two
    ]
    for answer, kind in cases:
        with pytest.raises(InferenceError) as caught:
            codec.outputs(answer, SIGNATURE.outputs, 2)
        assert caught.value.kind is kind


def test_codecs_check_model_and_version_before_the_address():
    with pytest.raises(ValueError, match="model: a Triton model name is required"):
        TritonHttpCodec("not a url", "")
    with pytest.raises(ValueError, match="version: TF Serving versions are integers"):
        TfsRestCodec("h:8501", "m", version="latest")
