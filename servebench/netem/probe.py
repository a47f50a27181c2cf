"""A tiny local echo / source / sink server and blocking clients that measure a link.

The server runs its own event loop in a thread so a measuring client can use plain
blocking sockets: a blocking recv() wakes the moment bytes arrive, with no event-loop
hop of its own, which keeps the measuring tool's overhead out of the figures.

Wire protocol (first byte of a connection picks the mode):
  b"E"            echo every byte back;
  b"D" + u64 N    the server sends N bytes (download);
  b"U" + u64 N    the client sends N bytes; the server answers with two f64/u64 fields:
                  seconds from the first to the last byte's arrival, and the bytes that
                  arrived after the first read (upload).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from servebench.netem.address import Address
from servebench.netem.clock import try_realtime_priority

T = TypeVar("T")

_LEN = struct.Struct("!Q")
_UPLOAD_REPLY = struct.Struct("!dQ")
_CHUNK = 256 * 1024
_ZEROS = bytes(_CHUNK)


class _ProbeProtocol(asyncio.Protocol):
    """One probe connection; callbacks, so the server adds as little latency as it can."""

    def __init__(self, transports: set[asyncio.BaseTransport]) -> None:
        self.transports = transports  # the server's open connections, aborted at its stop
        self.transport: asyncio.Transport | None = None
        self.header = b""
        self.mode = b""
        self.remaining = 0
        self.paused = False
        self.t_first = self.t_last = 0.0
        self.after_first = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transports.discard(self.transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self.mode == b"E":
            self.transport.write(data)  # type: ignore[union-attr]
        elif self.mode == b"U":
            self._upload(data)
        elif not self.mode:
            self._header(data)

    def _header(self, data: bytes) -> None:
        self.header += data
        if self.header[:1] == b"E":
            self.mode, rest = b"E", self.header[1:]
            if rest:
                self.transport.write(rest)  # type: ignore[union-attr]
        elif len(self.header) >= 1 + _LEN.size:
            self.mode = self.header[:1]
            (self.remaining,) = _LEN.unpack(self.header[1 : 1 + _LEN.size])
            rest = self.header[1 + _LEN.size :]
            if self.mode == b"D":
                self._pump()
            elif self.mode == b"U" and rest:
                self._upload(rest)
            elif self.mode not in (b"D", b"U"):
                self.transport.close()  # type: ignore[union-attr]

    def _upload(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.t_first:
            self.t_first = now
        else:
            self.after_first += len(data)
        self.t_last = now
        self.remaining -= len(data)
        if self.remaining <= 0:
            reply = _UPLOAD_REPLY.pack(self.t_last - self.t_first, self.after_first)
            self.transport.write(reply)  # type: ignore[union-attr]

    def _pump(self) -> None:
        view = memoryview(_ZEROS)
        while self.remaining and not self.paused:
            n = min(self.remaining, _CHUNK)
            self.remaining -= n
            self.transport.write(view[:n])  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.mode == b"D":
            self._pump()


@contextlib.contextmanager
def probe_server(host: str = "127.0.0.1", *, realtime: bool = False) -> Iterator[Address]:
    """Run the probe server on a free loopback port for the duration of the block.

    With `realtime` its thread asks for a real-time scheduling class (where allowed), so
    that on a busy machine the figures measure the link, not the run queue.
    """
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}
    transports: set[asyncio.BaseTransport] = set()

    async def serve() -> None:
        server = await loop.create_server(lambda: _ProbeProtocol(transports), host, 0)
        box["address"] = Address(*server.sockets[0].getsockname()[:2])
        box["stop"] = stop = asyncio.Event()
        started.set()
        async with server:
            await stop.wait()
            for transport in list(transports):
                transport.abort()  # type: ignore[attr-defined]

    def run() -> None:
        if realtime:
            try_realtime_priority()
        try:
            loop.run_until_complete(serve())
        except BaseException as exc:  # reported to the waiting caller below
            box["error"] = exc
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="netem-probe-server", daemon=True)
    thread.start()
    started.wait()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    try:
        yield box["address"]  # type: ignore[misc]
    finally:
        loop.call_soon_threadsafe(box["stop"].set)  # type: ignore[attr-defined]
        thread.join(timeout=5)


def in_realtime_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking measurement in a thread with a real-time class (where allowed).

    A thread of its own, because the class belongs to the thread and the caller's
    thread should not keep it.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try_realtime_priority()
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="netem-probe-client")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _connect(address: Address, mode: bytes, timeout_s: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(mode)
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        if not data:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += data
    return bytes(buf)


def measure_rtts(
    address: Address, count: int, *, size: int = 16, warmup: int = 2, timeout_s: float = 30.0
) -> list[float]:
    """Round-trip times of `count` sequential `size`-byte echoes over one connection.

    The first `warmup` echoes are dropped: they include the emulated TCP handshake.
    """
    message = bytes(size)
    rtts = []
    with _connect(address, b"E", timeout_s) as sock:
        for i in range(warmup + count):
            t0 = time.perf_counter()
            sock.sendall(message)
            _recv_exactly(sock, size)
            if i >= warmup:
                rtts.append(time.perf_counter() - t0)
    return rtts


def measure_download(address: Address, nbytes: int, *, timeout_s: float = 60.0) -> float:
    """Bytes/s the server → client direction delivered, first to last byte."""
    with _connect(address, b"D" + _LEN.pack(nbytes), timeout_s) as sock:
        buf = bytearray(1 << 20)
        got = sock.recv_into(buf)
        if not got:
            raise ConnectionError("connection closed before the first byte")
        t_first = time.perf_counter()
        received = got
        while received < nbytes:
            n = sock.recv_into(buf)
            if not n:
                raise ConnectionError(f"connection closed after {received} of {nbytes} bytes")
            received += n
        elapsed = time.perf_counter() - t_first
    return (nbytes - got) / elapsed


def measure_upload(address: Address, nbytes: int, *, timeout_s: float = 60.0) -> float:
    """Bytes/s the client → server direction delivered, timed where the bytes arrive."""
    with _connect(address, b"U" + _LEN.pack(nbytes), timeout_s) as sock:
        view = memoryview(_ZEROS)
        remaining = nbytes
        while remaining:
            n = min(remaining, _CHUNK)
            sock.sendall(view[:n])
            remaining -= n
        elapsed, after_first = _UPLOAD_REPLY.unpack(_recv_exactly(sock, _UPLOAD_REPLY.size))
    return after_first / elapsed
