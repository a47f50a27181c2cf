"""Protocol name → client class, so callers (CLI, scenario runner) never import a client.

Entries are "module:Class" strings resolved on use: the Triton and TF Serving clients pull
in tritonclient and TensorFlow, which must not load just because another protocol was
chosen. A factory made with `functools.partial(create_client, ...)` pickles, which is what
the load engine's worker processes need.
"""

from __future__ import annotations

import importlib
from typing import Any

from servebench.clients.base import InferenceClient

CLIENTS: dict[str, str] = {
    "http": "servebench.clients.rawhttp:RawHttpClient",
    "triton-http": "servebench.clients.triton_http:TritonHttpClient",
    "triton-grpc": "servebench.clients.triton_grpc:TritonGrpcClient",
    "tfs-rest": "servebench.clients.tfs_rest:TfsRestClient",
    "tfs-grpc": "servebench.clients.tfs_grpc:TfsGrpcClient",
}


def protocols() -> list[str]:
    return sorted(CLIENTS)


def create_client(
    protocol: str, url: str, model: str, *, version: str | None = None, **options: Any
) -> InferenceClient:
    """Build (not connect) the client for `protocol`; options go to its constructor."""
    try:
        target = CLIENTS[protocol]
    except KeyError:
        raise ValueError(f"protocol: {protocol!r} is not one of {', '.join(protocols())}") from None
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(url, model, version=version, **options)
    except TypeError as exc:
        raise ValueError(f"protocol {protocol!r}: bad client option ({exc})") from exc
