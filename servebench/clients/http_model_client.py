"""The aiohttp side both HTTP model clients (Triton HTTP, TF Serving REST) share.

One keep-alive pool per client, built the same way for both, so that a difference in
their figures comes from the servers and the encodings, not from how the pool was set up.
"""

from __future__ import annotations

import aiohttp

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature
from servebench.clients.endpoints import http_base
from servebench.clients.model_client import ModelClient

# What a request can fail with below HTTP; `errors.http_failure` classifies them.
TRANSPORT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)


class HttpModelClient(ModelClient):
    """A model client over HTTP: base URL, connection pool, session open and close."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None,
        connections: int,
        timeout: float | None,
        connect_timeout: float,
        signature: ModelSignature | None,
    ) -> None:
        super().__init__(
            model,
            version=version,
            pool_field="connections",
            pool_size=connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.base = http_base(url)
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _new_session(self) -> aiohttp.ClientSession:
        """A pool of `connections` keep-alive connections with `timeout` on each request."""
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.connections, limit_per_host=self.connections, ttl_dns_cache=None
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            # Servers compress answers when asked, and aiohttp asks by default. A benchmark
            # should not pay for (or count) compression nobody chose.
            headers={"Accept-Encoding": "identity"},
            auto_decompress=False,
            trust_env=False,
        )

    def _require_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        return session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
