"""Launching, readiness, model load and stopping of the servers a benchmark talks to.

Every kind is one entry of `kinds.KINDS` (how it starts, what it serves, which settings it
takes) whose server is a `Server` (see `base`); servers are made through it
(`ServerKind.build` from a scenario's section, `kinds.create_server` by name).
`LocalTritonServer` (kind `triton-local`) runs the tritonserver binary from the
nvidia-pytriton wheel on loopback ports, on repositories from
`model_zoo.export.export_triton` (its `triton-python` form). Every error is a `ServerError`.
"""

from servebench.servers.base import (
    Server,
    ServerEndpoints,
    ServerError,
    ServerModelError,
    ServerStartError,
)
from servebench.servers.local import LocalTritonServer
from servebench.servers.triton_install import TritonInstall, TritonNotInstalledError

__all__ = [
    "LocalTritonServer",
    "Server",
    "ServerEndpoints",
    "ServerError",
    "ServerModelError",
    "ServerStartError",
    "TritonInstall",
    "TritonNotInstalledError",
]
