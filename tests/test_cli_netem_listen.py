"""`servebench netem proxy --listen` on an address other machines can reach says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.netem.address import parse_address
from servebench.netem.probe import measure_rtts, probe_server


def run_proxy(listen: str) -> tuple[int, str]:
    """Start the proxy, send one ping through it, stop it with Ctrl-C; (exit code, stderr)."""
    with probe_server() as server:
        argv = ["netem", "proxy", "--profile", "direct", "--to", str(server), "--listen", listen]
        proc = subprocess.Popen(
            [sys.executable, "-m", "servebench.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        try:
            address = parse_address(proc.stdout.readline().strip(), "printed address")
            host = "127.0.0.1" if address.host == "0.0.0.0" else address.host
            assert measure_rtts((host, address.port), 1)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize(
    ("listen", "warned"), [("0.0.0.0:0", True), ("127.0.0.1:0", False), ("localhost:0", False)]
)
def test_listening_beyond_loopback_is_warned(listen: str, warned: bool):
    code, err = run_proxy(listen)
    assert code == 0, err
    warning = "other machines can connect to this link"
    assert (warning in err) is warned, err
    if warned:
        assert "--listen 0.0.0.0:0" in err and "listen on 127.0.0.1" in err
