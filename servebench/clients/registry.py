"""Every protocol servebench speaks, defined once: its name, transport, ports and code.

Everything that needs to know about protocols reads this table instead of keeping its
own list: the client factory (`factory.create_client`), the scenario runner (which
protocol a server kind speaks over HTTP or gRPC), the Locust users (options, transports,
the `protocol` column), `servebench load` (default metrics page, port hints) and the
protocol sniffer (`sniff`). Adding a protocol is one entry here plus its module in
`servebench.clients`: a codec (`codec.HttpCodec` or `codec.GrpcCodec`: requests and
answers, no I/O) and a client (the codec on an async transport).

A client is named as "module:Class" of `servebench.clients` and imported on use (the
Triton and TF Serving modules pull in tritonclient and TensorFlow, which must not load
because another protocol exists); a model protocol's client names its codec.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Literal

from servebench.common.wellknown import (
    TFS_GRPC_PORT,
    TFS_REST_PORT,
    TRITON_GRPC_PORT,
    TRITON_HTTP_PORT,
    TRITON_METRICS_PORT,
)

Transport = Literal["http", "grpc"]


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol servebench speaks.

    `server` is the serving system's API it talks to (`triton`, `tfs`, the server kinds of
    a scenario), None for a protocol that talks to any endpoint (`http`). `default_port`
    is where that server listens for it unless told otherwise; `metrics_port` where the
    server publishes Prometheus metrics by default (None: not on a port of its own). Both
    come from `servebench.common.wellknown`, which the container launchers read too.
    `client` is the client class, as "module:Class" of `servebench.clients`.
    """

    name: str
    transport: Transport
    server: str | None
    default_port: int | None
    metrics_port: int | None
    client: str

    def client_class(self) -> type:
        module, _, name = self.client.partition(":")
        return getattr(importlib.import_module(f"servebench.clients.{module}"), name)

    def codec_class(self) -> Any:
        """The codec class the client speaks through (`codec_class`); None for a protocol
        with no model format, like `http`."""
        return getattr(self.client_class(), "codec_class", None)

    def accepts(self, option: str) -> bool:
        """Whether the codec takes keyword `option` (Locust passes only those it takes)."""
        codec = self.codec_class()
        return codec is not None and option in inspect.signature(codec).parameters


# Order matters where a list is shown or tried: Triton first (the sniffer must ask Triton
# before TF Serving, since Triton answers TF Serving's REST model path too).
PROTOCOLS: dict[str, ProtocolSpec] = {
    spec.name: spec
    for spec in (
        # name, transport, server, default_port, metrics_port, client
        ProtocolSpec("triton-http", "http", "triton", TRITON_HTTP_PORT, TRITON_METRICS_PORT, "triton_http:TritonHttpClient"),
        ProtocolSpec("triton-grpc", "grpc", "triton", TRITON_GRPC_PORT, TRITON_METRICS_PORT, "triton_grpc:TritonGrpcClient"),
        ProtocolSpec("tfs-rest", "http", "tfs", TFS_REST_PORT, None, "tfs_rest:TfsRestClient"),
        ProtocolSpec("tfs-grpc", "grpc", "tfs", TFS_GRPC_PORT, None, "tfs_grpc:TfsGrpcClient"),
        ProtocolSpec("http", "http", None, None, None, "rawhttp:RawHttpClient"),
    )
}  # fmt: skip


def names() -> list[str]:
    """Every protocol name, sorted (for messages and help)."""
    return sorted(PROTOCOLS)


def model_protocols() -> tuple[str, ...]:
    """The protocols that talk to a model server (and so have a codec), in table order."""
    return tuple(name for name, spec in PROTOCOLS.items() if spec.server is not None)


def protocol(name: str) -> ProtocolSpec:
    """The protocol called `name`; ValueError naming the choices otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"protocol: {name!r} is not one of {', '.join(names())}") from None


def for_server(server: str, transport: str) -> ProtocolSpec:
    """The protocol a `server` kind (`triton`, `tfs`) speaks over `transport` (http, grpc)."""
    for spec in PROTOCOLS.values():
        if spec.server == server and spec.transport == transport:
            return spec
    raise ValueError(f"no protocol for server kind {server!r} over {transport!r}")
