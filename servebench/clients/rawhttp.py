"""A generic HTTP client behind the inference protocol: send one fixed body to one URL.

It knows no model format: the "payload" is the body given at construction, sent as is,
and a response counts as good when its status is the expected one. That is what the
generator's own tests and the comparison with other load tools (hey, wrk, Locust) need: an
endpoint whose cost is only HTTP.

Speed matters here because it bounds the generator's measured capacity. On plain http://
the transport is `lean_http` (the whole request encoded once, answers parsed by llhttp:
issue 16); `transport="aiohttp"` (and https://) uses aiohttp, with its per-request timers
off (the engine's sweeper enforces the timeout), no default headers and no cookies; each
aiohttp request wraps the body in its own `TimedBody` so that its send time is known.
"""

from __future__ import annotations

import errno
import math
from collections.abc import Mapping
from time import perf_counter

import aiohttp
import numpy as np
from yarl import URL

from servebench.clients.base import ErrorKind, InferenceError, InferResult, ModelSignature, Payload
from servebench.clients.http_edge import HttpEdge, wire_request
from servebench.clients.lean_http import LeanHttpPool, choose_transport, pool_for
from servebench.clients.timing import TimedBody

DEFAULT_BODY = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[0.1,0.2,0.3,0.4]}]}'
_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


class RawHttpClient(HttpEdge):
    """POST (or GET) one fixed body to one URL with a pool of keep-alive connections.

    `transport`: `auto` (lean on http://, aiohttp on https://), `lean` or `aiohttp`.
    """

    def __init__(
        self,
        url: str,
        model: str = "",
        *,
        version: str | None = None,
        method: str = "POST",
        body: bytes | str | None = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
        expect_status: int | None = 200,
        connections: int = 64,
        timeout: float | None = None,
        transport: str = "auto",
    ):
        parsed = URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"url: {url!r} is not an http(s) URL with a host")
        method = method.upper()
        if method not in ("GET", "POST", "PUT"):
            raise ValueError(f"method: {method!r} is not one of GET, POST, PUT")
        if connections < 1:
            raise ValueError(f"connections: must be >= 1, got {connections}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: must be > 0 s, got {timeout}")
        if body is None:
            body = DEFAULT_BODY if method != "GET" else b""
        self.url = parsed
        self.model = model
        self.version = version
        self.method = method
        self.body = body.encode() if isinstance(body, str) else bytes(body)
        self.content_type = content_type
        self.headers = dict(headers or {})
        self.expect_status = expect_status
        self.connections = connections
        self.timeout = timeout
        self.transport = choose_transport(transport, parsed)
        self._session: aiohttp.ClientSession | None = None
        self._pool: LeanHttpPool | None = None
        self._where = str(parsed)
        self._wire = b""
        if self.transport == "lean":
            send_headers = dict(self.headers)
            if self.method != "GET" or self.body:
                if not any(name.lower() == "content-type" for name in send_headers):
                    send_headers["Content-Type"] = content_type
                body_or_none: bytes | None = self.body
            else:
                body_or_none = None
            self._wire = wire_request(self.method, parsed, body_or_none, send_headers)

    async def connect(self) -> None:
        """Ready the pool; connections open on first use, so this asks the server nothing."""
        if self._session is not None or self._pool is not None:
            return
        if self.transport == "lean":
            self._pool = pool_for(self.url, self.connections)
            return
        self._session = self._new_session(
            self.headers,
            # Only Host, Content-Type and Content-Length go out, as with hey and wrk; no
            # Accept-Encoding either, since answers are counted, not decompressed.
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        )

    async def signature(self) -> ModelSignature:
        """A raw endpoint has no tensors: the signature only names it."""
        return ModelSignature(name=self.model or str(self.url), inputs=(), outputs=())

    def encode(self, batch_size: int, inputs: Mapping[str, np.ndarray]) -> Payload:
        """The body to send, or None for a bodiless GET: the signature names no tensors, so
        `inputs` is empty. Each request wraps the body in its own `TimedBody`, which times
        when it was written."""
        encoded = self.body if self.method != "GET" or self.body else None
        return Payload(
            batch_size=batch_size, inputs={}, encoded=encoded, request_bytes=len(self.body)
        )

    async def _infer_aiohttp(self, session: aiohttp.ClientSession, payload: Payload) -> InferResult:
        data = (
            TimedBody(payload.encoded, content_type=self.content_type)
            if payload.encoded is not None
            else None
        )
        start = perf_counter()
        try:
            response = await session.request(self.method, self.url, data=data)
            arrived = perf_counter()
            body = await response.read()  # releases the connection, or closes it on error
        except TimeoutError as exc:
            raise InferenceError(ErrorKind.TIMEOUT, str(exc) or "timed out") from exc
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                raise InferenceError(ErrorKind.CONNECTION_REFUSED, str(exc)) from exc
            raise InferenceError(ErrorKind.CLIENT_ERROR, str(exc)) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise InferenceError(ErrorKind.CONNECTION_RESET, str(exc) or "disconnected") from exc
        except aiohttp.ClientOSError as exc:
            kind = (
                ErrorKind.CONNECTION_RESET if exc.errno in _RESET_ERRNOS else ErrorKind.CLIENT_ERROR
            )
            raise InferenceError(kind, str(exc)) from exc
        except (aiohttp.ClientPayloadError, aiohttp.ClientResponseError) as exc:
            raise InferenceError(ErrorKind.BAD_RESPONSE, str(exc)) from exc
        except aiohttp.ClientError as exc:
            raise InferenceError(ErrorKind.CLIENT_ERROR, f"{type(exc).__name__}: {exc}") from exc
        self._check_status(response.status)
        sent_at = data.sent_at if data is not None else math.nan
        return InferResult.timed(start, sent_at, arrived, payload.request_bytes, len(body))

    def _check_status(self, status: int) -> None:
        if self.expect_status is not None and status != self.expect_status:
            raise InferenceError(
                ErrorKind.HTTP_STATUS,
                f"HTTP {status} (expected {self.expect_status})",
                status=status,
            )

    async def _infer_lean(self, pool: LeanHttpPool, payload: Payload) -> InferResult:
        """The same request on the lean transport: its bytes were encoded at construction."""
        start = perf_counter()
        status, body, _, sent_at, arrived = await pool.request(
            self._wire, self._where, self.timeout
        )
        self._check_status(status)
        return InferResult.timed(start, sent_at, arrived, payload.request_bytes, len(body))
