"""What every HTTP client (the model clients, `rawhttp`) does alike on either transport.

A client sends on the lean transport (`lean_http`) or on aiohttp (`choose_transport`).
Both pools are opened here with the same settings and closed the same way, so that two
clients' figures differ by what they send, not by how their connections were set up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import aiohttp
from yarl import URL

from servebench.clients.base import ErrorKind, InferenceError, InferResult, Payload
from servebench.clients.lean_http import LeanHttpPool, encode_request, host_header


class HttpEdge(ABC):
    """A lean pool or an aiohttp session of `connections` keep-alive connections.

    The client sets `connections`, `timeout` (each request's bound in the session, None
    for none), and `_pool` or `_session` when it connects; `infer` sends a request on
    whichever is open.
    """

    connections: int
    timeout: float | None
    _pool: LeanHttpPool | None
    _session: aiohttp.ClientSession | None

    def _new_session(self, headers: Mapping[str, str], **options: Any) -> aiohttp.ClientSession:
        """An aiohttp session with no cookies, proxies from the environment or
        decompression (answers are counted as they came); `options` add to these."""
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.connections, limit_per_host=self.connections, ttl_dns_cache=None
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers=headers,
            auto_decompress=False,
            trust_env=False,
            **options,
        )

    async def infer(self, payload: Payload) -> InferResult:
        pool = self._pool
        if pool is not None:
            return await self._infer_lean(pool, payload)
        session = self._session
        if session is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
        return await self._infer_aiohttp(session, payload)

    @abstractmethod
    async def _infer_lean(self, pool: LeanHttpPool, payload: Payload) -> InferResult:
        """One request on the lean transport."""

    @abstractmethod
    async def _infer_aiohttp(self, session: aiohttp.ClientSession, payload: Payload) -> InferResult:
        """One request on aiohttp."""

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None


def wire_request(
    method: str, url: URL, body: bytes | None, headers: Mapping[str, str] | None = None
) -> bytes:
    """The lean transport's bytes of a request to `url` (its path, query and host)."""
    return encode_request(method, url.raw_path_qs, host_header(url), body, headers)
