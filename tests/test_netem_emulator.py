"""The link emulator end to end: real sockets, a real worker process, measured timing.

The emulator's accuracy promise (RTT and throughput within ±10 % of the profile) is checked
both ways: the worker runs in a real-time scheduling class where it can get one, each
figure is a median over many round trips or a transfer long enough that start-up is
small, and a measurement that misses is taken again (three in all) before the test
fails. Every other timing check is a floor (a link's delay is the least a round trip can take) or a
comparison between two measurements, never a ceiling that holds only on a quiet machine;
the tests wait for conditions rather than for a fixed time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import statistics
import struct
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import serving, until, until_async
from link_checks import rtt_floor_s

from servebench.netem import (
    AddressError,
    EmulatorError,
    LinkEmulator,
    LinkProfile,
    LinkProxy,
    resolve_link,
)
from servebench.netem.check import CheckReport, check_profile
from servebench.netem.probe import measure_download, measure_rtts, probe_server
from servebench.netem.proxy import MAX_EARLY_S

CUSTOM_50 = LinkProfile(name="custom-50", down_mbps=50, up_mbps=50, rtt_s=0.040)
# Enough round trips for a stable median in about 4 s per link.
PINGS = {"wifi": 200, "lte": 60, "custom-50": 100}
# Measurements of a link before the test gives up: a busy machine only ever adds delay, and
# in CI (the other worker starting Triton) one wifi check missed twice in a row, by 2.9 ms
# on the RTT's median, while alone and beside two CPU burners it lands within 5 %.
ATTEMPTS = 3
_REPORTS: dict[str, CheckReport] = {}
_MISSED: dict[str, list[str]] = {}


def _within(report: CheckReport, tolerance: float) -> list[str]:
    misses = []
    for quantity in ("RTT p50", "throughput down", "throughput up"):
        row = report.row(quantity)
        if abs(row.error) > tolerance:
            misses.append(f"{quantity}: {row.measured:.3f} vs {row.configured:.3f} {row.unit}")
    return misses


def measured(name: str) -> CheckReport:
    """One check per profile for the whole module, measured again while it misses, up to
    ATTEMPTS times; the misses are kept for the failure message."""
    if name not in _REPORTS:
        profile = CUSTOM_50 if name == "custom-50" else resolve_link(name)
        misses = _MISSED.setdefault(name, [])
        for _ in range(ATTEMPTS):
            report = check_profile(profile, duration_s=1.5, pings=PINGS[name])
            missed = _within(report, 0.10)
            if not missed:
                break
            baseline = report.row("RTT without emulator p50").measured
            misses.append(f"{'; '.join(missed)} (RTT without emulator {baseline:.3f} ms)")
        _REPORTS[name] = report
    return _REPORTS[name]


@pytest.mark.parametrize("name", ["wifi", "lte", "custom-50"])
def test_rtt_and_throughput_within_ten_percent(name: str):
    report = measured(name)
    assert not _within(report, 0.10), _MISSED[name]


def test_jitter_is_visible_in_the_rtt_spread():
    wifi = measured("wifi")  # 5 ms jitter: the sd of the RTT
    spread_ms = wifi.row("RTT jitter (IQR/1.349)").measured
    # The spread of 200 pings estimates the 5 ms to about ±0.3 ms (one standard error);
    # the machine's noise only widens it.
    assert spread_ms > 2.5
    # Jitter also makes round trips shorter than the RTT, which no delay of a busy machine
    # can. A jitter-free link never goes below the RTT less what the emulator may deliver
    # early (link_checks); at 5 ms of jitter a third of the pings would, and all 200
    # missing it has a chance of 0.66^200 (1e-36). (The exact spread of the jitter model
    # is checked on a controlled clock in test_netem_link.)
    assert min(measured("custom-50").rtts_s) >= rtt_floor_s(CUSTOM_50)
    assert min(wifi.rtts_s) < resolve_link("wifi").rtt_s - 2 * MAX_EARLY_S


# wifi's rates and RTT without its jitter and loss: the RTT is then a floor under each call.
STEADY_WIFI = LinkProfile(name="wifi-steady", down_mbps=30, up_mbps=15, rtt_s=0.020)
LOSSY = LinkProfile(name="lossy", down_mbps=200, up_mbps=200, rtt_s=0.010, loss=0.05)


def test_loss_raises_tail_latency_not_the_median():
    clean_link = LOSSY.model_copy(update={"loss": 0.0})
    with probe_server() as server:
        emulator = LinkEmulator(clean_link, server)
        with emulator as address:
            clean = sorted(measure_rtts(address, 150))
        with LinkEmulator(LOSSY, server) as address:
            lossy = sorted(measure_rtts(address, 150))
    rto = LOSSY.effective_rto_s  # 10 ms + 200 ms: what a ping that lost a segment waits
    # Without loss no segment is lost, so no ping waits for a retransmission.
    assert clean[0] >= rtt_floor_s(clean_link)
    assert emulator.final_stats.up.lost_segments == emulator.final_stats.down.lost_segments == 0
    # With 5 % loss per segment a ping loses one of its two with a chance of 9.75 %, and
    # then waits an RTO at least (a tail loss: nothing follows to trigger a fast
    # retransmit). So the median ping lost nothing: it takes the RTT and the machine's
    # noise, not the RTO (half the RTO splits the two, leaving the noise 95 ms)...
    assert statistics.median(lossy) < rto / 2
    # ...while the slowest waited one: none of 150 losing a segment has a chance of
    # 0.9025^150 (2e-7).
    assert lossy[-1] > 0.15


def test_loss_never_corrupts_or_reorders_a_10_mb_transfer():
    payload = os.urandom(10 * 1024 * 1024)
    with probe_server() as server:
        emulator = LinkEmulator(LOSSY, server)
        with emulator as address, socket.create_connection(address, timeout=30) as sock:
            sock.sendall(b"E")
            sender = threading.Thread(target=sock.sendall, args=(payload,))
            sender.start()
            digest = hashlib.sha256()
            received = 0
            while received < len(payload):
                data = sock.recv(1 << 20)
                assert data, f"connection closed after {received} bytes"
                digest.update(data)
                received += len(data)
            sender.join()
    assert digest.hexdigest() == hashlib.sha256(payload).hexdigest()
    stats = emulator.final_stats
    assert stats is not None
    # 5 % of about 7200 segments each way were "lost" and still arrived intact.
    assert stats.up.lost_segments > 150 and stats.down.lost_segments > 150
    assert stats.up.bytes_out == stats.up.bytes_in == len(payload) + 1


def test_trace_driven_bandwidth(tmp_path: Path):
    trace = tmp_path / "bursty.mahi"
    # 4 opportunities per ms for 50 ms, then nothing until 100 ms: 24 Mbit/s on average.
    trace.write_text("".join(f"{ms}\n" * 4 for ms in range(1, 51)) + "100\n")
    profile = LinkProfile(name="trace", down_trace=trace, up_mbps=10, rtt_s=0.020)
    assert profile.rate_bps("down") == pytest.approx(24.12e6, rel=0.01)
    with probe_server() as server, LinkEmulator(profile, server) as address:
        rate = measure_download(address, int(24e6 / 8 * 1.5)) * 8
        if abs(rate / profile.rate_bps("down") - 1) > 0.10:
            rate = measure_download(address, int(24e6 / 8 * 1.5)) * 8
    assert rate == pytest.approx(profile.rate_bps("down"), rel=0.10)


def test_grpc_call_through_the_link():
    grpc = pytest.importorskip("grpc")
    from concurrent import futures

    def reverse(request: bytes, context: object) -> bytes:
        return request[::-1]

    handler = grpc.method_handlers_generic_handler(
        "servebench.test.Echo", {"Reverse": grpc.unary_unary_rpc_method_handler(reverse)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    payload = os.urandom(100_000)
    try:
        emulator = LinkEmulator(CUSTOM_50, ("127.0.0.1", port))
        with emulator as address, grpc.insecure_channel(str(address)) as channel:
            call = channel.unary_unary("/servebench.test.Echo/Reverse")  # bytes in, bytes out
            assert call(b"warm-up", timeout=10) == b"pu-mraw"
            start = time.perf_counter()
            reply = call(payload, timeout=10)
            elapsed = time.perf_counter() - start
    finally:
        server.stop(0)
    assert reply == payload[::-1]
    # At least one RTT (less what the emulator may deliver early) plus the payload's
    # serialization each way: the answer cannot leave before the whole request arrived.
    assert elapsed >= rtt_floor_s(CUSTOM_50) + 2 * len(payload) * 8 / 50e6
    assert emulator.final_stats.down.bytes_out > len(payload)


async def test_http_call_through_the_link():
    aiohttp = pytest.importorskip("aiohttp")
    from aiohttp import web

    async def reverse(request: web.Request) -> web.Response:
        return web.Response(body=(await request.read())[::-1])

    app = web.Application()
    app.router.add_post("/reverse", reverse)
    payload = os.urandom(50_000)
    async with serving(app) as port:
        emulator = LinkEmulator(STEADY_WIFI, ("127.0.0.1", port))
        async with emulator as address, aiohttp.ClientSession() as session:
            url = f"http://{address}/reverse"
            timings = []
            for _ in range(3):
                start = time.perf_counter()
                async with session.post(url, data=payload) as response:
                    body = await response.read()
                timings.append(time.perf_counter() - start)
                assert response.status == 200
                assert body == payload[::-1]
            stats = await emulator.astats()
    # Keep-alive requests: one RTT (less what the emulator may deliver early) plus 50 kB up
    # at 15 Mbit/s and back at 30 Mbit/s, the answer after the whole request.
    floor = rtt_floor_s(STEADY_WIFI) + 50_000 * 8 / 15e6 + 50_000 * 8 / 30e6
    assert min(timings[1:]) >= floor
    assert stats.connections_open == 1
    assert stats.up.bytes_in > 3 * len(payload)
    assert stats.down.delay_s > 0


def test_many_concurrent_connections():
    profile = LinkProfile(name="busy", down_mbps=100, up_mbps=100, rtt_s=0.010)
    errors: list[BaseException] = []
    with probe_server() as server:
        emulator = LinkEmulator(profile, server)
        with emulator as address:

            def client() -> None:
                try:
                    rtts = measure_rtts(address, 5, size=1000)
                    assert min(rtts) >= rtt_floor_s(profile)
                except BaseException as exc:  # collected and reported below
                    errors.append(exc)

            threads = [threading.Thread(target=client) for _ in range(40)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    assert not errors, errors[:3]
    assert emulator.final_stats.connections_opened == 40
    # All 40 shared one link: 40 × 7 × 1000 bytes went each way.
    assert emulator.final_stats.up.bytes_out == 40 * (1 + 7 * 1000)


def test_slow_link_bounds_its_queue():
    profile = LinkProfile(name="narrow", down_mbps=8, up_mbps=8, rtt_s=0.010)
    queue = profile.effective_queue_bytes("up")
    with probe_server() as server:
        emulator = LinkEmulator(profile, server)
        with emulator as address, socket.create_connection(address) as sock:
            sock.sendall(b"U" + struct.pack("!Q", 50_000_000))
            sock.settimeout(0.01)
            sent = 0
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):  # the link pushes back
                    sent += sock.send(bytes(65536))
            stats = emulator.stats()
    held = stats.up.bytes_in - stats.up.bytes_out
    # The sender feels backpressure: the emulator holds its queue, one read and the
    # bytes in flight, not the megabytes the client tried to push.
    assert held < queue + 256 * 1024 + 8e6 / 8 * 0.010 * 2
    assert sent < 8e6 / 8 * 1.0 + held + 16 * 1024 * 1024  # the rest sits in kernel buffers


def test_stop_with_connections_open():
    profile = LinkProfile(name="slow", down_mbps=1, up_mbps=1, rtt_s=0.050)
    with probe_server() as server:
        emulator = LinkEmulator(profile, server)
        address = emulator.start()
        idle = [socket.create_connection(address) for _ in range(5)]
        busy = socket.create_connection(address)
        busy.sendall(b"D" + struct.pack("!Q", 10**9))

        def all_open_and_sending() -> bool:
            stats = emulator.stats()
            return stats.connections_open == 6 and stats.down.bytes_out > 0

        until(all_open_and_sending, what="6 connections, one of them downloading")
        stats = emulator.stats()
        assert {c.client for c in stats.connections} == {
            "{}:{}".format(*s.getsockname()) for s in [*idle, busy]
        }
        worker = emulator._proc
        final = emulator.stop()
    # A clean stop: a worker that will not stop is killed after stop's timeout, and then
    # has no exit status 0.
    assert worker is not None and worker.returncode == 0
    assert final is not None and final.connections_open == 0 and final.connections_opened == 6
    assert final.down.bytes_out > 0
    assert emulator._proc is None
    for sock in [*idle, busy]:
        _read_until_closed(sock)
        sock.close()


async def test_in_loop_proxy_stops_cleanly_with_connections_open():
    import asyncio

    with probe_server() as server:
        proxy = LinkProxy(LinkProfile(name="x", rtt_s=0.02), server)
        address = await proxy.start()
        streams = [await asyncio.open_connection(*address) for _ in range(3)]
        for _reader, writer in streams:
            writer.write(b"E" + b"x" * 100)
        await until_async(lambda: proxy.stats().connections_open == 3, what="3 connections")
        await proxy.stop()
        assert proxy.stats().connections_open == 0
        for reader, writer in streams:
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                await asyncio.wait_for(reader.readexactly(1000), 2)
            writer.close()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not others


def _read_until_closed(sock: socket.socket) -> None:
    """Bytes already delivered may come first; then EOF or a reset, within 3 s (or fail)."""
    sock.settimeout(3)
    with contextlib.suppress(ConnectionResetError):
        while sock.recv(1 << 20):
            pass


def test_unreachable_target_closes_the_client():
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]  # bound, not listening: connections are refused
        emulator = LinkEmulator(resolve_link("lte"), ("127.0.0.1", port))
        with emulator as address, socket.create_connection(address, timeout=5) as sock:
            _read_until_closed(sock)
            stats = emulator.stats()
    assert stats.upstream_failures == 1


def test_bad_addresses_are_reported():
    with pytest.raises(AddressError, match="target: 'nowhere' has no port"):
        LinkEmulator(resolve_link("wifi"), "nowhere")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EmulatorError, match=f"listen 127.0.0.1:{port}"):
            LinkEmulator(resolve_link("wifi"), "127.0.0.1:9", listen=("127.0.0.1", port)).start()


def _workers() -> list[psutil.Process]:
    """This process's link emulator workers (other tests may have servers running)."""
    return [
        p for p in psutil.Process().children() if "servebench.netem.worker" in " ".join(p.cmdline())
    ]


def test_worker_is_out_of_the_callers_process_group():
    """A terminal's Ctrl-C goes to its whole foreground group; the worker must not be in
    it, or it dies before the runner has stopped the load through it (issue 10)."""
    with probe_server() as server, LinkEmulator(resolve_link("wifi"), server) as address:
        (worker,) = _workers()
        assert os.getpgid(worker.pid) != os.getpgrp()
        with socket.create_connection(address, timeout=5):
            pass


def test_stop_after_the_worker_died_does_not_raise():
    with probe_server() as server:
        emulator = LinkEmulator(resolve_link("wifi"), server)
        emulator.start()
        (worker,) = _workers()
        worker.kill()
        worker.wait(5)
        assert emulator.stop() is None  # no final counters from a dead worker, no error
        assert not psutil.pid_exists(worker.pid)
