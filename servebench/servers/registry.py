"""Server kinds by name, as scenarios and the command line spell them."""

from __future__ import annotations

import inspect
from typing import Any

from servebench.servers.base import Server
from servebench.servers.docker_tfs import TfsDocker
from servebench.servers.docker_triton import TritonDocker
from servebench.servers.local import LocalTritonServer
from servebench.servers.remote import RemoteServer

SERVER_KINDS: dict[str, type[Server]] = {
    cls.kind: cls for cls in (LocalTritonServer, TritonDocker, TfsDocker, RemoteServer)
}


def server_class(kind: str) -> type[Server]:
    try:
        return SERVER_KINDS[kind]
    except KeyError:
        raise ValueError(
            f"server kind: unknown {kind!r}; expected one of {', '.join(SERVER_KINDS)}"
        ) from None


def server_settings(kind: str) -> list[str]:
    """The setting names a kind accepts (its constructor's parameters)."""
    params = inspect.signature(server_class(kind).__init__).parameters
    return [name for name in params if name != "self"]


def create_server(kind: str, **settings: Any) -> Server:
    """A `Server` of `kind` built from `settings`; unknown or missing settings are named."""
    cls = server_class(kind)
    accepted = server_settings(kind)
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        raise ValueError(
            f"server kind {kind!r}: unknown setting(s) {', '.join(unknown)}; "
            f"accepted: {', '.join(accepted)}"
        )
    params = inspect.signature(cls.__init__).parameters
    missing = [
        name
        for name, p in params.items()
        if name != "self" and p.default is inspect.Parameter.empty and name not in settings
    ]
    if missing:
        raise ValueError(f"server kind {kind!r}: missing setting(s) {', '.join(missing)}")
    return cls(**settings)
