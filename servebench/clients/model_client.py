"""What the four model clients (Triton and TF Serving, over HTTP and gRPC) have in common.

Each takes a model name, an optional version, a pool size (connections or channels), a
request timeout and a control-call timeout, and may be handed the signature instead of
reading it. Checking those settings and guarding "connect() first" in one place keeps the
four clients' error messages word for word the same, which users and tests rely on.
"""

from __future__ import annotations

from typing import ClassVar

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature


class ModelClient:
    """Settings and signature shared by the protocol clients; subclasses add the wire.

    `server` names the serving system in the missing-model message; `integer_versions`
    refuses non-numeric versions up front (TF Serving's are integers, Triton's strings).
    """

    server: ClassVar[str]
    integer_versions: ClassVar[bool] = False

    def __init__(
        self,
        model: str,
        *,
        version: str | None,
        pool_field: str,
        pool_size: int,
        timeout: float | None,
        connect_timeout: float,
        signature: ModelSignature | None,
    ) -> None:
        if not model:
            raise ValueError(f"model: a {self.server} model name is required")
        if self.integer_versions and version and not str(version).isdigit():
            raise ValueError(f"version: {self.server} versions are integers, got {version!r}")
        if pool_size < 1:
            raise ValueError(f"{pool_field}: must be >= 1, got {pool_size}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: must be > 0 s, got {timeout}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout: must be > 0 s, got {connect_timeout}")
        self.model = model
        self.version = str(version) if version else ""
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._signature = signature

    async def signature(self) -> ModelSignature:
        return self._require_signature()

    def _require_signature(self) -> ModelSignature:
        if self._signature is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        return self._signature
