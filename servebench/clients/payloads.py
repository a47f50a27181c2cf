"""A load's requests, built once before the run from the model's signature: one seeded
random batch, or the cycle through a file's samples (`input_data`).

The tensors are chosen here, the same way for every protocol, so that two protocols given
one seed or one file send the same tensors; only their encoding is the protocol's: an
`Encode` is a client's `InferenceClient.encode`, or a codec's `ModelCodec.encode` bound to
the signature (the Locust transports, which hold a codec and no client). Kept out of the
client protocol, so that a client is only an encoder and a sender, and a client with no
tensors (the raw `http` one) has nothing to refuse: a file's samples are refused here, for
a signature that names no inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from servebench.clients.base import ModelSignature, Payload, check_batch_size, random_inputs
from servebench.clients.input_data import InputData, Samples

#: What encodes a request: (batch size, the input tensors) -> its payload.
Encode = Callable[[int, Mapping[str, np.ndarray]], Payload]


def random_payload(
    encode: Encode, signature: ModelSignature, batch_size: int, seed: int = 0
) -> Payload:
    """The request for a seeded random batch; ValueError where the batch does not fit."""
    check_batch_size(signature, batch_size)
    return encode(batch_size, random_inputs(signature.inputs, batch_size, seed))


def data_payloads(
    encode: Encode, signature: ModelSignature, batch_size: int, data: InputData
) -> list[Payload]:
    """The requests of one cycle through a file's samples, each with the outputs its answer
    must have; InputDataError (a ValueError) where the file does not fit the signature."""
    return [
        replace(encode(batch_size, batch.inputs), expected=batch.expected)
        for batch in _samples(signature, batch_size, data).batches(batch_size)
    ]


def check_data(signature: ModelSignature, batch_size: int, data: InputData) -> None:
    """What `data_payloads` refuses, without encoding the cycle (the pre-run check)."""
    _samples(signature, batch_size, data).cycle(batch_size)


def build_payloads(
    encode: Encode,
    signature: ModelSignature,
    batch_size: int,
    seed: int,
    data: InputData | None = None,
) -> list[Payload]:
    """The requests a load cycles through: a file's samples (`data`), or one seeded random
    batch; ValueError where the batch or the data does not fit the model."""
    if data is None:
        return [random_payload(encode, signature, batch_size, seed)]
    return data_payloads(encode, signature, batch_size, data)


def _samples(signature: ModelSignature, batch_size: int, data: InputData) -> Samples:
    check_batch_size(signature, batch_size)
    if not signature.inputs:
        # Only the raw `http` client's signature names no tensors: it sends a fixed body.
        raise ValueError(
            f"{data.source}: input data needs a model protocol; protocol http sends its "
            "fixed body (--body, --body-file)"
        )
    return data.match(signature)
