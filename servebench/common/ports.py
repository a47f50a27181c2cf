"""Free loopback ports for servers that servebench starts itself."""

from __future__ import annotations

import socket
from contextlib import ExitStack

LOOPBACK = "127.0.0.1"


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports that were free on `host` a moment ago.

    The sockets are held open together so the kernel cannot hand out the same port twice,
    then closed so the server can bind them. Another process may still take one in between;
    launchers retry with fresh ports when a bind fails.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether `port` can be bound on `host` now (a fixed port someone asked for)."""
    return bind_error(port, host) is None


def port_accepts(port: int, host: str = LOOPBACK, timeout_s: float = 0.5) -> bool:
    """Whether something listens on `host:port` now (a connection is accepted)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def bind_error(port: int, host: str = LOOPBACK) -> OSError | None:
    """Why `port` cannot be bound on `host` now (in use, or privileged), or None if it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None
