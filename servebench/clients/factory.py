"""Protocol name → client, so callers (CLI, scenario runner) never import a client.

The protocols and their client classes are the registry's (`registry.PROTOCOLS`); a client
module is imported only when its protocol is chosen. A factory made with
`functools.partial(create_client, ...)` pickles, which is what the load engine's worker
processes need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ModelClients:
    """Clients of one protocol at one URL, one per model asked for: a load plan's client
    source (`load.plan.ClientSource`). `served` maps a plan's model ids to the names the
    server serves them under (a load of one model: its empty id to its name). It pickles,
    so a gang's generators make theirs from it."""

    protocol: str
    url: str
    served: tuple[tuple[str, str], ...]
    version: str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def for_part(self, index: int, models: Sequence[str]) -> list[InferenceClient]:
        served = dict(self.served)
        return [
            create_client(
                self.protocol, self.url, served[m], version=self.version, **dict(self.options)
            )
            for m in models
        ]
