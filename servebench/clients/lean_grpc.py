"""A lean gRPC transport: unary calls on cleartext HTTP/2, one `asyncio.Protocol` per connection.

Why it exists: grpcio is the ceiling of a Python gRPC load generator. Against nginx
answering real Triton and TF Serving answers, 64 coroutines on one grpc.aio channel doing
nothing else reached 15-23k calls/s per core, every other way of driving grpcio no more,
while h2load (C) did 67-90k (docs/benchmarks.md, "gRPC"). A benchmark whose generator is
the bottleneck reports the generator. Here a call is bytes built once per method and
payload: the HEADERS block is HPACK-encoded once without touching the dynamic table (every
field "never indexed", so the same bytes are valid on every stream), the DATA frame is the
gRPC-framed message, and only the 4-byte stream id is patched in per call. Answers are cut
into frames straight from `data_received`; header blocks go through `hpack` (the library
under h2), with a cache for blocks seen before (`hpack_cache`). The same bare loop on this
transport does ~61k calls/s per core.

Why not the `h2` library's connection: its state machine and per-frame event objects cost
more per call than grpcio (measured: an h2 `H2Connection` client with 64 calls in flight
did 6.0k calls/s per core against the same nginx, grpc.aio 14.9k in the same run;
`benchmarks/loadgen_peers.py`, row "bare h2 library"). `h2`'s pieces that are not per call
(`hpack`) are used.

What it does, as the HTTP/2 and gRPC specifications ask: the connection preface, SETTINGS
(acknowledged; the server's initial window, frame size and stream limit obeyed, from the
first stream on: a new connection takes calls once the server's SETTINGS came), PING
answered, flow control both ways (large requests wait for WINDOW_UPDATE and go in frames
no larger than the server allows; the client opens its receive windows wide and
replenishes the connection's), GOAWAY (streams the server did not take fail, new calls
open a fresh connection), RST_STREAM, CONTINUATION, padding, Trailers-Only answers, a
`grpc-timeout` header when a deadline is set (the server can stop work nobody waits for),
and a cancelled call resets its stream. Not done, and grpcio still does it
(`transport="grpcio"`): TLS, compression, name resolution beyond host:port, retries,
keepalive pings, proxies.

Failures are classified as `errors.grpc_failure` classifies grpcio's: a non-OK
`grpc-status` → GRPC_STATUS with the server's message; refused → CONNECTION_REFUSED;
connection lost mid-call → CONNECTION_RESET; no answer in time → TIMEOUT; an answer that
breaks HTTP/2 or gRPC framing → BAD_RESPONSE.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Iterable
from time import perf_counter
from typing import cast
from urllib.parse import unquote

import grpc
import hpack

from servebench.clients.base import ErrorKind, InferenceError
from servebench.clients.errors import grpc_failure
from servebench.clients.hpack_cache import CachedDecoder

# The gRPC transports a client can use: `auto` is the lean one (only cleartext targets
# exist in servebench: `grpc_target` gives host:port).
TRANSPORTS = ("auto", "lean", "grpcio")

# (message bytes, perf_counter when the request was written, when its message arrived)
Answer = tuple[bytes, float, float]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x5,
    0x6,
    0x7,
    0x8,
    0x9,
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
CANCEL = 0x8
MAX_WINDOW = 2**31 - 1
LAST_STREAM_ID = 2**31 - 1
# Receive windows: opened to the maximum at once; the connection's is topped up again
# once this much has been read, so a long run never stalls the server.
REPLENISH_AT = 2**30
_FRAME_HEADER = struct.Struct(">IBI")  # length (24 bits) and type in one word, flags, stream id
_STREAM_ID = struct.Struct(">I")
_GRPC_PREFIX = struct.Struct(">BI")

# HTTP status → gRPC code for answers that are not gRPC at all (gRPC's http-grpc-status-mapping).
_HTTP_TO_GRPC = {
    400: "INTERNAL",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "UNIMPLEMENTED",
    429: "UNAVAILABLE",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "UNAVAILABLE",
}
# RST_STREAM / GOAWAY error codes → gRPC code, as grpc core maps them.
_RESET_TO_GRPC = {
    7: "UNAVAILABLE",
    8: "CANCELLED",
    11: "RESOURCE_EXHAUSTED",
    12: "PERMISSION_DENIED",
}
_GRPC_CODES = {code.value[0]: code.name for code in grpc.StatusCode}


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return _frame_header(len(payload), kind, flags, stream) + payload


def _frame_header(length: int, kind: int, flags: int, stream: int) -> bytes:
    return _FRAME_HEADER.pack(length << 8 | kind, flags, stream)


def grpc_timeout(seconds: float) -> str:
    """A `grpc-timeout` value: whole milliseconds (at least 1), at most 8 digits."""
    millis = max(1, round(seconds * 1000))
    return f"{millis}m" if millis < 10**8 else f"{max(1, round(seconds))}S"


def encode_headers(
    path: str, authority: str, timeout: float | None, extra: Iterable[tuple[str, str]] = ()
) -> bytes:
    """A request's HPACK header block, valid on any stream of any connection.

    Every field is sent "never indexed" (or as a static-table index), so the block never
    adds to the server's dynamic table and the same bytes mean the same on every stream.
    """
    fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("user-agent", "servebench-lean-grpc"),
    ]
    if timeout is not None:
        fields.append(("grpc-timeout", grpc_timeout(timeout)))
    fields.extend(extra)
    encoder = hpack.Encoder()
    block = encoder.encode([(name, value, True) for name, value in fields], huffman=False)
    assert not encoder.header_table.dynamic_entries, "the header block must be stateless"
    return block


class _Failure(Exception):
    """A failure before it is told where the call went: a gRPC status (`code`, classified
    by `errors.grpc_failure` as grpcio's are) or an already classified `kind`."""

    def __init__(
        self, detail: str, code: str | None = None, kind: ErrorKind = ErrorKind.GRPC_STATUS
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.kind = kind

    def error(self, where: str) -> InferenceError:
        if self.code is not None and self.kind is ErrorKind.GRPC_STATUS:
            return grpc_failure(self.code, self.detail, where)
        return InferenceError(self.kind, f"{where}: {self.detail}", status=self.code)


def _status_failure(code: str, message: str) -> _Failure:
    return _Failure(message, code)


def _failure(kind: ErrorKind, detail: str, status: str | None = None) -> _Failure:
    return _Failure(detail, status, kind)


class _Stream:
    """One call in flight: its future, the answer's bytes so far, what its headers said."""

    __slots__ = ("headers_seen", "parts", "pending", "sent_at", "waiter", "window")

    def __init__(self, waiter: asyncio.Future[Answer]) -> None:
        self.waiter = waiter
        self.parts: list[bytes] = []
        self.headers_seen = False
        self.sent_at = 0.0
        self.pending: memoryview | None = None  # request bytes still held back by flow control
        self.window = 0


# What a cached header block says: (":status", content-type is gRPC, grpc-status, grpc-message)
_Meaning = tuple[int | None, bool, str | None, str]


def _meaning(headers: list[tuple[bytes, bytes]]) -> _Meaning:
    status: int | None = None
    is_grpc = False
    grpc_status: str | None = None
    message = ""
    for name, value in headers:
        if name == b":status":
            status = int(value) if value.isdigit() else -1
        elif name == b"content-type":
            is_grpc = value.startswith(b"application/grpc")
        elif name == b"grpc-status":
            grpc_status = value.decode("latin-1")
        elif name == b"grpc-message":
            message = unquote(value.decode("latin-1"))
    return status, is_grpc, grpc_status, message


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection multiplexing unary calls."""

    def __init__(self, pool: LeanGrpcPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.streams: dict[int, _Stream] = {}
        self.next_id = 1
        self.closed = False
        self.draining = False  # GOAWAY received or ids used up: no new streams
        self.decoder = CachedDecoder(_meaning, max_header_list=2**24)
        self.block: list[bytes] = []  # a header block continued in CONTINUATION frames
        self.block_stream = 0
        self.block_end_stream = False
        # The server's settings (HTTP/2 defaults until its SETTINGS arrive).
        self.send_window = 65535
        self.initial_window = 65535
        self.max_frame = 16384
        self.max_streams = 2**32
        self.received = 0
        self.blocked: deque[int] = deque()  # streams with request bytes held back
        self.room: asyncio.Future[None] | None = None  # set while waiting under max_streams
        # Done when the server's SETTINGS (its limits) arrived; no stream opens before, so
        # the first calls obey them too (a server may enforce them at once, as h2 does).
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        settings = struct.pack(
            ">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW
        )
        self.transport.write(
            PREFACE
            + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, _STREAM_ID.pack(MAX_WINDOW - 65535))
        )

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        end = len(buffer)
        i = 0
        try:
            if end >= 9 and not self.ready.done() and buffer[3] != SETTINGS:
                # An HTTP/2 server's first frame is SETTINGS; an HTTP/1.1 answer's first
                # bytes read as a frame too long to ever arrive whole.
                raise _failure(
                    ErrorKind.BAD_RESPONSE,
                    "the server does not speak HTTP/2 (its first bytes are not SETTINGS:"
                    " an HTTP/1.1 port?)",
                )
            while end - i >= 9:
                length = int.from_bytes(buffer[i : i + 3], "big")
                if end - i - 9 < length:
                    break
                kind = buffer[i + 3]
                flags = buffer[i + 4]
                stream = _STREAM_ID.unpack_from(buffer, i + 5)[0] & LAST_STREAM_ID
                payload = buffer[i + 9 : i + 9 + length]
                i += 9 + length
                if kind == DATA:
                    self._on_data(stream, flags, payload)
                elif kind == HEADERS:
                    self._on_headers(stream, flags, payload)
                else:
                    self._on_control(kind, flags, stream, payload)
                if self.closed:
                    return
        except _Failure as failure:  # the connection itself is broken
            self._abort(failure)
            return
        except (struct.error, IndexError):  # a frame too short for what its type carries
            self._abort(_failure(ErrorKind.BAD_RESPONSE, "malformed HTTP/2 frame"))
            return
        self.buffer = buffer[i:] if i < end else b""

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._lost(self)
        detail = f"connection lost ({exc})" if exc else "server closed the connection"
        self._fail_all(_failure(ErrorKind.CONNECTION_RESET, detail, "UNAVAILABLE"))

    # -- frames -----------------------------------------------------------------------

    def _on_data(self, stream_id: int, flags: int, payload: bytes) -> None:
        self.received += len(payload)  # padding included, as flow control counts it
        if self.received >= REPLENISH_AT:
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, _STREAM_ID.pack(self.received)))  # type: ignore[union-attr]
            self.received = 0
        stream = self.streams.get(stream_id)
        if stream is None:  # a call already given up (cancelled, timed out)
            return
        if flags & PADDED:
            payload = payload[1 : len(payload) - payload[0]]
        if not stream.headers_seen:
            self._end(stream_id, _failure(ErrorKind.BAD_RESPONSE, "DATA before HEADERS"))
            return
        if payload:
            stream.parts.append(payload)
        if flags & END_STREAM:  # the answer ended without trailers: no grpc-status
            self._end(stream_id, _status_failure("INTERNAL", "the answer has no trailers"))

    def _on_headers(self, stream_id: int, flags: int, payload: bytes) -> None:
        if flags & PADDED:
            payload = payload[1 : len(payload) - payload[0]]
        if flags & PRIORITY:
            payload = payload[5:]
        if not flags & END_HEADERS:
            self.block = [payload]
            self.block_stream = stream_id
            self.block_end_stream = bool(flags & END_STREAM)
            return
        self._on_block(stream_id, bool(flags & END_STREAM), payload)

    def _on_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        try:
            meaning = self.decoder.decode(block)
        except hpack.HPACKError as exc:
            raise _failure(ErrorKind.BAD_RESPONSE, f"undecodable header block ({exc})") from None
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        status, is_grpc, grpc_status, message = meaning
        if not stream.headers_seen:
            stream.headers_seen = True
            if status != 200:
                code = _HTTP_TO_GRPC.get(status or 0, "UNKNOWN")
                self._end(
                    stream_id, _status_failure(code, f"HTTP status {status} (not a gRPC answer)")
                )
                return
            if not is_grpc:
                self._end(
                    stream_id,
                    _failure(ErrorKind.BAD_RESPONSE, "the answer is not gRPC (content-type)"),
                )
                return
            if not end_stream:
                return
        elif not end_stream:
            self._end(stream_id, _failure(ErrorKind.BAD_RESPONSE, "headers after the trailers"))
            return
        # The trailers (or a Trailers-Only answer): the call's status.
        if grpc_status is None:
            self._end(stream_id, _status_failure("INTERNAL", "the answer has no grpc-status"))
        elif grpc_status != "0":
            number = int(grpc_status) if grpc_status.isdigit() else -1
            code = _GRPC_CODES.get(number, "UNKNOWN")
            self._end(stream_id, _status_failure(code, message))
        else:
            self._complete(stream_id, stream)

    def _complete(self, stream_id: int, stream: _Stream) -> None:
        parts = stream.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        if len(body) < 5:
            self._end(stream_id, _status_failure("INTERNAL", "the answer holds no message"))
            return
        compressed, size = _GRPC_PREFIX.unpack_from(body)
        if compressed:
            self._end(
                stream_id,
                _failure(ErrorKind.BAD_RESPONSE, "compressed answer (none was asked for)"),
            )
        elif len(body) != size + 5:
            self._end(
                stream_id, _failure(ErrorKind.BAD_RESPONSE, "the answer is not one whole message")
            )
        else:
            del self.streams[stream_id]
            self._freed()
            waiter = stream.waiter
            if not waiter.done():
                waiter.set_result((body[5:], stream.sent_at, perf_counter()))

    def _on_control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == CONTINUATION:
            if not self.block or stream_id != self.block_stream:
                raise _failure(ErrorKind.BAD_RESPONSE, "CONTINUATION out of place")
            self.block.append(payload)
            if flags & END_HEADERS:
                block, self.block = b"".join(self.block), []
                self._on_block(stream_id, self.block_end_stream, block)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
        elif kind == PING:
            if not flags & ACK:
                self.transport.write(frame(PING, ACK, 0, payload))  # type: ignore[union-attr]
        elif kind == WINDOW_UPDATE:
            increment = _STREAM_ID.unpack_from(payload)[0] & MAX_WINDOW
            if stream_id == 0:
                self.send_window += increment
            elif stream_id in self.streams:
                self.streams[stream_id].window += increment
            self._flush()
        elif kind == RST_STREAM:
            code = _STREAM_ID.unpack_from(payload)[0]
            grpc_code = _RESET_TO_GRPC.get(code, "INTERNAL")
            self._end(
                stream_id,
                _status_failure(grpc_code, f"stream reset by the server (HTTP/2 error {code})"),
            )
        elif kind == GOAWAY:
            last, code = struct.unpack_from(">II", payload)
            last &= LAST_STREAM_ID
            self.draining = True
            self.pool._lost(self)
            reason = payload[8:].decode("utf-8", "replace")
            for stream_id in [s for s in self.streams if s > last]:
                self._end(
                    stream_id,
                    _failure(
                        ErrorKind.CONNECTION_RESET,
                        f"server closed the connection (GOAWAY {code}{': ' + reason if reason else ''})",
                        "UNAVAILABLE",
                    ),
                )
            if not self.streams:
                self._close()
        elif kind == PUSH_PROMISE:
            raise _failure(ErrorKind.BAD_RESPONSE, "PUSH_PROMISE although push was disabled")
        # PRIORITY and unknown frame types are ignored, as HTTP/2 asks.

    def _on_settings(self, payload: bytes) -> None:
        for offset in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                delta = value - self.initial_window
                self.initial_window = value
                for stream in self.streams.values():
                    stream.window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self.max_frame = value
            elif key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self.max_streams = value
        self.transport.write(frame(SETTINGS, ACK, 0))  # type: ignore[union-attr]
        if not self.ready.done():
            self.ready.set_result(None)
        self._flush()

    # -- calls ------------------------------------------------------------------------

    def has_room(self) -> bool:
        return not self.draining and not self.closed and len(self.streams) < self.max_streams

    def start(self, headers: bytes, message: bytes, waiter: asyncio.Future[Answer]) -> int:
        """Open a stream for one call and write as much of it as flow control allows."""
        stream_id = self.next_id
        self.next_id += 2
        if self.next_id > LAST_STREAM_ID:
            self.draining = True  # stream ids used up: the next calls open a new connection
            self.pool._lost(self)
        stream = _Stream(waiter)
        self.streams[stream_id] = stream
        length = len(message) + 5
        window = self.initial_window
        if (
            length <= self.send_window
            and length <= window
            and length <= self.max_frame
            and not self.blocked
        ):
            self.send_window -= length
            self.transport.write(  # type: ignore[union-attr]
                b"".join(
                    (
                        _frame_header(len(headers), HEADERS, END_HEADERS, stream_id),
                        headers,
                        _frame_header(length, DATA, END_STREAM, stream_id),
                        _GRPC_PREFIX.pack(0, len(message)),
                        message,
                    )
                )
            )
        else:
            self._write_headers(stream_id, headers)
            stream.pending = memoryview(_GRPC_PREFIX.pack(0, len(message)) + message)
            stream.window = window
            self.blocked.append(stream_id)
            self._flush()
        if stream.pending is None:
            stream.sent_at = perf_counter()
        return stream_id

    def _write_headers(self, stream_id: int, headers: bytes) -> None:
        transport = self.transport
        assert transport is not None
        first, rest = headers[: self.max_frame], headers[self.max_frame :]
        flags = 0 if rest else END_HEADERS
        transport.write(_frame_header(len(first), HEADERS, flags, stream_id) + first)
        while rest:
            first, rest = rest[: self.max_frame], rest[self.max_frame :]
            transport.write(frame(CONTINUATION, 0 if rest else END_HEADERS, stream_id, first))

    def _flush(self) -> None:
        """Write held-back request bytes, in order, as far as the windows allow."""
        blocked = self.blocked
        while blocked and not self.closed:
            stream_id = blocked[0]
            stream = self.streams.get(stream_id)
            if stream is None or stream.pending is None:
                blocked.popleft()
                continue
            pending = stream.pending
            while pending:
                size = min(len(pending), self.send_window, stream.window, self.max_frame)
                if size <= 0:
                    stream.pending = pending  # the rest waits for WINDOW_UPDATE
                    return
                chunk, pending = pending[:size], pending[size:]
                self.send_window -= size
                stream.window -= size
                flags = 0 if pending else END_STREAM
                self.transport.write(_frame_header(size, DATA, flags, stream_id) + bytes(chunk))  # type: ignore[union-attr]
            stream.pending = None
            stream.sent_at = perf_counter()
            blocked.popleft()

    def cancel(self, stream_id: int) -> None:
        """Give up a call: reset its stream so the server can stop working on it."""
        if self.streams.pop(stream_id, None) is not None and not self.closed:
            self.transport.write(frame(RST_STREAM, 0, stream_id, _STREAM_ID.pack(CANCEL)))  # type: ignore[union-attr]
            self._freed()

    # -- endings ----------------------------------------------------------------------

    def _end(self, stream_id: int, failure: _Failure) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self._freed()
            if not stream.waiter.done():
                stream.waiter.set_exception(failure)

    def _freed(self) -> None:
        if self.draining and not self.streams:
            self._close()
        elif self.room is not None and not self.room.done():
            self.room.set_result(None)

    def _fail_all(self, failure: _Failure) -> None:
        if not self.ready.done():
            self.ready.set_exception(failure)
            self.ready.exception()  # retrieved: the opening may have been given up
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            if not stream.waiter.done():
                stream.waiter.set_exception(failure)
        if self.room is not None and not self.room.done():
            self.room.set_result(None)

    def _abort(self, failure: _Failure) -> None:
        self._fail_all(failure)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.write(frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
                self.transport.close()


def _retrieve(opening: asyncio.Task[_Connection]) -> None:
    """Read an opening's outcome, so that one every waiting call gave up is not logged."""
    if not opening.cancelled():
        opening.exception()


class LeanGrpcPool:
    """Calls to one `host:port` over `connections` HTTP/2 connections, round-robin.

    Connections open on first use and again after one is lost or told to go away.
    """

    def __init__(self, host: str, port: int, connections: int = 1) -> None:
        if connections < 1:
            raise ValueError(f"connections: must be >= 1, got {connections}")
        self.host = host
        self.port = port
        self.authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._slots: list[_Connection | None] = [None] * connections
        self._opening: list[asyncio.Task[_Connection] | None] = [None] * connections
        self._next = 0
        self._closed = False

    def headers(self, path: str, timeout: float | None) -> bytes:
        """The pre-encoded HEADERS block for calls to `path` with deadline `timeout`."""
        return encode_headers(path, self.authority, timeout)

    async def call(
        self, headers: bytes, message: bytes, where: str, timeout: float | None = None
    ) -> Answer:
        """One unary call: `message` (serialized) under `headers` (`headers()`).

        Raises `InferenceError` only; `where` starts every detail. A call cancelled or
        past `timeout` resets its stream; the connection carries on.
        """
        if timeout is None:
            return await self._call(headers, message, where)
        try:
            async with asyncio.timeout(timeout):
                return await self._call(headers, message, where)
        except TimeoutError:
            raise InferenceError(
                ErrorKind.TIMEOUT, f"{where}: no answer in time", status="DEADLINE_EXCEEDED"
            ) from None

    async def _call(self, headers: bytes, message: bytes, where: str) -> Answer:
        slot = self._next
        self._next = (slot + 1) % len(self._slots)
        conn = self._slots[slot]
        if conn is None or not conn.has_room():
            conn = await self._connection(slot, where)
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        stream_id = conn.start(headers, message, waiter)
        try:
            return await waiter
        except _Failure as failure:
            raise failure.error(where) from None
        except asyncio.CancelledError:
            conn.cancel(stream_id)
            raise

    async def _connection(self, slot: int, where: str) -> _Connection:
        """The slot's connection once it has room for a stream, opening one if needed."""
        while True:
            if self._closed:
                raise self._closed_error(where)
            conn = self._slots[slot]
            if conn is None or conn.closed or conn.draining:
                conn = await self._open(slot, where)
                if (conn.closed or conn.draining) and not self._closed:
                    # GOAWAY right with its SETTINGS: opening again and again would spin.
                    raise InferenceError(
                        ErrorKind.CONNECTION_RESET,
                        f"{where}: the server closed a new connection at once",
                        status="UNAVAILABLE",
                    )
                continue
            if conn.has_room():
                return conn
            if conn.room is None or conn.room.done():
                conn.room = asyncio.get_running_loop().create_future()
            await asyncio.shield(conn.room)

    async def _open(self, slot: int, where: str) -> _Connection:
        """A new connection for the slot, its SETTINGS received.

        It opens in a task of its own that every call waiting for it shares: a call that
        gives up (its deadline passed) leaves the opening to the others instead of
        cancelling it under them.
        """
        opening = self._opening[slot]
        if opening is None:
            opening = self._opening[slot] = asyncio.ensure_future(self._connect(slot))
            opening.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(opening)
        except _Failure as failure:  # the connection broke before its SETTINGS came
            raise failure.error(where) from None
        except OSError as exc:
            raise self._connect_error(exc, where) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if opening.cancelled() and task is not None and not task.cancelling():
                raise self._closed_error(where) from None  # `close()` stopped the opening
            raise

    async def _connect(self, slot: int) -> _Connection:
        """Open the slot's connection and wait for the server's SETTINGS (a task of its own)."""
        try:
            _, protocol = await asyncio.get_running_loop().create_connection(
                lambda: _Connection(self), self.host, self.port
            )
            conn = cast(_Connection, protocol)
            try:
                await conn.ready
            except BaseException:
                conn._close()  # given up (the pool closed) or already broken
                raise
        finally:
            self._opening[slot] = None
        if not (conn.closed or conn.draining):
            self._slots[slot] = conn
        return conn

    def _connect_error(self, exc: OSError, where: str) -> InferenceError:
        if isinstance(exc, ConnectionRefusedError):
            return InferenceError(
                ErrorKind.CONNECTION_REFUSED,
                f"{where}: connection refused by {self.host}:{self.port}",
                status="UNAVAILABLE",
            )
        return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: cannot connect ({exc})")

    @staticmethod
    def _closed_error(where: str) -> InferenceError:
        return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: the client is closed")

    def _lost(self, conn: _Connection) -> None:
        for slot, held in enumerate(self._slots):
            if held is conn:
                self._slots[slot] = None

    async def close(self) -> None:
        """Close every connection; calls still in flight fail as connection resets."""
        self._closed = True
        for opening in self._opening:
            if opening is not None:
                opening.cancel()
        slots, self._slots = self._slots, [None] * len(self._slots)
        for conn in slots:
            if conn is not None:
                conn._close()
        await asyncio.sleep(0)
