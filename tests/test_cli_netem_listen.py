"""`servebench netem proxy --listen` on an address other machines can reach says so."""

from __future__ import annotations

import pytest
from test_netem_cli import run_proxy

from servebench.netem.address import Address
from servebench.netem.probe import measure_rtts


def one_ping(address: Address) -> None:
    host = "127.0.0.1" if address.host == "0.0.0.0" else address.host
    assert measure_rtts((host, address.port), 1)


@pytest.mark.parametrize(
    ("listen", "warned"), [("0.0.0.0:0", True), ("127.0.0.1:0", False), ("localhost:0", False)]
)
def test_listening_beyond_loopback_is_warned(listen: str, warned: bool):
    code, err = run_proxy("--profile", "direct", "--listen", listen, use=one_ping)
    assert code == 0, err
    warning = "other machines can connect to this link"
    assert (warning in err) is warned, err
    if warned:
        assert "--listen 0.0.0.0:0" in err and "listen on 127.0.0.1" in err
