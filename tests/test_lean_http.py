"""The lean HTTP/1.1 transport (issue 16) against servers that misbehave on purpose.

Each failure is classified on the lean transport exactly as on aiohttp (the transport it
replaces as the default): both run every case. The misbehaving server is raw asyncio in
the test's own loop, so it can close mid-answer, reset, stall, send garbage or chunk.
"""

from __future__ import annotations

import asyncio
import math
import socket
import struct
from typing import Any

import loads
import pytest
from client_checks import random_request

from servebench.clients.base import ErrorKind, InferenceError
from servebench.clients.lean_http import LeanHttpPool, choose_transport, encode_request
from servebench.clients.rawhttp import RawHttpClient
from servebench.load import LoadSettings

TRANSPORTS = ("lean", "aiohttp")
ANSWER = b'{"outputs":[1,2,3]}'


def _answer(status: str = "200 OK", body: bytes = ANSWER, extra: bytes = b"") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n".encode()
    return head + extra + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


async def _read_request(reader: asyncio.StreamReader) -> str:
    """One request's path; its body is read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return lines[0].split()[1]


class Misbehaving:
    """A loopback server whose answer is chosen by the request's path (`/ok`, `/cut`, ...).

    `connections` counts the TCP connections it accepted, to tell reuse from reconnecting.
    """

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Misbehaving:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in asyncio.all_tasks():
            coro = task.get_coro()
            if getattr(coro, "__qualname__", "").startswith("Misbehaving._serve"):
                task.cancel()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                path = await _read_request(reader)
                if not await self._answer(path, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, path: str, writer: asyncio.StreamWriter) -> bool:
        """Write the answer `path` asks for; False to close the connection after it."""
        if path == "/ok":
            writer.write(_answer())
        elif path == "/status":
            writer.write(_answer("503 Service Unavailable", b'{"error":"overloaded"}'))
        elif path == "/close-before":
            return False
        elif path == "/reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        elif path == "/cut":  # headers promise 1,000 bytes; 10 come, then the close
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
            await writer.drain()
            return False
        elif path == "/garbage":
            writer.write(b"HELLO THERE\r\n\r\n")
            await writer.drain()
            return False
        elif path == "/h2":  # what a gRPC port sends first: an HTTP/2 SETTINGS frame
            writer.write(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64")
            await writer.drain()
            return False
        elif path == "/chunked":
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b'7\r\n{"outpu\r\n5\r\nts":[\r\n7\r\n1,2,3]}\r\n0\r\n\r\n'
            )
        elif path == "/until-close":  # no length: the body ends with the connection
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + ANSWER)
            await writer.drain()
            return False
        elif path == "/close-after":  # a whole answer, then this connection is done
            writer.write(_answer(extra=b"Connection: close\r\n"))
            await writer.drain()
            return False
        elif path == "/silent":
            await asyncio.sleep(3600)
        else:
            writer.write(_answer("404 Not Found", b"{}"))
        await writer.drain()
        return True


async def _infer(url: str, transport: str, **kwargs: Any):
    client = RawHttpClient(url, transport=transport, connections=4, **kwargs)
    await client.connect()
    try:
        return await client.infer(await random_request(client, 1))
    finally:
        await client.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_good_answer_is_counted_with_its_send_and_receive_times(transport):
    async with Misbehaving() as server:
        result = await _infer(server.url("/ok"), transport)
    assert result.response_bytes == len(ANSWER)
    assert result.request_bytes > 0
    assert result.send_s >= 0 and result.receive_s >= 0


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("path", "kind", "words"),
    [
        ("/status", ErrorKind.HTTP_STATUS, "503"),
        ("/close-before", ErrorKind.CONNECTION_RESET, ""),
        ("/reset", ErrorKind.CONNECTION_RESET, ""),
        ("/cut", ErrorKind.BAD_RESPONSE, ""),
        ("/garbage", ErrorKind.BAD_RESPONSE, ""),
        ("/h2", ErrorKind.BAD_RESPONSE, ""),
    ],
)
async def test_failures_are_classified_as_aiohttp_classified_them(transport, path, kind, words):
    async with Misbehaving() as server:
        with pytest.raises(InferenceError) as caught:
            await _infer(server.url(path), transport)
    assert caught.value.kind is kind, caught.value
    assert words in str(caught.value)


async def test_lean_names_the_url_and_says_what_went_wrong():
    async with Misbehaving() as server:
        for path, words in [
            ("/cut", "mid-answer"),
            ("/h2", "not HTTP/1.1"),
            ("/close-before", "closed the connection"),
        ]:
            with pytest.raises(InferenceError) as caught:
                await _infer(server.url(path), "lean")
            assert words in str(caught.value)
            assert server.url(path) in str(caught.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_refused_connection(transport, closed_port):
    with pytest.raises(InferenceError) as caught:
        await _infer(f"http://{closed_port}/", transport)
    assert caught.value.kind is ErrorKind.CONNECTION_REFUSED
    assert closed_port in str(caught.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_silent_server_is_a_timeout(transport):
    async with Misbehaving() as server:
        with pytest.raises(InferenceError) as caught:
            await _infer(server.url("/silent"), transport, timeout=0.2)
    assert caught.value.kind is ErrorKind.TIMEOUT


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("path", ["/chunked", "/until-close"])
async def test_chunked_and_close_delimited_answers_are_read_whole(transport, path):
    async with Misbehaving() as server:
        result = await _infer(server.url(path), transport)
    assert result.response_bytes == len(ANSWER)


async def test_connections_are_reused_and_reopened_after_a_close():
    async with Misbehaving() as server:
        pool = LeanHttpPool("127.0.0.1", server.port, 1)
        host = f"127.0.0.1:{server.port}"
        ok = encode_request("GET", "/ok", host, None)
        try:
            for _ in range(5):
                status, body, *_ = await pool.request(ok, "ok")
                assert (status, body) == (200, ANSWER)
            assert server.connections == 1
            await pool.request(encode_request("GET", "/close-after", host, None), "close")
            status, *_ = await pool.request(ok, "ok")
            assert status == 200
            assert server.connections == 2
        finally:
            await pool.close()


async def test_a_cancelled_request_does_not_leave_its_answer_to_the_next_one():
    """The engine's timeout cancels a request; the late answer must not be read as the
    answer to whatever that connection carries next."""
    async with Misbehaving() as server:
        pool = LeanHttpPool("127.0.0.1", server.port, 1)
        host = f"127.0.0.1:{server.port}"
        try:
            task = asyncio.ensure_future(
                pool.request(encode_request("GET", "/silent", host, None), "silent")
            )
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            status, body, *_ = await pool.request(encode_request("GET", "/ok", host, None), "ok")
            assert (status, body) == (200, ANSWER)
            assert server.connections == 2
        finally:
            await pool.close()


async def test_more_requests_than_connections_wait_their_turn():
    async with Misbehaving() as server:
        pool = LeanHttpPool("127.0.0.1", server.port, 2)
        request = encode_request("POST", "/ok", f"127.0.0.1:{server.port}", b"{}")
        try:
            answers = await asyncio.gather(*(pool.request(request, "ok") for _ in range(50)))
        finally:
            await pool.close()
    assert [a[0] for a in answers] == [200] * 50
    assert server.connections == 2


async def test_a_body_larger_than_the_socket_buffers_is_timed_when_it_left():
    async with Misbehaving() as server:
        result = await _infer(server.url("/ok"), "lean", body=b"x" * (16 << 20))
    assert result.request_bytes == 16 << 20
    assert math.isfinite(result.send_s) and result.send_s >= 0


async def test_every_request_is_recorded_on_the_lean_transport():
    async with Misbehaving() as server:
        summary = await loads.load_in_thread(
            lambda: RawHttpClient(server.url("/ok"), connections=8),
            LoadSettings(concurrency=8, count=400),
        )
    assert summary.ok >= 400 and summary.errors == 0
    assert summary.count == summary.ok


def test_transport_choice():
    from yarl import URL

    assert choose_transport("auto", URL("http://h:1/")) == "lean"
    assert choose_transport("auto", URL("https://h:1/")) == "aiohttp"
    with pytest.raises(ValueError, match="lean speaks plain http"):
        choose_transport("lean", URL("https://h:1/"))
    with pytest.raises(ValueError, match="transport: 'h3'"):
        choose_transport("h3", URL("http://h:1/"))


def test_a_header_cannot_smuggle_another():
    with pytest.raises(ValueError, match="not a valid HTTP header"):
        encode_request("GET", "/", "h", None, {"X-A": "1\r\nX-B: 2"})
    wire = encode_request("POST", "/p?q=1", "h:8", b"ab", {"Content-Type": "text/plain"})
    assert wire == (
        b"POST /p?q=1 HTTP/1.1\r\nHost: h:8\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 2\r\n\r\nab"
    )


async def test_triton_answers_are_the_same_on_both_transports(triton_dense_model):
    """The model clients keep their answer checks on the lean transport, and aiohttp stays."""
    import numpy as np

    from servebench.clients.triton_http import TritonHttpClient

    outputs = {}
    for transport in TRANSPORTS:
        address = triton_dense_model.server.endpoints.http_address
        client = TritonHttpClient(address, triton_dense_model.name, transport=transport)
        await client.connect()
        try:
            result = await client.infer(await random_request(client, 3, 5))
        finally:
            await client.close()
        assert math.isfinite(result.send_s) and math.isfinite(result.receive_s)
        outputs[transport] = result.outputs["output"]
    assert outputs["lean"].shape == (3, 4)
    np.testing.assert_array_equal(outputs["lean"], outputs["aiohttp"])
