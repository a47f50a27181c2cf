"""The async edge of both gRPC model protocols (Triton gRPC, TF Serving gRPC).

Both send a request serialized once per payload on their own connections, round-robin,
and classify failures the same way; what the requests hold and how answers are read is the
codec's (`codec.GrpcCodec`). Sharing the hot path keeps the two protocols' overheads
alike, which is what makes their figures comparable. The bytes move on one of two
transports: `lean_grpc` (the default: unary calls on cleartext HTTP/2, about 3x grpcio's
calls per core) or grpc.aio (`transport="grpcio"`, the reference implementation).
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any, ClassVar

import grpc

from servebench.clients.base import ErrorKind, InferenceError, InferResult, Payload
from servebench.clients.codec import GrpcCall, GrpcCodec
from servebench.clients.errors import grpc_failure
from servebench.clients.grpc_calls import Answer, open_channels, raw_unary, sized_parser
from servebench.clients.lean_grpc import TRANSPORTS, LeanGrpcPool
from servebench.clients.model_client import ModelClient


def choose_transport(transport: str) -> str:
    """`lean` or `grpcio`; ValueError naming the choices otherwise."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport: {transport!r} is not one of {', '.join(TRANSPORTS)}")
    return "lean" if transport == "auto" else transport


class GrpcModelClient(ModelClient):
    """A model client over gRPC: a codec, channels, round-robin unary calls, close.

    `channels` > 1 spreads requests round-robin over that many HTTP/2 connections (one
    connection multiplexes every request otherwise). `timeout` is each request's gRPC
    deadline. `transport`: `auto` or `lean` (the lean HTTP/2 transport), or `grpcio`
    (grpc.aio channels); the other settings (`connect_timeout`, signature, the codec's
    options) are `ModelClient`'s.
    """

    codec_class: ClassVar[type[GrpcCodec]]
    codec: GrpcCodec
    _read_infer: Callable[[bytes], Answer]  # set by connect() on the lean transport

    def __init__(self, url: str, model: str, *, channels: int = 1, **settings: Any) -> None:
        super().__init__(url, model, pool_field="channels", pool_size=channels, **settings)
        self.channels = channels
        self._channels: list[grpc.aio.Channel] = []
        self._calls: list = []
        self._next = 0
        self._pool: LeanGrpcPool | None = None
        self._infer_headers = b""

    def _choose_transport(self, transport: str) -> str:
        return choose_transport(transport)

    async def connect(self) -> None:
        """Open the channels and read the signature (unless given); InferenceError on failure."""
        if self._calls or self._pool is not None:
            return
        codec = self.codec
        codec.load()
        if self.transport == "lean":
            await self._connect_lean()
            return
        channels = open_channels(codec.target, self.channels)
        await self._read_signature(
            lambda call: self._control(channels[0], call), lambda: _close_all(channels)
        )
        self._channels = channels
        self._calls = [raw_unary(c, codec.infer_path, codec.infer_response) for c in channels]

    async def _connect_lean(self) -> None:
        host, _, port = self.codec.target.rpartition(":")
        pool = LeanGrpcPool(host.strip("[]"), int(port), self.channels)
        await self._read_signature(lambda call: self._control_lean(pool, call), pool.close)
        self._pool = pool
        self._infer_headers = pool.headers(self.codec.infer_path, self.timeout)
        self._read_infer = sized_parser(self.codec.infer_response)

    async def _control_lean(self, pool: LeanGrpcPool, call: GrpcCall) -> Any:
        """A control call on the lean transport, bounded by `connect_timeout`."""
        headers = pool.headers(call.path, self.connect_timeout)
        where = self.codec.where
        message, _, _ = await pool.call(headers, call.request, where, self.connect_timeout)
        return _message(sized_parser(call.response)(message), where)

    async def _control(self, channel: grpc.aio.Channel, call: GrpcCall) -> Any:
        """A control call, bounded by `connect_timeout`; returns the answer message."""
        unary = raw_unary(channel, call.path, call.response)
        return (await self._send(unary, call.request, self.connect_timeout)).message

    async def _send(self, unary: Any, request: bytes, timeout: float | None) -> Answer:
        """One call's decoded answer, or the classified InferenceError."""
        where = self.codec.where
        try:
            answer: Answer = await unary(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpc_failure(exc.code().name, exc.details() or "", where) from exc
        except grpc.RpcError as exc:  # raised by grpc.aio outside a call's status (rare)
            raise InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: {exc!r}") from exc
        _message(answer, where)
        return answer

    async def infer(self, payload: Payload) -> InferResult:
        pool = self._pool
        if pool is not None:
            return await self._infer_lean(pool, payload)
        calls = self._calls
        if not calls:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        call = calls[self._next % len(calls)]
        self._next += 1
        answer = await self._send(call, payload.encoded, self.timeout)
        outputs = self.codec.outputs(
            answer.message, self._require_signature().outputs, payload.batch_size
        )
        # No send time: the request is serialized once before the run and grpc.aio does
        # not say when its bytes leave (InferResult.send_s).
        return InferResult(
            outputs,
            request_bytes=len(payload.encoded),
            response_bytes=answer.size,
            receive_s=perf_counter() - answer.arrived,
        )

    async def _infer_lean(self, pool: LeanGrpcPool, payload: Payload) -> InferResult:
        start = perf_counter()
        codec = self.codec
        message, sent_at, arrived = await pool.call(
            self._infer_headers, payload.encoded, codec.where, self.timeout
        )
        answer = _message(self._read_infer(message), codec.where)
        outputs = codec.outputs(answer, self._require_signature().outputs, payload.batch_size)
        return InferResult.timed(
            start, sent_at, arrived, len(payload.encoded), len(message), outputs
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        channels, self._channels, self._calls = self._channels, [], []
        await _close_all(channels)


async def _close_all(channels: list[grpc.aio.Channel]) -> None:
    for channel in channels:
        await channel.close()


def _message(answer: Answer, where: str) -> Any:
    """The answer's decoded message; BAD_RESPONSE when its bytes were not one."""
    if answer.message is None:
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: undecodable answer")
    return answer.message
