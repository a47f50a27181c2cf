"""The link emulator itself: an asyncio TCP proxy that delays, paces and "loses" bytes.

It forwards a byte stream, so HTTP/1.1, HTTP/2 and gRPC all work through it unchanged.
Protocols (callbacks) rather than streams: a forwarding hop is on every request's path
and protocol callbacks cost a fraction of a stream round trip.

Memory is bounded: a direction stops reading from its sender while the shared link's
backlog exceeds the bottleneck queue, or while the receiver's socket buffer is full; the
sender then feels TCP backpressure exactly as behind a slow link.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections import deque

from servebench.netem.address import Address, parse_address
from servebench.netem.link import DirectionModel, DirectionSpec, Piece, Serializer, make_serializer
from servebench.netem.profiles import LinkProfile
from servebench.netem.stats import ConnectionStats, DirectionStats, LinkStats

log = logging.getLogger(__name__)

#: A piece due within this much of now goes out with the current batch: waking up again
#: for it would cost more than the error.
_BATCH_WINDOW_S = 20e-6
#: Weight of one delivery's lateness in the wake-up lead (see _Lead).
_LEAD_GAIN = 0.05
#: A lateness sample is clipped to this, so one scheduling hiccup (ms) does not swing it.
_LEAD_CLIP_S = 200e-6
#: Never schedule deliveries more than this early.
_LEAD_MAX_S = 500e-6
#: The most one direction can deliver a piece before its modelled time: the lead is taken
#: off the arrival stamp and off the delivery, and the batch window takes what is nearly
#: due. A floor under a link's measured delay leaves this much per direction.
MAX_EARLY_S = 2 * _LEAD_MAX_S + _BATCH_WINDOW_S
#: How long stop() waits for aborted sockets to report closed.
_STOP_WAIT_S = 2.0


class _Lead:
    """This loop's wake-up latency, learnt from its own timers.

    Between a timer's deadline and the write there is always the CPU's wake-up from idle
    and the loop's own work (50-200 µs on the VMs we measured); left alone that bias adds
    to every hop. Each delivery's lateness steers the estimate; deliveries are scheduled
    that much early, and bytes that woke the loop are taken to have arrived that much
    before we could read them.
    """

    __slots__ = ("s",)

    def __init__(self) -> None:
        self.s = 0.0

    def observe(self, lateness: float) -> None:
        step = max(-_LEAD_CLIP_S, min(_LEAD_CLIP_S, lateness))
        self.s = max(0.0, min(_LEAD_MAX_S, self.s + _LEAD_GAIN * step))


class _Side(asyncio.Protocol):
    """One TCP endpoint of a proxied connection: the client's socket or the server's."""

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.out: _Pipe | None = None  # bytes read here leave through this pipe
        self.into: _Pipe | None = None  # the pipe that writes to this side
        self._pause_reasons: set[str] = set()
        self.closed = False
        # Bytes that arrive before the upstream connection exists: asyncio honours the
        # pause in connection_made, uvloop does not always.
        self.early: list[bytes | None] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.conn.side_made(self)

    def data_received(self, data: bytes) -> None:
        if self.out is None:
            self.early.append(data)
        else:
            self.out.feed(data)

    def eof_received(self) -> bool:
        if self.out is None:
            self.early.append(None)
        else:
            self.out.feed_eof()
        return True  # keep the socket half-open: the other direction may still flow

    def pause_writing(self) -> None:
        # Our socket buffer towards this endpoint is full: stop reading from its peer.
        if self.into is not None:
            self.into.src.pause_reading("receiver")

    def resume_writing(self) -> None:
        if self.into is not None:
            self.into.src.resume_reading("receiver")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.conn.side_lost(self, exc)

    def pause_reading(self, reason: str) -> None:
        if not self._pause_reasons and self.transport is not None:
            self.transport.pause_reading()
        self._pause_reasons.add(reason)

    def resume_reading(self, reason: str) -> None:
        self._pause_reasons.discard(reason)
        if not self._pause_reasons and self.transport is not None and not self.closed:
            self.transport.resume_reading()


class _Pipe:
    """One direction of one connection: bytes read from `src` and delivered to `dst`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        conn: _Connection,
        src: _Side,
        dst: _Side,
        model: DirectionModel | None,
        serializer: Serializer | None,
        queue_s: float | None,
    ) -> None:
        self.loop = loop
        self.conn = conn
        self.src = src
        self.dst = dst
        self.stats = DirectionStats()
        self.model = model
        self.serializer = serializer
        self.queue_s = queue_s
        self.pending: deque[Piece] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = math.inf
        self.drain_timer: asyncio.TimerHandle | None = None
        self.eof_delivered = False
        self.lead = conn.proxy.lead
        src.out = self
        dst.into = self

    def feed(self, data: bytes) -> None:
        stats = self.stats
        stats.bytes_in += len(data)
        if self.model is None:  # pure forwarding: no timers, no copies
            self.dst.transport.write(data)  # type: ignore[union-attr]
            stats.bytes_out += len(data)
            stats.pieces += 1
            return
        now = self.loop.time()
        # The bytes reached our socket before we woke up to read them; the timers tell us
        # how long this loop takes to wake, so count the link from then.
        self.pending.extend(self.model.schedule(now - self.lead.s, data))
        self._arm()
        if self.queue_s is not None and self.drain_timer is None:
            self._limit_backlog(now)

    def feed_eof(self) -> None:
        if self.model is None:
            self._deliver_eof()
            return
        self.pending.append(self.model.schedule_eof(self.loop.time()))
        self._arm()

    def _limit_backlog(self, now: float) -> None:
        """Stop reading while the link holds more than its queue; look again when it drains."""
        assert self.serializer is not None and self.queue_s is not None
        excess = self.serializer.backlog_s(now) - self.queue_s
        if excess > 0:
            self.src.pause_reading("link")
            self.drain_timer = self.loop.call_at(now + excess, self._on_drained)
        else:
            self.src.resume_reading("link")

    def _on_drained(self) -> None:
        self.drain_timer = None
        self._limit_backlog(self.loop.time())

    def _arm(self) -> None:
        if not self.pending:
            return
        due = self.pending[0].due
        if due < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = due
            self.timer = self.loop.call_at(due - self.lead.s, self._deliver)

    def _deliver(self) -> None:
        """Write every piece that is due, in order; stop at the first one that is not."""
        self.timer = None
        self.timer_at = math.inf
        if self.dst.closed:
            return
        now = self.loop.time()
        if self.pending:
            self.lead.observe(now - self.pending[0].due)
        horizon = now + self.lead.s + _BATCH_WINDOW_S
        pending = self.pending
        stats = self.stats
        out: list[bytes] = []
        eof = False
        while pending and pending[0].due <= horizon:
            piece = pending.popleft()
            if piece.data is None:
                eof = True
                break
            out.append(piece.data)
            delay = now - piece.arrived
            stats.pieces += 1
            stats.delay_s += delay
            if delay > stats.max_delay_s:
                stats.max_delay_s = delay
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            self.dst.transport.write(data)  # type: ignore[union-attr]
            stats.bytes_out += len(data)
        if eof:
            self._deliver_eof()
        else:
            self._arm()

    def _deliver_eof(self) -> None:
        transport = self.dst.transport
        assert transport is not None
        if transport.can_write_eof():
            transport.write_eof()
        self.eof_delivered = True
        self.conn.eof_delivered()

    def cancel(self) -> None:
        for handle in (self.timer, self.drain_timer):
            if handle is not None:
                handle.cancel()
        self.timer = self.drain_timer = None
        self.pending.clear()


class _Connection:
    """A client connection, its upstream connection and the two pipes between them."""

    def __init__(self, proxy: LinkProxy) -> None:
        self.proxy = proxy
        self.client = _Side(self)
        self.upstream = _Side(self)
        self.up: _Pipe | None = None
        self.down: _Pipe | None = None
        self.connect_task: asyncio.Task[None] | None = None
        self.client_name = "?"
        self.opened_at = 0.0
        self.finished = False

    def side_made(self, side: _Side) -> None:
        if side is self.client:
            peer = side.transport.get_extra_info("peername")  # type: ignore[union-attr]
            self.client_name = str(Address(*peer[:2])) if peer else "?"
            self.opened_at = self.proxy.loop.time()
            side.pause_reading("connecting")
            self.connect_task = self.proxy.loop.create_task(self._connect())
            self.proxy.connection_opened(self)

    async def _connect(self) -> None:
        proxy = self.proxy
        try:
            await proxy.loop.create_connection(lambda: self.upstream, *proxy.target)
        except OSError as exc:
            proxy.upstream_failed(exc)
            if self.client.transport is not None:
                self.client.transport.abort()
            return
        if self.client.closed:  # the client gave up while we were connecting
            self.upstream.transport.abort()  # type: ignore[union-attr]
            return
        self.up, self.down = proxy.make_pipes(self)
        for data in self.client.early:
            if data is None:
                self.up.feed_eof()
            else:
                self.up.feed(data)
        self.client.early.clear()
        self.client.resume_reading("connecting")

    def eof_delivered(self) -> None:
        up, down = self.up, self.down
        if up is not None and down is not None and up.eof_delivered and down.eof_delivered:
            self.close()

    def close(self) -> None:
        """Both directions are finished: close both sockets after their buffers drain."""
        for side in (self.client, self.upstream):
            if side.transport is not None and not side.closed:
                side.transport.close()

    def abort(self) -> None:
        """Drop everything now (a reset, or the emulator stopping)."""
        if self.connect_task is not None:
            self.connect_task.cancel()
        for pipe in (self.up, self.down):
            if pipe is not None:
                pipe.cancel()
        for side in (self.client, self.upstream):
            if side.transport is not None and not side.closed:
                side.transport.abort()

    def side_lost(self, side: _Side, exc: Exception | None) -> None:
        other = self.upstream if side is self.client else self.client
        if exc is not None:  # a reset or a socket error travels on as a reset
            self.abort()
        elif other.transport is None:  # the upstream connection never came up
            if self.connect_task is not None:
                self.connect_task.cancel()
        elif not other.closed:
            other.transport.close()
        if self.client.closed and (self.upstream.closed or self.upstream.transport is None):
            self._finish()

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        for pipe in (self.up, self.down):
            if pipe is not None:
                pipe.cancel()
        self.proxy.connection_closed(self)

    def snapshot(self) -> ConnectionStats:
        return ConnectionStats(
            client=self.client_name,
            opened_at=self.opened_at,
            up=self.up.stats.copy() if self.up else DirectionStats(),
            down=self.down.stats.copy() if self.down else DirectionStats(),
        )


class LinkProxy:
    """A TCP proxy in front of `target` that behaves like the link in `profile`.

    Runs in the current event loop. For accurate timing run it in a loop from
    `servebench.netem.clock.new_precise_event_loop` with nothing else busy on that loop —
    `LinkEmulator` does exactly that in its own process.
    """

    def __init__(
        self,
        profile: LinkProfile,
        target: str | tuple[str, int],
        *,
        seed: int | None = None,
    ) -> None:
        self.profile = profile
        self.target = parse_address(target, "target")
        self._rng = random.Random(seed)
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._closed_up = DirectionStats()
        self._closed_down = DirectionStats()
        self._opened = 0
        self._upstream_failures = 0
        self._serializers: dict[str, Serializer | None] = {}
        self._specs = {d: DirectionSpec.from_profile(profile, d) for d in ("up", "down")}
        self._all_closed: asyncio.Event | None = None
        self.lead = _Lead()  # shared by all pipes: it measures this loop, not a connection
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.address: Address | None = None
        #: Whether the process runs with a real-time scheduling class (set by its runner).
        self.realtime = False

    async def start(self, listen: str | tuple[str, int] = ("127.0.0.1", 0)) -> Address:
        """Listen on `listen` (port 0 picks a free port) and return the address clients use."""
        listen_at = parse_address(listen, "listen")
        self.loop = asyncio.get_running_loop()
        now = self.loop.time()
        # The link (and a trace's time zero) starts now, shared by all connections.
        self._serializers = {d: make_serializer(self.profile, d, now) for d in ("up", "down")}
        try:
            self._server = await self.loop.create_server(
                lambda: _Connection(self).client, listen_at.host, listen_at.port
            )
        except OSError as exc:
            raise OSError(exc.errno, f"listen {listen_at}: {exc.strerror}") from exc
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = Address(host, port)
        return self.address

    def make_pipes(self, conn: _Connection) -> tuple[_Pipe, _Pipe]:
        """Both directions of a new connection, modelled or plainly forwarded."""
        pipes = []
        now = self.loop.time()
        for direction, src, dst in (
            ("up", conn.client, conn.upstream),
            ("down", conn.upstream, conn.client),
        ):
            pipe = _Pipe(self.loop, conn, src, dst, None, None, None)
            if self.profile.shapes_traffic:
                spec = self._specs[direction]
                serializer = self._serializers[direction]
                # The client believes it is connected at once, but on a real link its first
                # bytes could leave only after the handshake's round trip.
                not_before = conn.opened_at + self.profile.rtt_s if direction == "up" else now
                pipe.model = DirectionModel(spec, serializer, self._rng, pipe.stats, not_before)
                pipe.serializer = serializer
                pipe.queue_s = spec.queue_s
            pipes.append(pipe)
        return pipes[0], pipes[1]

    def connection_opened(self, conn: _Connection) -> None:
        self._connections.add(conn)
        self._opened += 1

    def connection_closed(self, conn: _Connection) -> None:
        self._connections.discard(conn)
        if conn.up is not None and conn.down is not None:
            self._closed_up.add(conn.up.stats)
            self._closed_down.add(conn.down.stats)
        if not self._connections and self._all_closed is not None:
            self._all_closed.set()

    def upstream_failed(self, exc: OSError) -> None:
        self._upstream_failures += 1
        if self._upstream_failures == 1 or self._upstream_failures % 100 == 0:
            log.warning(
                "link emulator: cannot connect to target %s (%s); %d failures so far",
                self.target,
                exc.strerror or exc,
                self._upstream_failures,
            )

    def stats(self) -> LinkStats:
        """Counters now: totals over every connection so far, and each open connection."""
        up, down = self._closed_up.copy(), self._closed_down.copy()
        conns = [c.snapshot() for c in self._connections]
        for c in conns:
            up.add(c.up)
            down.add(c.down)
        return LinkStats(
            profile=self.profile.name,
            up=up,
            down=down,
            connections_opened=self._opened,
            connections_open=len(conns),
            upstream_failures=self._upstream_failures,
            connections=conns,
        )

    async def stop(self) -> None:
        """Stop listening and drop open connections; returns when every socket is closed."""
        if self._server is None:
            return
        self._server.close()
        self._all_closed = asyncio.Event()
        if not self._connections:
            self._all_closed.set()
        for conn in list(self._connections):
            conn.abort()
        await self._server.wait_closed()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_closed.wait(), _STOP_WAIT_S)
        for conn in list(self._connections):  # sockets that never reported: forget them
            conn._finish()
        self._server = None

    async def __aenter__(self) -> Address:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
