"""host:port values, parsed once with errors that name the option they came from."""

from __future__ import annotations

from typing import NamedTuple

from servebench.netem.errors import AddressError


class Address(NamedTuple):
    """A TCP address; a tuple so it can be passed straight to socket and asyncio calls."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(value: str | tuple[str, int], field: str) -> Address:
    """Accept "host:port", "[v6]:port" or a (host, port) pair."""
    if isinstance(value, tuple):
        if len(value) != 2:
            raise AddressError(f"{field}: expected (host, port), got {value!r}")
        host, port_value = value
        port_text = str(port_value)
    else:
        text = value.strip()
        if text.startswith("["):
            host, sep, rest = text[1:].partition("]")
            if not sep or not rest.startswith(":"):
                raise AddressError(f"{field}: {value!r} is not [host]:port")
            port_text = rest[1:]
        else:
            host, sep, port_text = text.rpartition(":")
            if not sep:
                raise AddressError(f"{field}: {value!r} has no port (expected host:port)")
    if not host:
        raise AddressError(f"{field}: {value!r} has no host (expected host:port)")
    try:
        port = int(port_text)
    except ValueError:
        raise AddressError(f"{field}: port {port_text!r} in {value!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise AddressError(f"{field}: port {port} in {value!r} is outside 0-65535")
    return Address(host, port)
