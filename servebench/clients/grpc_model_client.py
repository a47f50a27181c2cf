"""The skeleton both gRPC model clients (Triton gRPC, TF Serving gRPC) share.

Both send a request serialized once per payload on their own channels, round-robin, and
classify failures the same way; only how an answer's tensors are read differs, so that is
the one hook (`_decode`). Sharing the hot path keeps the two protocols' overheads alike,
which is what makes their figures comparable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import grpc
import numpy as np

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
    TensorSpec,
    check_outputs,
)
from servebench.clients.endpoints import grpc_target
from servebench.clients.errors import grpc_failure
from servebench.clients.grpc_calls import raw_unary
from servebench.clients.model_client import ModelClient


class GrpcModelClient(ModelClient, ABC):
    """A model client over gRPC: target, channels, round-robin unary calls, close."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None,
        channels: int,
        timeout: float | None,
        connect_timeout: float,
        signature: ModelSignature | None,
    ) -> None:
        super().__init__(
            model,
            version=version,
            pool_field="channels",
            pool_size=channels,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.target = grpc_target(url)
        self.channels = channels
        self._where = f"{self.target} model {model!r}"
        self._channels: list[grpc.aio.Channel] = []
        self._calls: list = []
        self._next = 0

    def _use_channels(self, channels: list[grpc.aio.Channel], path: str, response: Any) -> None:
        """Send inferences as `path` calls answered by `response` messages on `channels`."""
        self._channels = channels
        self._calls = [raw_unary(channel, path, response) for channel in channels]

    @abstractmethod
    def _decode(self, response: Any, specs: tuple[TensorSpec, ...]) -> dict[str, np.ndarray]:
        """The expected outputs an answer holds (absent ones left out for the check)."""

    async def infer(self, payload: Payload) -> InferResult:
        calls = self._calls
        if not calls:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        call = calls[self._next % len(calls)]
        self._next += 1
        try:
            size, response = await call(payload.encoded, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpc_failure(exc.code().name, exc.details() or "", self._where) from exc
        except grpc.RpcError as exc:  # raised by grpc.aio outside a call's status (rare)
            raise InferenceError(ErrorKind.CLIENT_ERROR, f"{self._where}: {exc!r}") from exc
        if response is None:
            raise InferenceError(ErrorKind.BAD_RESPONSE, f"{self._where}: undecodable answer")
        signature = self._require_signature()
        outputs = self._decode(response, signature.outputs)
        check_outputs(outputs, signature.outputs, payload.batch_size)
        return InferResult(outputs, request_bytes=len(payload.encoded), response_bytes=size)

    async def close(self) -> None:
        channels, self._channels, self._calls = self._channels, [], []
        for channel in channels:
            await channel.close()
