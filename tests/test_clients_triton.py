"""Triton HTTP (JSON and binary tensors) and gRPC clients against the real local Triton."""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import numpy as np
import pytest
from client_checks import connect_error, errors_both_ways, infer_error, one_answer, random_request

from model_zoo.parity import run_torch
from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, TensorSpec
from servebench.clients.triton_grpc import TritonGrpcClient
from servebench.clients.triton_http import TritonHttpClient

VARIANTS = {
    "http-binary": lambda address, model, **kw: TritonHttpClient(
        f"http://{address}", model, binary_data=True, **kw
    ),
    "http-json": lambda address, model, **kw: TritonHttpClient(
        address, model, binary_data=False, **kw
    ),
    "grpc": lambda address, model, **kw: TritonGrpcClient(address, model, **kw),
    "grpc-2-channels": lambda address, model, **kw: TritonGrpcClient(
        f"grpc://{address}", model, channels=2, **kw
    ),
}


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    return request.param


def _address(served, variant: str) -> str:
    endpoints = served.server.endpoints
    return endpoints.http_address if variant.startswith("http") else endpoints.grpc_address


def _client(served, variant: str, **kwargs):
    return VARIANTS[variant](_address(served, variant), served.name, **kwargs)


def _signature(served) -> ModelSignature:
    return ModelSignature(
        name=served.name,
        inputs=(TensorSpec("input", "float32", (8,)),),
        outputs=(TensorSpec("output", "float32", (4,)),),
        version="1",
        max_batch_size=64,
    )


def _tolerance(reference: np.ndarray) -> float:
    return 1e-4 * max(1.0, float(np.abs(reference).max()))


@pytest.mark.parametrize("batch_size", [1, 7])
async def test_answers_match_torch(triton_dense_model, variant, batch_size):
    payload, result = await one_answer(_client(triton_dense_model, variant), batch_size, batch_size)
    reference = run_torch(triton_dense_model.module, payload.inputs["input"])
    answer = result.outputs["output"]
    assert answer.shape == (batch_size, 4) and answer.dtype == np.float32
    assert np.abs(answer - reference).max() <= _tolerance(reference)
    assert np.abs(reference).max() > 0
    assert result.request_bytes == payload.request_bytes > batch_size * 8 * 4 - 1
    assert result.response_bytes >= batch_size * 4 * 4


async def test_one_payload_serves_concurrent_requests(triton_dense_model, variant):
    """The payload is encoded once and only read: 16 requests in flight all get its answer."""
    client = _client(triton_dense_model, variant)
    await client.connect()
    try:
        payload = await random_request(client, 3, 11)
        encoded_before = payload.encoded
        results = await asyncio.gather(*(client.infer(payload) for _ in range(16)))
    finally:
        await client.close()
    assert payload.encoded is encoded_before
    first = results[0].outputs["output"]
    assert all(np.array_equal(r.outputs["output"], first) for r in results)


async def test_metadata_round_trip_gives_the_signature(triton_dense_model, variant):
    client = _client(triton_dense_model, variant)
    await client.connect()
    try:
        signature = await client.signature()
    finally:
        await client.close()
    assert signature == _signature(triton_dense_model)


async def test_binary_tensors_are_smaller_on_the_wire(triton_dense_model):
    sizes = {}
    for variant in ("http-binary", "http-json"):
        _, result = await one_answer(_client(triton_dense_model, variant), 32)
        sizes[variant] = (result.request_bytes, result.response_bytes)
    assert sizes["http-binary"][0] < sizes["http-json"][0]
    assert sizes["http-binary"][1] < sizes["http-json"][1]


async def test_batch_beyond_max_batch_size_is_refused_before_sending(triton_dense_model, variant):
    client = _client(triton_dense_model, variant)
    await client.connect()
    try:
        with pytest.raises(ValueError, match="max_batch_size 64"):
            await random_request(client, 65)
    finally:
        await client.close()


@pytest.mark.parametrize("change", [{"shape": (5,)}, {"dtype": "float64"}], ids=["shape", "dtype"])
async def test_wrong_answer_is_a_bad_response(triton_dense_model, variant, change):
    """An answer that differs from the expected signature never counts as a success.

    (A wrong output *name* is not tested here: the clients ask Triton for outputs by name,
    and Triton refuses the request with HTTP 400 / INVALID_ARGUMENT before answering.)
    """
    expected = _signature(triton_dense_model)
    wrong = dataclasses.replace(expected.outputs[0], **change)
    client = _client(
        triton_dense_model, variant, signature=dataclasses.replace(expected, outputs=(wrong,))
    )
    assert (await infer_error(client, 2)).kind is ErrorKind.BAD_RESPONSE


async def test_unknown_model_is_classified_and_named(triton_dense_model, variant):
    expected = ErrorKind.HTTP_STATUS if variant.startswith("http") else ErrorKind.GRPC_STATUS
    at_connect, at_infer = await errors_both_ways(
        functools.partial(
            VARIANTS[variant], _address(triton_dense_model, variant), "no-such-model"
        ),
        dataclasses.replace(_signature(triton_dense_model), name="no-such-model"),
    )
    assert at_connect.status in (400, 404, "NOT_FOUND")
    for error in (at_connect, at_infer):
        assert error.kind is expected
        assert "no-such-model" in str(error)


async def test_closed_port_is_connection_refused_naming_the_address(
    triton_dense_model, variant, closed_port
):
    for error in await errors_both_ways(
        functools.partial(VARIANTS[variant], closed_port, "m"), _signature(triton_dense_model)
    ):
        assert error.kind is ErrorKind.CONNECTION_REFUSED
        assert closed_port in str(error)


async def test_silent_server_is_a_timeout(triton_dense_model, variant, silent_server):
    client = VARIANTS[variant](
        silent_server, "m", signature=_signature(triton_dense_model), timeout=0.3
    )
    await client.connect()
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(InferenceError) as caught:
            await client.infer(await random_request(client, 1))
        waited = asyncio.get_running_loop().time() - started
    finally:
        await client.close()
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert silent_server in str(caught.value)
    assert 0.25 <= waited < 5.0


async def test_connect_times_out_on_a_silent_server(variant, silent_server):
    error = await connect_error(VARIANTS[variant](silent_server, "m", connect_timeout=0.3))
    assert error.kind is ErrorKind.TIMEOUT
    assert silent_server in str(error)


async def test_using_a_client_before_connect_is_a_client_error(triton_dense_model, variant):
    client = _client(triton_dense_model, variant, signature=_signature(triton_dense_model))
    payload_client = _client(triton_dense_model, variant, signature=_signature(triton_dense_model))
    payload = await random_request(payload_client, 1)
    with pytest.raises(InferenceError) as caught:
        await client.infer(payload)
    assert caught.value.kind is ErrorKind.CLIENT_ERROR


@pytest.mark.parametrize(
    ("factory", "kwargs", "field"),
    [
        (TritonHttpClient, {"url": "ftp://x:1"}, "url"),
        (TritonHttpClient, {"connections": 0}, "connections"),
        (TritonHttpClient, {"timeout": 0}, "timeout"),
        (TritonHttpClient, {"model": ""}, "model"),
        (TritonGrpcClient, {"url": "localhost"}, "url"),
        (TritonGrpcClient, {"channels": 0}, "channels"),
    ],
)
def test_bad_options_name_the_field(factory, kwargs, field):
    arguments = {"url": "127.0.0.1:8000", "model": "m", **kwargs}
    url, model = arguments.pop("url"), arguments.pop("model")
    with pytest.raises(ValueError, match=field):
        factory(url, model, **arguments)
