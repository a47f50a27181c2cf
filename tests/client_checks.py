"""What the model-client tests share: a seeded random request, one request's answer, and
the error a request or a connect ends in, each with the client closed afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from servebench.clients.base import InferenceError, ModelSignature, Payload
from servebench.clients.payloads import random_payload


async def random_request(client: Any, batch_size: int, seed: int = 0) -> Payload:
    """The request for a seeded random batch of the client's signature (`clients.payloads`),
    as a load builds it."""
    return random_payload(client.encode, await client.signature(), batch_size, seed)


async def one_answer(client: Any, batch_size: int, seed: int = 0) -> tuple[Any, Any]:
    """Connect, send one request of `batch_size`, close; (payload, result)."""
    await client.connect()
    try:
        payload = await random_request(client, batch_size, seed)
        return payload, await client.infer(payload)
    finally:
        await client.close()


async def infer_error(client: Any, batch_size: int = 1) -> InferenceError:
    """Connect, then the `InferenceError` one request of `batch_size` must end in."""
    await client.connect()
    try:
        with pytest.raises(InferenceError) as caught:
            await client.infer(await random_request(client, batch_size))
    finally:
        await client.close()
    return caught.value


async def connect_error(client: Any) -> InferenceError:
    """The `InferenceError` connecting must end in."""
    with pytest.raises(InferenceError) as caught:
        await client.connect()
    return caught.value


async def errors_both_ways(
    make: Callable[..., Any], signature: ModelSignature
) -> tuple[InferenceError, InferenceError]:
    """A client that asks the server for the model's signature fails at connect; one told the
    signature connects at once and fails at its first request (the hot path). Both errors,
    for the test to check they say the same."""
    return await connect_error(make()), await infer_error(make(signature=signature))
