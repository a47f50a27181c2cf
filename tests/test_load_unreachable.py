"""A server that vanishes ends the load early, keeping what was measured.

Against a dead address every request is refused at once, so without this rule a trial
timed out nothing and ran its whole duration (minutes, in a rate search) against nobody.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import loads
import pytest

from servebench.load import LoadSettings, constant
from servebench.load.engine import SERVER_UNREACHABLE

HTTP_TEST_SERVER = Path(__file__).with_name("test_load_http.py")


def _client(url: str):
    from servebench.clients.factory import create_client

    return lambda: create_client("http", url, "test")


class _KillsTheServer:
    """An HTTP client that kills the server's process once it has `after` answers: the kill
    lands mid-run however long the load took to start."""

    def __init__(self, client, server: subprocess.Popen, after: int) -> None:
        self._client, self._server, self._left = client, server, after

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    async def infer(self, payload):
        result = await self._client.infer(payload)
        self._left -= 1
        if self._left == 0:
            self._server.kill()
        return result


def _killing_client(url: str, server: subprocess.Popen, after: int):
    return lambda: _KillsTheServer(_client(url)(), server, after)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("closed_loop", [False, True])
def test_a_dead_address_stops_the_load_early(closed_loop: bool) -> None:
    url = f"http://127.0.0.1:{_free_port()}/work"
    load = {"concurrency": 2} if closed_loop else {"arrivals": constant(50)}
    summary = loads.load(_client(url), LoadSettings(duration=60, unreachable_after=1.0, **load))
    # Ended early: sends were due for 60 s, yet first send to last answer took less.
    assert summary.duration < 60
    assert summary.verdict == "INVALID"
    assert any(SERVER_UNREACHABLE in reason for reason in summary.reasons), summary.reasons
    assert summary.ok == 0 and summary.errors_by_kind.get("connection_refused", 0) > 0


def test_a_server_killed_mid_run_stops_the_load_and_keeps_its_answers(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(HTTP_TEST_SERVER), "serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(proc.stdout.readline())
        summary = loads.load(
            _killing_client(f"http://127.0.0.1:{port}/work", proc, after=50),
            LoadSettings(arrivals=constant(50), duration=60, unreachable_after=1.0),
            records=tmp_path / "r.parquet",
        )
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert summary.duration < 60  # ended early (sends were due for 60 s)
    assert summary.ok >= 50  # the answers before the kill
    assert any(SERVER_UNREACHABLE in reason for reason in summary.reasons), summary.reasons
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "r.parquet").num_rows == summary.count


def test_without_the_rule_the_load_runs_its_course() -> None:
    url = f"http://127.0.0.1:{_free_port()}/work"
    settings = LoadSettings(arrivals=constant(50), duration=2.5, unreachable_after=None)
    summary = loads.load(_client(url), settings)
    assert summary.count == 125 and summary.errors == 125
    assert not any(SERVER_UNREACHABLE in reason for reason in summary.reasons)
