"""Launching, readiness, model load and stopping of the servers a benchmark talks to.

`LocalTriton` runs the tritonserver binary from the nvidia-pytriton wheel on loopback
ports; repositories for it come from `model_zoo.export.export_triton` (its `triton-python`
form).
"""

from servebench.servers.triton_install import TritonInstall, TritonNotInstalledError
from servebench.servers.triton_local import (
    LocalTriton,
    TritonEndpoints,
    TritonError,
    TritonModelError,
    TritonStartError,
)

__all__ = [
    "LocalTriton",
    "TritonEndpoints",
    "TritonError",
    "TritonInstall",
    "TritonModelError",
    "TritonNotInstalledError",
    "TritonStartError",
]
