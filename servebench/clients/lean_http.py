"""A lean HTTP/1.1 keep-alive transport: one `asyncio.Protocol` per connection.

Why it exists: against one nginx worker servebench sent 0.35x the requests of hey per
core, and py-spy put 83 % of its time in aiohttp (a request object, a response object, a
header multidict, a stream reader and several futures per request). A load generator
slower than the server reports its own limit as the server's. Here a request is bytes
encoded once before the run (request line, headers, body: `encode_request`) and written
as they are; the answer is parsed by llhttp (`httptools`) straight from the socket's
callbacks, keeping only the status, the body and the few headers a codec reads. A request
costs one future and one answer tuple.

What it does not do, and aiohttp still does for the clients (`transport="aiohttp"`, and
always for https): TLS, proxies, authentication, redirects, cookies, compression. Those are
not what a benchmark of a serving system on plain HTTP/1.1 keep-alive needs.

Errors are classified as `errors.http_failure` classifies aiohttp's, word for word where
it can be: refused → CONNECTION_REFUSED; closed or reset before the answer began →
CONNECTION_RESET; closed mid-answer or bytes that are not HTTP/1.1 → BAD_RESPONSE; no
answer within `timeout` → TIMEOUT; any other connect failure → CLIENT_ERROR. A chunked
answer is de-chunked (the body is what the server meant); an answer without a length
ends when the server closes the connection, as HTTP/1.1 says.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Iterable, Mapping
from time import perf_counter
from typing import cast

import httptools
from yarl import URL

from servebench.clients.base import ErrorKind, InferenceError

# The HTTP transports a client can use: `auto` is the lean one for http:// and aiohttp
# for https:// (TLS is aiohttp's).
TRANSPORTS = ("auto", "lean", "aiohttp")

# (status, body, headers kept, sent_at, arrived_at): perf_counter times of the request's
# last byte leaving for the kernel and of the answer's headers having been read.
Answer = tuple[int, bytes, dict[str, str], float, float]


def choose_transport(transport: str, url: URL) -> str:
    """`lean` or `aiohttp` for a client of `url`; ValueError naming the choices otherwise."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport: {transport!r} is not one of {', '.join(TRANSPORTS)}")
    if transport == "auto":
        return "lean" if url.scheme == "http" else "aiohttp"
    if transport == "lean" and url.scheme != "http":
        raise ValueError(f"transport: lean speaks plain http, not {url.scheme} (use aiohttp)")
    return transport


def pool_for(url: URL, connections: int, keep_headers: Iterable[str] = ()) -> LeanHttpPool:
    """A pool to `url`'s host and port (80 when the URL names none)."""
    assert url.host is not None and url.port is not None  # checked by the URL's parser
    return LeanHttpPool(url.host, url.port, connections, keep_headers)


def host_header(url: URL) -> str:
    """The Host header for `url`: host, and the port unless it is http's default."""
    host = f"[{url.host}]" if ":" in (url.host or "") else str(url.host)
    return host if url.port == 80 else f"{host}:{url.port}"


def encode_request(
    method: str,
    target: str,
    host: str,
    body: bytes | None,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """The whole request as it goes on the wire, built once and sent for every request.

    Only Host, Content-Length (when there is a body) and the given headers go out, as with
    hey and wrk. A header with a line break is refused: it would smuggle a second header.
    """
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in (headers or {}).items():
        if any(c in f"{name}{value}" for c in "\r\n") or ":" in name or not name.strip():
            raise ValueError(f"header {name!r}: not a valid HTTP header")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


class _Failure(Exception):
    """A classified failure before its detail is prefixed with where the request went."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, parses its answer, resolves a future.

    The write buffer's high-water mark is 0, so `pause_writing` comes the moment bytes stay
    in user space and `resume_writing` when the kernel has taken the last of them: `sent_at`
    is then the time the request left, also for a body larger than the socket's buffers.
    """

    def __init__(self, pool: LeanHttpPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
        self.parts: list[bytes] = []
        self.headers: dict[str, str] = {}
        self.sent_at = math.nan
        self.arrived = math.nan
        self.paused = False
        self.headers_done = False
        self.delimited = False  # the answer has a Content-Length or is chunked
        self.closed = False

    # -- asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(
            asyncio.Transport, transport
        )  # uvloop's is not a subclass
        transport.set_write_buffer_limits(high=0)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.waiter is not None and self.sent_at != self.sent_at:  # NaN: still sending
            self.sent_at = perf_counter()

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection is out of step
            self._close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.waiter is not None:
                if not self.headers_done and "HTTP/" in str(exc):  # no status line
                    failure = _Failure(
                        ErrorKind.BAD_RESPONSE, "the answer is not HTTP/1.1 (a gRPC port?)"
                    )
                else:
                    failure = _Failure(ErrorKind.BAD_RESPONSE, f"malformed answer ({exc})")
                self._fail(failure)
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._lost(self)
        if self.waiter is None:
            return
        if self.headers_done and not self.delimited:
            self.on_message_complete()  # a body that ends where the connection does
        elif self.headers_done:
            self._fail(
                _Failure(
                    ErrorKind.BAD_RESPONSE,
                    "answer cut short: the server closed the connection mid-answer",
                )
            )
        elif exc is not None:
            self._fail(_Failure(ErrorKind.CONNECTION_RESET, str(exc) or "connection reset"))
        else:
            self._fail(_Failure(ErrorKind.CONNECTION_RESET, "server closed the connection"))

    # -- httptools callbacks ----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key in _LENGTH_HEADERS:
            self.delimited = True
        wanted = self.pool.wanted.get(key)
        if wanted is not None:
            self.headers[wanted] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.arrived = perf_counter()

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        waiter = self.waiter
        if waiter is None:
            return
        parts = self.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        answer = (self.parser.get_status_code(), body, self.headers, self.sent_at, self.arrived)
        self.waiter = None
        keep = self.parser.should_keep_alive() and not self.closed
        if not keep:
            self._close()
        if not waiter.done():
            waiter.set_result(answer)
        if keep:
            self.pool._release(self)

    # -- used by the pool -------------------------------------------------------------

    def send(self, data: bytes, waiter: asyncio.Future[Answer]) -> None:
        self.waiter = waiter
        self.parts = []
        self.headers = {}
        self.headers_done = self.delimited = False
        self.sent_at = math.nan
        self.transport.write(data)  # type: ignore[union-attr] (set before the pool sees it)
        if not self.paused:
            self.sent_at = perf_counter()

    def _fail(self, failure: _Failure) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(failure)

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


_LENGTH_HEADERS = frozenset((b"content-length", b"transfer-encoding"))


class LeanHttpPool:
    """Up to `connections` keep-alive connections to one `host:port`, opened on demand.

    `keep_headers` names the answer headers a caller reads (case-insensitive); the rest
    are skipped unread. A request borrows an idle connection (the most recently used,
    whose caches are warm), opens one below the limit, or waits for one to come back.
    """

    def __init__(
        self, host: str, port: int, connections: int, keep_headers: Iterable[str] = ()
    ) -> None:
        if connections < 1:
            raise ValueError(f"connections: must be >= 1, got {connections}")
        self.host = host
        self.port = port
        self.connections = connections
        self.wanted = {name.lower().encode("latin-1"): name for name in keep_headers}
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._closed = False

    async def request(self, data: bytes, where: str, timeout: float | None = None) -> Answer:
        """Send `data` (a whole request, `encode_request`) and return its answer.

        Raises `InferenceError` only; `where` (the URL) starts every detail. Cancelling
        the call (the load engine's own timeout) closes the connection, whose answer is
        still owed, so it is never reused out of step.
        """
        if timeout is None:
            return await self._request(data, where)
        try:
            async with asyncio.timeout(timeout):
                return await self._request(data, where)
        except TimeoutError:
            raise InferenceError(ErrorKind.TIMEOUT, f"{where}: no answer in time") from None

    async def _request(self, data: bytes, where: str) -> Answer:
        idle = self._idle
        conn = idle.pop() if idle else await self._acquire(where)
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        conn.send(data, waiter)
        try:
            return await waiter
        except _Failure as failure:
            raise InferenceError(failure.kind, f"{where}: {failure.detail}") from None
        except asyncio.CancelledError:
            if conn.waiter is waiter:
                conn._close()
            raise

    async def _acquire(self, where: str) -> _Connection:
        """A connection for one request: a returned one, or a new one below the limit."""
        if self._closed:
            raise InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: the client is closed")
        while True:
            if len(self._open) + self._opening < self.connections:
                return await self._connect(where)
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                conn = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                    self._release(waiter.result())  # handed over as we were cancelled
                raise
            if conn is not None and not conn.closed:
                return conn
            # None: a connection was lost, so there is room to open one; loop and try.

    async def _connect(self, where: str) -> _Connection:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            _, conn = await loop.create_connection(lambda: _Connection(self), self.host, self.port)
        except ConnectionRefusedError:
            raise InferenceError(
                ErrorKind.CONNECTION_REFUSED,
                f"{where}: connection refused by {self.host}:{self.port}",
            ) from None
        except OSError as exc:
            raise InferenceError(
                ErrorKind.CLIENT_ERROR, f"{where}: cannot connect ({exc})"
            ) from None
        finally:
            self._opening -= 1
        assert isinstance(conn, _Connection)
        if conn.closed:  # lost between the handshake and now
            raise InferenceError(
                ErrorKind.CONNECTION_RESET, f"{where}: server closed the connection"
            )
        self._open.add(conn)
        if self._closed:
            conn._close()
            raise InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: the client is closed")
        return conn

    def _release(self, conn: _Connection) -> None:
        """A connection whose answer was read: to the next waiter, else back to idle."""
        if conn.closed or (self._waiters and self._hand_over(conn)):
            return
        self._idle.append(conn)

    def _lost(self, conn: _Connection) -> None:
        """A connection closed (by either side): forget it, and let a waiter open another."""
        self._open.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)
        self._hand_over(None)

    def _hand_over(self, conn: _Connection | None) -> bool:
        """Wake the first request still waiting with `conn` (None: there is room to open
        one); False when none waits."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    async def close(self) -> None:
        """Close every connection; requests still in flight fail as connection resets."""
        self._closed = True
        for conn in list(self._open):
            conn._close()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run
