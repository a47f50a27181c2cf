"""Reading the `url` a user gives into what each transport needs, with errors naming it.

People write server addresses every way: `http://host:8000`, `host:8000`, `grpc://host:8001`.
Both HTTP clients want a base URL; both gRPC clients want the `host:port` target gRPC takes.
"""

from __future__ import annotations

from urllib.parse import quote

from yarl import URL

GRPC_SCHEMES = ("grpc", "http", "")


def http_base(url: str) -> URL:
    """`http(s)://host:port[/prefix]` (a bare `host:port` means http), without a trailing /."""
    text = url.strip()
    if "://" not in text:
        text = f"http://{text}"
    try:
        parsed = URL(text)
    except ValueError as exc:
        raise ValueError(f"url: {url!r} is not a URL ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"url: {url!r} is not an http(s) URL with a host")
    if parsed.query_string or parsed.fragment:
        raise ValueError(f"url: {url!r}: give the server's base URL, without query or fragment")
    return parsed.with_path(parsed.path.rstrip("/"))


def grpc_target(url: str) -> str:
    """`host:port` from `host:port`, `grpc://host:port` or `http://host:port`."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if scheme not in GRPC_SCHEMES:
        raise ValueError(f"url: {url!r}: a gRPC address is host:port (or grpc://host:port)")
    rest = rest.rstrip("/")
    try:
        parsed = URL(f"grpc://{rest}")
    except ValueError as exc:
        raise ValueError(f"url: {url!r} is not a host:port address ({exc})") from None
    if not parsed.host or parsed.explicit_port is None or parsed.path not in ("", "/"):
        raise ValueError(f"url: {url!r}: a gRPC address is host:port, with a port")
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    return f"{host}:{parsed.explicit_port}"


def path_segment(name: str) -> str:
    """A model name as one URL path segment (names may hold characters URLs reserve)."""
    return quote(name, safe="")
