"""The lean gRPC transport (issue 16) against HTTP/2 servers that misbehave on purpose.

The servers are `h2` (an HTTP/2 implementation independent of the transport's own frame
handling) in the test's own loop, one handler per test deciding each call's answer; where
h2 will not misbehave (GOAWAY before answering streams it keeps, padded and continued
header blocks, malformed frames) the handler writes raw frames beside it. Every case
checks what a caller sees (the answer's bytes, the failure's kind, status and detail) and
what the server saw (streams, resets, PING acknowledgements, connections), never how long
anything took.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import pytest
from conftest import until_async
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from servebench.clients.base import ErrorKind, InferenceError
from servebench.clients.errors import grpc_failure
from servebench.clients.lean_grpc import LeanGrpcPool

WHERE = "grpc://lean-test-target"
PATH = "/pkg.Service/Method"
OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
OK_TRAILERS = [("grpc-status", "0")]
# HTTP/2 frame types and flags, written out here rather than taken from the transport.
DATA, HEADERS, SETTINGS, GOAWAY, CONTINUATION = 0x0, 0x1, 0x4, 0x7, 0x9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20


def grpc_framed(message: bytes, compressed: int = 0, size: int | None = None) -> bytes:
    """A gRPC length-prefixed message; `size` lies about its length when given."""
    return struct.pack(">BI", compressed, len(message) if size is None else size) + message


def raw_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream)
        + payload
    )


class Peer:
    """One accepted connection: h2's state for it and what the client did on it."""

    def __init__(self, writer: asyncio.StreamWriter, index: int, settings: dict | None) -> None:
        self.writer = writer
        self.index = index  # 0 for the server's first connection
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)
        if settings:
            self.h2.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.requests: dict[int, bytes] = {}  # stream id -> the request's gRPC message
        self.request_headers: dict[int, dict[bytes, bytes]] = {}
        self._bodies: dict[int, bytearray] = {}
        self.open: set[int] = set()  # streams received and not yet ended or reset
        self.most_open = 0
        self.resets: list[tuple[int, int]] = []
        self.ping_acks: list[bytes] = []
        self.error: str | None = None  # what the client did wrong (h2's complaint, ...)
        self.finished = False  # the client closed the connection
        self.raw_encoder = hpack.Encoder()  # for header blocks written as raw frames
        self._handlers: set[asyncio.Task[None]] = set()
        self.handler_errors: list[BaseException] = []

    def _handled(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.handler_errors.append(task.exception())  # type: ignore[arg-type]

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)

    def ended(self, stream_id: int) -> None:
        self.open.discard(stream_id)

    def answer(
        self,
        stream_id: int,
        message: bytes,
        headers: list[tuple[str, str]] = OK_HEADERS,
        trailers: list[tuple[str, str]] = OK_TRAILERS,
        body: bytes | None = None,
    ) -> None:
        """Headers, the message (or `body` as it is) in frames h2 allows, trailers."""
        self.h2.send_headers(stream_id, headers)
        body = grpc_framed(message) if body is None else body
        step = self.h2.max_outbound_frame_size
        for start in range(0, len(body), step):
            self.h2.send_data(stream_id, body[start : start + step])
        self.h2.send_headers(stream_id, trailers, end_stream=True)
        self.ended(stream_id)
        self.flush()

    async def run(
        self, reader: asyncio.StreamReader, handler: Handler, settings_delay: float
    ) -> None:
        self.h2.initiate_connection()
        if settings_delay:  # a server one round trip away: its SETTINGS come late
            await asyncio.sleep(settings_delay)
        self.flush()
        tasks = self._handlers
        while data := await reader.read(65536):
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self.flush()
                self.writer.close()
                return
            for event in events:
                stream_id = getattr(event, "stream_id", 0)
                if isinstance(event, h2.events.RequestReceived):
                    self.request_headers[stream_id] = dict(event.headers)
                    self._bodies[stream_id] = bytearray()
                    self.open.add(stream_id)
                    self.most_open = max(self.most_open, len(self.open))
                elif isinstance(event, h2.events.DataReceived):
                    self._bodies[stream_id] += event.data
                    self.h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    body = bytes(self._bodies.pop(stream_id))
                    if body[:5] != grpc_framed(b"", size=len(body) - 5):
                        self.error = f"stream {stream_id}: not one gRPC message"
                    self.requests[stream_id] = body[5:]
                    task = asyncio.create_task(handler(self, stream_id, body[5:]))
                    tasks.add(task)
                    task.add_done_callback(self._handled)
                elif isinstance(event, h2.events.StreamReset):
                    self.resets.append((stream_id, event.error_code))
                    self.ended(stream_id)
                elif isinstance(event, h2.events.PingAckReceived):
                    self.ping_acks.append(event.ping_data)
            self.flush()
        self.finished = True


Handler = Callable[[Peer, int, bytes], Awaitable[None]]


async def echo(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.answer(stream_id, message)


class H2Server:
    """A loopback HTTP/2 server: `handler(peer, stream_id, message)` answers each call.

    `settings` are enforced from the start (h2 does so); `settings_delay` holds them back
    as a distant server's would be, so a client that does not wait for them breaks them.
    """

    def __init__(
        self, handler: Handler = echo, settings: dict | None = None, settings_delay: float = 0.0
    ) -> None:
        self.handler = handler
        self.settings = settings
        self.settings_delay = settings_delay
        self.peers: list[Peer] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> H2Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for peer in self.peers:
            peer.writer.transport.abort()  # its reader sees the end; its loop returns
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if exc_type is None:  # what went wrong on the server side fails the test too
            for peer in self.peers:
                assert peer.error is None, peer.error
                assert not peer.handler_errors, peer.handler_errors

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = Peer(writer, len(self.peers), self.settings)
        self.peers.append(peer)
        try:
            await peer.run(reader, self.handler, self.settings_delay)
        except ConnectionError:
            pass
        finally:
            writer.close()


async def call(pool: LeanGrpcPool, message: bytes, timeout: float | None = 10.0) -> bytes:
    """One call's answer message (timing left out)."""
    answer, sent_at, arrived_at = await pool.call(
        pool.headers(PATH, timeout), message, WHERE, timeout
    )
    assert sent_at <= arrived_at
    return answer


async def failure(
    pool: LeanGrpcPool, message: bytes, timeout: float | None = 10.0
) -> InferenceError:
    """The `InferenceError` a call that must fail raises."""
    with pytest.raises(InferenceError) as caught:
        await call(pool, message, timeout)
    assert WHERE in caught.value.detail
    return caught.value


def pool_for(server: H2Server | str, connections: int = 1) -> LeanGrpcPool:
    if isinstance(server, str):
        host, port = server.rsplit(":", 1)
        return LeanGrpcPool(host, int(port), connections)
    return LeanGrpcPool("127.0.0.1", server.port, connections)


async def fails_alone(
    server: H2Server | str, bad: bytes, then: bytes | None = None, timeout: float = 10.0
) -> InferenceError:
    """The error of one call sending `bad` on a fresh pool; with `then`, a call sending it
    next on the same pool is answered (the failure was that call's, not the pool's)."""
    pool = pool_for(server)
    try:
        error = await failure(pool, bad, timeout)
        if then is not None:
            assert await call(pool, then) == then
    finally:
        await pool.close()
    return error


# -- answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("connections", [1, 3])
async def test_answers_come_back_exact_and_unmixed(connections: int) -> None:
    rng = random.Random(16)
    messages = [b""] + [
        f"call {i}:".encode() + rng.randbytes(rng.randrange(0, 3000)) for i in range(199)
    ]
    async with H2Server() as server:
        pool = pool_for(server, connections)
        try:
            answers = await asyncio.gather(*(call(pool, m) for m in messages))
        finally:
            await pool.close()
    assert answers == messages
    assert len(server.peers) == connections
    received = [m for peer in server.peers for m in peer.requests.values()]
    assert sorted(received) == sorted(messages)
    peer = server.peers[0]
    headers = peer.request_headers[1]
    assert headers[b":method"] == b"POST"
    assert headers[b":path"] == PATH.encode()
    assert headers[b"content-type"] == b"application/grpc"
    assert headers[b"te"] == b"trailers"
    assert headers[b"grpc-timeout"] == b"10000m"
    assert peer.error is None


@pytest.mark.parametrize("trailers_only", [False, True], ids=["trailers", "trailers-only"])
async def test_non_ok_status_carries_code_and_message(trailers_only: bool) -> None:
    status = [("grpc-status", "5"), ("grpc-message", "unknown%20model")]

    async def not_found(peer: Peer, stream_id: int, message: bytes) -> None:
        if trailers_only:
            peer.h2.send_headers(stream_id, OK_HEADERS + status, end_stream=True)
            peer.ended(stream_id)
            peer.flush()
        else:
            peer.answer(stream_id, b"", trailers=status)

    async with H2Server(not_found) as server:
        error = await fails_alone(server, b"x")
    assert error.kind is ErrorKind.GRPC_STATUS
    assert error.status == "NOT_FOUND"
    assert "unknown model" in error.detail


@pytest.mark.parametrize(
    ("code", "name", "message", "kind"),
    [
        (4, "DEADLINE_EXCEEDED", "Deadline Exceeded", ErrorKind.TIMEOUT),
        (14, "UNAVAILABLE", "failed to connect: Connection refused", ErrorKind.CONNECTION_REFUSED),
        (14, "UNAVAILABLE", "Socket closed", ErrorKind.CONNECTION_RESET),
        (14, "UNAVAILABLE", "overloaded", ErrorKind.GRPC_STATUS),
        (8, "RESOURCE_EXHAUSTED", "queue full", ErrorKind.GRPC_STATUS),
    ],
)
async def test_statuses_classified_as_grpc_failure_classifies_grpcio(
    code: int, name: str, message: str, kind: ErrorKind
) -> None:
    async def status(peer: Peer, stream_id: int, _: bytes) -> None:
        trailers = [("grpc-status", str(code)), ("grpc-message", message.replace(" ", "%20"))]
        peer.answer(stream_id, b"", trailers=trailers)

    async with H2Server(status) as server:
        error = await fails_alone(server, b"x")
    expected = grpc_failure(name, message, WHERE)
    assert (error.kind, error.status, error.detail) == (kind, name, expected.detail)
    assert expected.kind is kind


# -- connections ---------------------------------------------------------------------------


async def test_connection_refused_names_host_and_port(closed_port: str) -> None:
    error = await fails_alone(closed_port, b"x")
    assert error.kind is ErrorKind.CONNECTION_REFUSED
    assert closed_port in error.detail


@pytest.mark.parametrize("how", ["close", "abort"])
async def test_connection_lost_mid_answer_then_the_next_call_reconnects(how: str) -> None:
    async def cut_first_connection(peer: Peer, stream_id: int, message: bytes) -> None:
        if peer.index > 0:
            peer.answer(stream_id, message)
            return
        peer.h2.send_headers(stream_id, OK_HEADERS)
        peer.flush()
        if how == "close":
            peer.writer.close()
        else:
            peer.writer.transport.abort()

    async with H2Server(cut_first_connection) as server:
        error = await fails_alone(server, b"first", b"second")
    assert error.kind is ErrorKind.CONNECTION_RESET
    assert len(server.peers) == 2


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ErrorCodes.INTERNAL_ERROR, "INTERNAL"),
        (ErrorCodes.CANCEL, "CANCELLED"),
        (ErrorCodes.REFUSED_STREAM, "UNAVAILABLE"),
    ],
)
async def test_stream_reset_by_the_server(code: ErrorCodes, status: str) -> None:
    async def reset(peer: Peer, stream_id: int, message: bytes) -> None:
        if message == b"reset":
            peer.h2.reset_stream(stream_id, code)
            peer.ended(stream_id)
            peer.flush()
        else:
            peer.answer(stream_id, message)

    async with H2Server(reset) as server:
        error = await fails_alone(server, b"reset", b"after")  # the connection carries on
    assert (error.kind, error.status) == (ErrorKind.GRPC_STATUS, status)
    assert len(server.peers) == 1


async def test_goaway_fails_the_streams_it_did_not_take_and_later_calls_reconnect() -> None:
    async def goaway_after_four(peer: Peer, stream_id: int, message: bytes) -> None:
        if peer.index > 0:
            peer.answer(stream_id, message)
            return
        if len(peer.requests) < 4 or stream_id != max(peer.requests):
            return
        # GOAWAY first, then answers for the streams it kept (h2 sends nothing after its
        # own GOAWAY, so this one is raw).
        peer.flush()
        peer.writer.write(raw_frame(GOAWAY, 0, 0, struct.pack(">II", 3, 0) + b"draining"))
        for kept in (1, 3):
            peer.answer(kept, peer.requests[kept])

    messages = [f"call {i}".encode() for i in range(4)]
    async with H2Server(goaway_after_four) as server:
        pool = pool_for(server)
        try:
            results = await asyncio.gather(
                *(call(pool, m) for m in messages), return_exceptions=True
            )
            assert await call(pool, b"later") == b"later"
            first = server.peers[0]
            await until_async(
                lambda: first.finished, 10, "the client to close the drained connection"
            )
        finally:
            await pool.close()
    on_stream = {message: stream for stream, message in first.requests.items()}
    for message, result in zip(messages, results, strict=True):
        if on_stream[message] <= 3:
            assert result == message
        else:
            assert isinstance(result, InferenceError), result
            assert result.kind is ErrorKind.CONNECTION_RESET
            assert "GOAWAY" in result.detail and "draining" in result.detail
    assert sorted(on_stream.values()) == [1, 3, 5, 7]
    assert len(server.peers) == 2


# -- answers that are not gRPC -------------------------------------------------------------


def _http_404(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.h2.send_headers(stream_id, [(":status", "404"), ("content-type", "text/html")])
    peer.h2.send_data(stream_id, b"<h1>not found</h1>", end_stream=True)


def _not_grpc(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.h2.send_headers(stream_id, [(":status", "200"), ("content-type", "text/html")])
    peer.h2.send_data(stream_id, b"<h1>hello</h1>", end_stream=True)


def _no_trailers(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.h2.send_headers(stream_id, OK_HEADERS)
    peer.h2.send_data(stream_id, grpc_framed(message), end_stream=True)


def _no_grpc_status(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.answer(stream_id, message, trailers=[("x-note", "forgot the status")])


def _compressed(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.answer(stream_id, message, body=grpc_framed(message, compressed=1))


def _length_lies(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.answer(stream_id, message, body=grpc_framed(message, size=len(message) + 10))


def _two_messages(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.answer(stream_id, message, body=grpc_framed(message) * 2)


def _empty(peer: Peer, stream_id: int, message: bytes) -> None:
    peer.answer(stream_id, message, body=b"")


@pytest.mark.parametrize(
    ("misbehave", "kind", "status"),
    [
        (_http_404, ErrorKind.GRPC_STATUS, "UNIMPLEMENTED"),
        (_not_grpc, ErrorKind.BAD_RESPONSE, None),
        (_no_trailers, ErrorKind.GRPC_STATUS, "INTERNAL"),
        (_no_grpc_status, ErrorKind.GRPC_STATUS, "INTERNAL"),
        (_compressed, ErrorKind.BAD_RESPONSE, None),
        (_length_lies, ErrorKind.BAD_RESPONSE, None),
        (_two_messages, ErrorKind.BAD_RESPONSE, None),
        (_empty, ErrorKind.GRPC_STATUS, "INTERNAL"),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)).strip("_"),
)
async def test_answers_that_break_grpc_fail_their_call_only(
    misbehave: Callable[[Peer, int, bytes], None], kind: ErrorKind, status: str | None
) -> None:
    async def handler(peer: Peer, stream_id: int, message: bytes) -> None:
        if message == b"bad":
            misbehave(peer, stream_id, message)
            peer.ended(stream_id)
            peer.flush()
        else:
            peer.answer(stream_id, message)

    async with H2Server(handler) as server:
        error = await fails_alone(server, b"bad", b"good")
    assert (error.kind, error.status) == (kind, status)
    assert len(server.peers) == 1


@pytest.mark.parametrize("then_close", [False, True], ids=["stays-open", "closes"])
async def test_http1_server_is_a_clear_failure(then_close: bool) -> None:
    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nBad Request")
        if then_close:
            writer.close()
        else:
            await reader.read(1024)  # the client's end

    server = await asyncio.start_server(http1, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        error = await fails_alone(address, b"x", timeout=30.0)  # a hang would end in TIMEOUT
    finally:
        server.close()
    assert error.kind is ErrorKind.BAD_RESPONSE
    assert "HTTP/2" in error.detail


async def test_goaway_with_the_settings_fails_the_call_instead_of_reconnecting() -> None:
    connections = 0

    async def going_away(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.write(raw_frame(SETTINGS, 0, 0, b"") + raw_frame(GOAWAY, 0, 0, bytes(8)))
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(going_away, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        error = await fails_alone(address, b"x", timeout=30.0)
    finally:
        server.close()
    assert error.kind is ErrorKind.CONNECTION_RESET
    assert connections == 1


async def test_malformed_frame_is_a_bad_response() -> None:
    async def short_goaway(peer: Peer, stream_id: int, message: bytes) -> None:
        peer.flush()
        peer.writer.write(raw_frame(GOAWAY, 0, 0, b"\0\0"))

    async with H2Server(short_goaway) as server:
        error = await fails_alone(server, b"x")
    assert error.kind is ErrorKind.BAD_RESPONSE


# -- deadlines and cancellation ------------------------------------------------------------


async def test_silence_times_out_resets_the_stream_and_keeps_the_connection() -> None:
    async def silent_once(peer: Peer, stream_id: int, message: bytes) -> None:
        if message != b"silence":
            peer.answer(stream_id, message)

    async with H2Server(silent_once) as server:
        # The second call is answered after the server read the reset (one byte stream).
        error = await fails_alone(server, b"silence", b"then", timeout=0.3)
    assert (error.kind, error.status) == (ErrorKind.TIMEOUT, "DEADLINE_EXCEEDED")
    peer = server.peers[0]
    assert peer.request_headers[1][b"grpc-timeout"] == b"300m"
    assert peer.resets == [(1, ErrorCodes.CANCEL)]
    assert len(server.peers) == 1


@pytest.fixture
def full_backlog() -> Iterator[str]:
    """`127.0.0.1:<port>` whose accept queue is full: a TCP connect to it never completes."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        filler.connect(listener.getsockname())
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("target", ["full_backlog", "silent_server"])
async def test_calls_waiting_for_a_connection_time_out_each_on_its_own_deadline(
    target: str, request: pytest.FixtureRequest
) -> None:
    """One call gives up while the connection is being opened; the others still wait for it
    and end in their own TIMEOUT (not the first one's cancellation)."""
    pool = pool_for(request.getfixturevalue(target))
    try:
        results = await asyncio.gather(
            call(pool, b"a", timeout=0.2), call(pool, b"b", timeout=0.5), return_exceptions=True
        )
    finally:
        await pool.close()
    for result in results:
        assert isinstance(result, InferenceError), repr(result)
        assert result.kind is ErrorKind.TIMEOUT


async def test_close_fails_calls_waiting_for_a_connection(silent_server: str) -> None:
    pool = pool_for(silent_server)
    waiting = asyncio.create_task(call(pool, b"x", timeout=None))
    await asyncio.sleep(0.05)  # let it start connecting (the outcome is the same either way)
    await pool.close()
    with pytest.raises(InferenceError) as caught:
        await asyncio.wait_for(waiting, 10)  # bounds a hang, which is the failure here
    assert caught.value.kind is ErrorKind.CLIENT_ERROR
    assert "closed" in caught.value.detail


async def test_close_fails_calls_in_flight_as_connection_resets() -> None:
    async def never(peer: Peer, stream_id: int, message: bytes) -> None:
        if message != b"never":
            peer.answer(stream_id, message)

    async with H2Server(never) as server:
        pool = pool_for(server)
        assert await call(pool, b"first") == b"first"
        waiting = asyncio.create_task(call(pool, b"never", timeout=None))
        await until_async(lambda: server.peers[0].open, 10, "the call to reach the server")
        await pool.close()
        with pytest.raises(InferenceError) as caught:
            await waiting
    assert caught.value.kind is ErrorKind.CONNECTION_RESET


# -- flow control and limits ---------------------------------------------------------------


async def test_flow_control_small_windows_large_request_and_answer() -> None:
    rng = random.Random(10)
    big, medium = rng.randbytes(200_000), rng.randbytes(70_000)

    async def five_times(peer: Peer, stream_id: int, message: bytes) -> None:
        peer.answer(stream_id, message * 5)  # 1 MB for the large request

    settings = {SettingCodes.INITIAL_WINDOW_SIZE: 1000, SettingCodes.MAX_FRAME_SIZE: 16384}
    async with H2Server(five_times, settings, settings_delay=0.05) as server:
        pool = pool_for(server)
        try:
            answers = await asyncio.gather(call(pool, big), call(pool, medium))
        finally:
            await pool.close()
    assert answers == [big * 5, medium * 5]
    peer = server.peers[0]
    assert peer.error is None
    assert sorted(peer.requests.values(), key=len) == [medium, big]


async def test_max_concurrent_streams_is_obeyed_from_the_first_call() -> None:
    async def after_a_moment(peer: Peer, stream_id: int, message: bytes) -> None:
        await asyncio.sleep(0.005)  # so that calls overlap on the server
        peer.answer(stream_id, message)

    messages = [f"call {i}".encode() for i in range(10)]
    limit = {SettingCodes.MAX_CONCURRENT_STREAMS: 2}
    async with H2Server(after_a_moment, limit, settings_delay=0.05) as server:
        pool = pool_for(server)
        try:
            answers = await asyncio.gather(*(call(pool, m) for m in messages))
        finally:
            await pool.close()
    assert answers == messages
    assert len(server.peers) == 1
    peer = server.peers[0]
    assert peer.error is None
    assert peer.most_open == 2


# -- frames h2 would not send this way -----------------------------------------------------


async def test_ping_is_acked_and_padded_continued_frames_parse() -> None:
    async def raw_answer(peer: Peer, stream_id: int, message: bytes) -> None:
        if stream_id == 1:
            peer.h2.ping(b"servebnc")
        peer.flush()
        encode = peer.raw_encoder.encode
        head = encode([*OK_HEADERS, ("x-answer-to", message.decode())])
        body = grpc_framed(message)
        trailers = encode([("grpc-status", "0"), ("x-trailer", "padded")])
        peer.writer.write(
            raw_frame(HEADERS, PADDED, stream_id, bytes([7]) + head[:2] + b"\0" * 7)
            + raw_frame(CONTINUATION, 0, stream_id, head[2:3])
            + raw_frame(CONTINUATION, END_HEADERS, stream_id, head[3:])
            + raw_frame(DATA, PADDED, stream_id, bytes([20]) + body[:4] + b"\0" * 20)
            + raw_frame(DATA, PADDED, stream_id, bytes([0]) + body[4:9])
            + raw_frame(DATA, 0, stream_id, body[9:])
            + raw_frame(
                HEADERS,
                PADDED | PRIORITY | END_STREAM,
                stream_id,
                bytes([3]) + struct.pack(">IB", 0, 15) + trailers[:1] + b"\0" * 3,
            )
            + raw_frame(CONTINUATION, END_HEADERS, stream_id, trailers[1:])
        )

    async with H2Server(raw_answer) as server:
        pool = pool_for(server)
        try:
            assert await call(pool, b"first answer, continued") == b"first answer, continued"
            # Same blocks again: now they name the entries the first ones added.
            assert await call(pool, b"second answer, indexed") == b"second answer, indexed"
        finally:
            await pool.close()
    assert server.peers[0].ping_acks == [b"servebnc"]
    assert len(server.peers) == 1
