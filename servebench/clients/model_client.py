"""What the four model clients (Triton and TF Serving, over HTTP and gRPC) have in common.

Each is a codec (`codec`: the protocol's requests and answers) on an async transport, with
a pool size (connections or channels), a request timeout and a control-call timeout, and
may be handed the signature instead of reading it. Checking those settings and guarding
"connect() first" in one place keeps the four clients' error messages word for word the
same, which users and tests rely on.
"""

from __future__ import annotations

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, Payload
from servebench.clients.codec import ModelCodec


class ModelClient:
    """Settings and signature shared by the protocol clients; subclasses add the transport."""

    codec: ModelCodec

    def __init__(
        self,
        *,
        pool_field: str,
        pool_size: int,
        timeout: float | None,
        connect_timeout: float,
        signature: ModelSignature | None,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"{pool_field}: must be >= 1, got {pool_size}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: must be > 0 s, got {timeout}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout: must be > 0 s, got {connect_timeout}")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._signature = signature

    async def signature(self) -> ModelSignature:
        return self._require_signature()

    def make_payload(self, batch_size: int, seed: int = 0) -> Payload:
        """Works before connect() when a signature was given (the codec needs no server)."""
        return self.codec.make_payload(self._require_signature(), batch_size, seed)

    def _require_signature(self) -> ModelSignature:
        if self._signature is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        return self._signature
