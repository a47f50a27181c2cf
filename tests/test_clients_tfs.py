"""TF Serving REST (row and columnar) and gRPC clients against the TF Serving protocol double.

The double (tests/tfs_protocol_server.py) speaks TF Serving's REST paths and gRPC protos
and runs the exported SavedModels with TensorFlow; answers are compared with torch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json

import numpy as np
import pytest
from aiohttp import web
from client_checks import connect_error, errors_both_ways, infer_error, one_answer, random_request
from conftest import serving

from model_zoo.parity import run_torch
from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, TensorSpec
from servebench.clients.tfs_grpc import TfsGrpcClient
from servebench.clients.tfs_rest import TfsRestClient

VARIANTS = {
    "rest-row": lambda address, model, **kw: TfsRestClient(
        f"http://{address}", model, request_format="row", **kw
    ),
    "rest-columnar": lambda address, model, **kw: TfsRestClient(
        address, model, request_format="columnar", **kw
    ),
    "grpc": lambda address, model, **kw: TfsGrpcClient(address, model, **kw),
}


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    return request.param


def _address(family, variant: str) -> str:
    double = family.double
    return (
        double.rest_url.removeprefix("http://")
        if variant.startswith("rest")
        else double.grpc_address
    )


def _client(family, variant: str, model: str, **kwargs):
    return VARIANTS[variant](_address(family, variant), model, **kwargs)


def _expected_signature(family, model: str) -> ModelSignature:
    spec = family.specs[model]
    return ModelSignature(
        name=model,
        inputs=(TensorSpec("input", "float32", tuple(spec.served_input_shape)),),
        outputs=(TensorSpec("output", "float32", (spec.num_outputs,)),),
        version="1",
        max_batch_size=0,
    )


def _models(family) -> list[str]:
    return sorted(family.specs)


@pytest.mark.parametrize("batch_size", [1, 6])
@pytest.mark.parametrize("version", [None, "1"])
async def test_answers_match_torch(tfs_family, variant, batch_size, version):
    for model in _models(tfs_family):
        client = _client(tfs_family, variant, model, version=version)
        payload, result = await one_answer(client, batch_size, seed=batch_size)
        reference = run_torch(tfs_family.modules[model], payload.inputs["input"])
        answer = result.outputs["output"]
        assert answer.shape == reference.shape == (batch_size, tfs_family.specs[model].num_outputs)
        assert answer.dtype == np.float32
        assert np.abs(reference).max() > 0
        assert np.abs(answer - reference).max() <= 1e-4 * max(1.0, float(np.abs(reference).max()))
        assert result.request_bytes == payload.request_bytes > 0
        assert result.response_bytes > 0


async def test_rest_row_and_columnar_bodies_follow_the_rest_api(tfs_family):
    model = _models(tfs_family)[0]
    bodies = {}
    for request_format in ("row", "columnar"):
        client = TfsRestClient(tfs_family.double.rest_url, model, request_format=request_format)
        await client.connect()
        try:
            payload = await random_request(client, 2, 3)
            bodies[request_format] = json.loads(payload.encoded.data)
            await client.infer(payload)
        finally:
            await client.close()
    inputs = payload.inputs["input"].tolist()
    assert bodies["row"] == {"signature_name": "serving_default", "instances": inputs}
    assert bodies["columnar"] == {"signature_name": "serving_default", "inputs": {"input": inputs}}


async def test_one_payload_serves_concurrent_requests(tfs_family, variant):
    model = _models(tfs_family)[0]
    client = _client(tfs_family, variant, model)
    await client.connect()
    try:
        payload = await random_request(client, 3, 5)
        results = await asyncio.gather(*(client.infer(payload) for _ in range(12)))
    finally:
        await client.close()
    first = results[0].outputs["output"]
    assert all(np.array_equal(r.outputs["output"], first) for r in results)


async def test_metadata_round_trip_gives_the_signature(tfs_family, variant):
    for model in _models(tfs_family):
        client = _client(tfs_family, variant, model)
        await client.connect()
        try:
            assert await client.signature() == _expected_signature(tfs_family, model)
        finally:
            await client.close()


async def test_unknown_signature_name_is_refused_naming_it(tfs_family, variant):
    client = _client(tfs_family, variant, _models(tfs_family)[0], signature_name="classify_me")
    with pytest.raises(ValueError, match=r"classify_me.*serving_default"):
        await client.connect()


@pytest.mark.parametrize("change", [{"shape": (5,)}, {"dtype": "int32"}], ids=["shape", "dtype"])
async def test_wrong_answer_is_a_bad_response(tfs_family, variant, change):
    """An answer that differs from the expected signature never counts as a success.

    REST JSON carries no dtype, so there a float answer for an int output is what can be
    caught (float32 vs float64 cannot be told apart in JSON).
    """
    await _expect_bad_response(tfs_family, variant, change)


async def test_grpc_wrong_output_name_is_a_bad_response(tfs_family):
    """Only gRPC can check names: TF Serving's REST answer omits a single output's name."""
    await _expect_bad_response(tfs_family, "grpc", {"name": "logits"})


async def _expect_bad_response(family, variant: str, change: dict) -> None:
    model = _models(family)[0]
    expected = _expected_signature(family, model)
    wrong = dataclasses.replace(expected.outputs[0], **change)
    client = _client(
        family, variant, model, signature=dataclasses.replace(expected, outputs=(wrong,))
    )
    assert (await infer_error(client, 2)).kind is ErrorKind.BAD_RESPONSE


async def test_unknown_model_is_classified_and_named(tfs_family, variant):
    expected = ErrorKind.HTTP_STATUS if variant.startswith("rest") else ErrorKind.GRPC_STATUS
    at_connect, at_infer = await errors_both_ways(
        functools.partial(_client, tfs_family, variant, "no-such-model"),
        _expected_signature(tfs_family, _models(tfs_family)[0]),
    )
    assert at_connect.status in (404, "NOT_FOUND")
    for error in (at_connect, at_infer):
        assert error.kind is expected
        assert "no-such-model" in str(error)


async def test_unknown_version_is_classified(tfs_family, variant):
    error = await connect_error(_client(tfs_family, variant, _models(tfs_family)[0], version="7"))
    assert error.status in (404, "NOT_FOUND")
    assert "7" in str(error)


async def test_closed_port_is_connection_refused_naming_the_address(
    tfs_family, variant, closed_port
):
    for error in await errors_both_ways(
        functools.partial(VARIANTS[variant], closed_port, "m"),
        _expected_signature(tfs_family, _models(tfs_family)[0]),
    ):
        assert error.kind is ErrorKind.CONNECTION_REFUSED
        assert closed_port in str(error)


async def test_slow_answer_past_the_timeout_is_a_timeout(tfs_family, variant):
    model = _models(tfs_family)[0]
    client = _client(tfs_family, variant, model, timeout=0.2)
    await client.connect()
    tfs_family.double.delay = 1.0
    try:
        with pytest.raises(InferenceError) as caught:
            await client.infer(await random_request(client, 1))
    finally:
        tfs_family.double.delay = 0.0
        await client.close()
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert _address(tfs_family, variant) in str(caught.value)


async def test_silent_server_is_a_timeout(tfs_family, variant, silent_server):
    signature = _expected_signature(tfs_family, _models(tfs_family)[0])
    error = await infer_error(
        VARIANTS[variant](silent_server, "m", signature=signature, timeout=0.3)
    )
    assert error.kind is ErrorKind.TIMEOUT
    assert silent_server in str(error)


# -- REST answers that are not what TF Serving would send --------------------------------

CANNED = {
    "not-json": (200, b"<html>proxy error</html>", ErrorKind.BAD_RESPONSE),
    "error-body": (200, b'{"error": "model crashed"}', ErrorKind.SERVER_ERROR),
    "wrong-shape": (200, b'{"predictions": [[1.5, 2.5]]}', ErrorKind.BAD_RESPONSE),
    "strings": (200, b'{"predictions": [["a", "b", "c", "d"]]}', ErrorKind.BAD_RESPONSE),
    "ragged": (200, b'{"predictions": [[1, 2, 3, 4], [1]]}', ErrorKind.BAD_RESPONSE),
    "no-predictions": (200, b'{"outputs": [[1, 2, 3, 4]]}', ErrorKind.BAD_RESPONSE),
    "status-503": (503, b"", ErrorKind.HTTP_STATUS),
}


@pytest.mark.parametrize("case", list(CANNED))
async def test_rest_answers_are_checked(case):
    status, body, kind = CANNED[case]

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/models/m:predict", answer)
    signature = ModelSignature(
        name="m",
        inputs=(TensorSpec("input", "float32", (2,)),),
        outputs=(TensorSpec("output", "float32", (4,)),),
    )
    async with serving(app) as port:
        client = TfsRestClient(f"127.0.0.1:{port}", "m", signature=signature)
        error = await infer_error(client, 2 if case == "ragged" else 1)
    assert error.kind is kind
    if kind is ErrorKind.HTTP_STATUS:
        assert error.status == status


def test_sniff_probe_is_the_status_method_the_protos_name():
    """The probe path is typed in (sniffing imports no TensorFlow): check it against them."""
    from servebench.clients.tfs_grpc import TfsGrpcCodec, load_apis

    assert TfsGrpcCodec.probe_path == load_apis().status_path


# -- TensorProto encoding against TensorFlow's own ----------------------------------------


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "int8", "int32", "int64", "uint8", "bool"]
)
def test_tensor_protos_agree_with_tensorflow(dtype):
    import tensorflow as tf

    from servebench.clients.tensor_proto import from_tensor_proto, to_tensor_proto

    array = (np.arange(24).reshape(2, 3, 4) % 7 - 3).astype(dtype)
    np.testing.assert_array_equal(tf.make_ndarray(to_tensor_proto(array)), array)
    decoded = from_tensor_proto(tf.make_tensor_proto(array))
    assert decoded.dtype == array.dtype
    np.testing.assert_array_equal(decoded, array)


def test_tensor_proto_typed_fields_and_bad_content():
    import tensorflow as tf

    from servebench.clients.tensor_proto import from_tensor_proto

    proto = tf.make_tensor_proto(np.zeros((2, 2), np.float32))
    proto.ClearField("tensor_content")
    proto.float_val.extend([1.0, 2.0])  # TF: repeat the last value
    np.testing.assert_array_equal(from_tensor_proto(proto), [[1, 2], [2, 2]])
    proto = tf.make_tensor_proto(np.zeros((2, 2), np.float32))
    proto.tensor_content = proto.tensor_content[:-1]
    with pytest.raises(ValueError, match="15 bytes"):
        from_tensor_proto(proto)
    with pytest.raises(ValueError, match="DT_STRING"):
        from_tensor_proto(tf.make_tensor_proto(np.array([b"x"])))


@pytest.mark.parametrize(
    ("factory", "kwargs", "field"),
    [
        (TfsRestClient, {"request_format": "rows"}, "request_format"),
        (TfsRestClient, {"version": "latest"}, "version"),
        (TfsRestClient, {"url": "grpc://x:1"}, "url"),
        (TfsGrpcClient, {"version": "v1"}, "version"),
        (TfsGrpcClient, {"url": "http://x"}, "url"),
        (TfsGrpcClient, {"timeout": -1}, "timeout"),
    ],
)
def test_bad_options_name_the_field(factory, kwargs, field):
    arguments = {"url": "127.0.0.1:8500", "model": "m", **kwargs}
    url, model = arguments.pop("url"), arguments.pop("model")
    with pytest.raises(ValueError, match=field):
        factory(url, model, **arguments)
