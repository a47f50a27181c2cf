"""Integration: the load generator drives HTTP requests through an emulated link.

The link's RTT must show up in the generator's latency figures, and the emulator's counters
must account for the bytes. The RTT is a floor under every latency through the link, and
one request faster than two RTTs shows it adds one, not one per direction (the emulator's
own ±10 % accuracy is test_netem_emulator's).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path

import loads
import pytest
from link_checks import rtt_floor_s

from servebench.netem import Address, LinkEmulator, LinkProfile

LINK = LinkProfile(name="office", down_mbps=50, up_mbps=50, rtt_s=0.040)
BODY = b'{"outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[0.5,0.25]}]}'


@contextlib.contextmanager
def http_server() -> Iterator[Address]:
    """A tiny aiohttp server on a free loopback port, in its own thread and loop."""
    from aiohttp import web

    async def work(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=BODY, content_type="application/json")

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict = {}

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/work", work)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["address"] = Address(*site._server.sockets[0].getsockname()[:2])  # type: ignore[union-attr]
        box["stop"] = asyncio.Event()
        ready.set()
        await box["stop"].wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield box["address"]
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(10)
        loop.close()


def _load(address: Address, records: Path | None = None):  # type: ignore[no-untyped-def]
    from servebench.clients.factory import create_client
    from servebench.load import LoadSettings, constant

    factory = functools.partial(create_client, "http", f"http://{address}/work", "test")
    settings = LoadSettings(arrivals=constant(50), duration=2.0, warmup=0.5)
    return loads.load(factory, settings, records=records, use_uvloop=None)


def test_load_generator_through_a_link(tmp_path: Path):
    pytest.importorskip("servebench.load")
    from servebench.load import read_records

    records = tmp_path / "linked.parquet"
    with http_server() as server:
        direct = _load(server)
        emulator = LinkEmulator(LINK, server)
        with emulator as address:
            linked = _load(address, records)
    assert direct.errors == 0 and linked.errors == 0, linked.errors_by_kind
    assert linked.count == direct.count == 100  # 50 req/s over the 2 s after the warm-up
    latency = read_records(records)["latency"].to_numpy()
    # Every request crossed the link up and back: one RTT at least (less what the emulator
    # may deliver early, link_checks), whatever the load.
    assert latency.min() >= rtt_floor_s(LINK)
    # What the link adds is one RTT (plus < 0.1 ms of serialization), not one per direction
    # or per segment, which would hold every request 2 RTTs at least: the fastest of the
    # 100, the one the busy machine delayed least, crossed in under 2 RTTs.
    assert latency.min() < 2 * LINK.rtt_s
    stats = emulator.final_stats
    assert stats is not None and stats.connections_opened >= 1
    assert stats.down.bytes_out >= linked.count * len(BODY)
    assert stats.up.bytes_out == stats.up.bytes_in
