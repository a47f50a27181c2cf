"""gRPC plumbing both gRPC clients share: channels, and unary calls on pre-serialized bytes.

The hot path sends a request serialized once, before the run (`request_serializer=None`
makes grpc pass the bytes through), and reads the response through a deserializer that
also returns the message's size: the byte counts in the records are then the protobuf
message sizes on the wire, without the 5-byte gRPC frame prefix and HTTP/2 framing. The
deserializer also notes when it was called — grpc.aio calls it once the whole message
has arrived, before the caller resumes — which starts the answer's "client receive" time.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any, NamedTuple

import grpc

# No message size limits: a batch of images easily passes gRPC's 4 MiB receive default.
# A local subchannel pool gives each channel its own TCP connection; with the global pool,
# channels with the same target and arguments would share one.
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
)


def open_channels(target: str, count: int) -> list[grpc.aio.Channel]:
    """`count` insecure channels to `target` (each one HTTP/2 connection)."""
    return [grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) for _ in range(count)]


def method_path(file_descriptor: Any, service: str, method: str) -> str:
    """`/package.Service/Method`, read from the generated proto's descriptor, not typed in."""
    full_name = file_descriptor.services_by_name[service].methods_by_name[method].full_name
    service_name, _, method_name = full_name.rpartition(".")
    return f"/{service_name}/{method_name}"


class Answer(NamedTuple):
    """A decoded response: its wire size, the message (None if undecodable), and the
    perf_counter time its bytes reached the deserializer."""

    size: int
    message: Any
    arrived: float


def sized_parser(message_class: Any) -> Callable[[bytes], Answer]:
    """A response deserializer that returns an `Answer`.

    grpc.aio answers None, after logging, when a deserializer raises; returning None here
    keeps the size and lets the client call it a bad response without the log noise.
    """
    parse = message_class.FromString

    def deserialize(data: bytes) -> Answer:
        arrived = perf_counter()
        try:
            return Answer(len(data), parse(data), arrived)
        except Exception:  # protobuf's DecodeError, or anything a corrupt message triggers
            return Answer(len(data), None, arrived)

    return deserialize


def raw_unary(channel: grpc.aio.Channel, path: str, response_class: Any) -> Any:
    """A unary callable taking serialized request bytes and returning an `Answer`.

    Its message is None when the answer's bytes do not parse as `response_class`.
    """
    return channel.unary_unary(
        path, request_serializer=None, response_deserializer=sized_parser(response_class)
    )
