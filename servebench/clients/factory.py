"""Protocol name → client, so callers (CLI, scenario runner) never import a client.

The protocols and their client classes are the registry's (`registry.PROTOCOLS`); a client
module is imported only when its protocol is chosen. A factory made with
`functools.partial(create_client, ...)` pickles, which is what the load engine's worker
processes need.
"""

from __future__ import annotations

from typing import Any

from servebench.clients.base import InferenceClient
from servebench.clients.registry import protocol as find_protocol


def create_client(
    protocol: str, url: str, model: str, *, version: str | None = None, **options: Any
) -> InferenceClient:
    """Build (not connect) the client for `protocol`; options go to its constructor."""
    cls = find_protocol(protocol).client_class()
    try:
        return cls(url, model, version=version, **options)
    except TypeError as exc:
        raise ValueError(f"protocol {protocol!r}: bad client option ({exc})") from exc
