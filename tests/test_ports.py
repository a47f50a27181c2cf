"""Loopback ports: what a launcher probes before it binds, and how it knows a server listens."""

from __future__ import annotations

import socket

from servebench.common.ports import LOOPBACK, free_ports, port_accepts, port_is_free


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3
    assert all(port_is_free(port) for port in ports)


def test_port_accepts_only_while_something_listens() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port = sock.getsockname()[1]
        assert not port_accepts(port)  # bound, not listening: a server still starting
        sock.listen()
        assert port_accepts(port)
        assert not port_is_free(port)
    assert not port_accepts(port)
