"""The grpc.aio edge of both gRPC model protocols (Triton gRPC, TF Serving gRPC).

Both send a request serialized once per payload on their own channels, round-robin, and
classify failures the same way; what the requests hold and how answers are read is the
codec's (`codec.GrpcCodec`). Sharing the hot path keeps the two protocols' overheads
alike, which is what makes their figures comparable.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, ClassVar

import grpc

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
)
from servebench.clients.codec import GrpcCall, GrpcCodec, drive_async
from servebench.clients.errors import grpc_failure
from servebench.clients.grpc_calls import Answer, open_channels, raw_unary
from servebench.clients.model_client import ModelClient


class GrpcModelClient(ModelClient):
    """A model client over gRPC: a codec, channels, round-robin unary calls, close.

    A protocol's client names its codec (`codec_class`); `options` go to the codec.
    `channels` > 1 spreads requests round-robin over that many HTTP/2 connections (one
    connection multiplexes every request otherwise). `timeout` is each request's gRPC
    deadline (None: the load engine's own timeout applies); `connect_timeout` bounds each
    control call in `connect()`. A given `signature` is trusted as the expected answer and
    `connect()` then asks the server nothing.
    """

    codec_class: ClassVar[type[GrpcCodec]]
    codec: GrpcCodec

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        channels: int = 1,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        signature: ModelSignature | None = None,
        **options: Any,
    ) -> None:
        codec = self.codec_class(url, model, version=version, **options)
        super().__init__(
            pool_field="channels",
            pool_size=channels,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.codec = codec
        self.channels = channels
        self._channels: list[grpc.aio.Channel] = []
        self._calls: list = []
        self._next = 0

    async def connect(self) -> None:
        """Open the channels and read the signature (unless given); InferenceError on failure."""
        if self._calls:
            return
        codec = self.codec
        codec.load()
        channels = open_channels(codec.target, self.channels)
        try:
            if self._signature is None:
                self._signature = await drive_async(
                    codec.read_signature(), lambda call: self._control(channels[0], call)
                )
        except BaseException:
            for channel in channels:
                await channel.close()
            raise
        self._channels = channels
        self._calls = [raw_unary(c, codec.infer_path, codec.infer_response) for c in channels]

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
        if answer.message is None:
            raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: undecodable answer")
        return answer

    async def infer(self, payload: Payload) -> InferResult:
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

    async def close(self) -> None:
        channels, self._channels, self._calls = self._channels, [], []
        for channel in channels:
            await channel.close()
