"""What the four model clients (Triton and TF Serving, over HTTP and gRPC) have in common.

Each is a codec (`codec`: the protocol's requests and answers) on an async transport, with
a pool size (connections or channels), a request timeout and a control-call timeout, and
may be handed the signature instead of reading it. Taking and checking those settings,
reading the signature and guarding "connect() first" in one place keeps the four clients'
options and error messages word for word the same, which users and tests rely on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, Payload
from servebench.clients.codec import ModelCodec, drive_async


class ModelClient(ABC):
    """Settings and signature shared by the protocol clients; subclasses add the transport.

    A protocol's client names its codec (`codec_class`), which gets `version` and the
    `options`. `pool_size` is the subclass's pool keyword (`pool_field`, said in errors).
    `timeout` bounds each request (None: the load engine's own timeout applies);
    `connect_timeout` bounds each control call in `connect()`. A given `signature` is
    trusted as the expected answer and `connect()` then asks the server nothing.
    `transport` picks the I/O library, as the subclass's `_choose_transport` allows.
    """

    codec_class: ClassVar[type[ModelCodec]]
    codec: ModelCodec

    def __init__(
        self,
        url: str,
        model: str,
        *,
        pool_field: str,
        pool_size: int,
        version: str | None = None,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        signature: ModelSignature | None = None,
        transport: str = "auto",
        **options: Any,
    ) -> None:
        self.codec = self.codec_class(url, model, version=version, **options)
        self.transport = self._choose_transport(transport)
        if pool_size < 1:
            raise ValueError(f"{pool_field}: must be >= 1, got {pool_size}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: must be > 0 s, got {timeout}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout: must be > 0 s, got {connect_timeout}")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._signature = signature

    @abstractmethod
    def _choose_transport(self, transport: str) -> str:
        """The transport `transport` names for this client's codec; ValueError if none."""

    async def _read_signature(
        self, send: Callable[[Any], Awaitable[Any]], close: Callable[[], Awaitable[None]]
    ) -> None:
        """Read the signature with `send` (request → answer) unless one was given; on
        failure `close()` the connections just opened, so a failed connect leaves none."""
        if self._signature is not None:
            return
        try:
            self._signature = await drive_async(self.codec.read_signature(), send)
        except BaseException:
            await close()
            raise

    async def signature(self) -> ModelSignature:
        return self._require_signature()

    def encode(self, batch_size: int, inputs: Mapping[str, np.ndarray]) -> Payload:
        """The codec's request for `inputs` (`ModelCodec.encode`); works before connect()
        when a signature was given (the codec needs no server)."""
        return self.codec.encode(self._require_signature(), batch_size, inputs)

    def _require_signature(self) -> ModelSignature:
        if self._signature is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        return self._signature
