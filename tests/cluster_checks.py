"""What the cluster tests share: tiny self-contained scenarios (one small dense model, one
short trial) and free loopback ports.

`local_scenario` starts its own Triton in the job (export, server start, model load: the
whole runner, ~15 s); `remote_scenario` measures a Triton the test already serves (conftest's
`triton_dense_model`), about half as long, for tests that need many jobs.
"""

from __future__ import annotations

import socket
from typing import Any

_WORKLOAD = """\
workload:
  rates: [20]
  batch_sizes: [1]
  duration_s: {duration}
  warmup_s: 0.1
  timeout_s: 2
links: [direct]
"""

LOCAL = (
    """\
name: {name}
models:
  specs:
    - {{layer_type: dense, depth: 1, width: {width}, input_shape: [4], num_outputs: 3}}
servers:
  - name: triton
    kind: triton
    settings: {{max_batch_size: 4, dynamic_batching: false}}
"""
    + _WORKLOAD
)

REMOTE = (
    """\
name: {name}
models:
  specs:
    - {spec}
servers:
  - name: served
    kind: triton
    launch: remote
    url: {url}
"""
    + _WORKLOAD
)


def local_scenario(name: str, *, width: int = 8, duration: float = 0.5) -> str:
    """A job that exports its model and starts its own Triton (everything inline: a job
    carries no files)."""
    return LOCAL.format(name=name, width=width, duration=duration)


def remote_scenario(name: str, served: Any, *, duration: float = 0.5) -> str:
    """A job against `served` (a conftest `ServedModel`), which it checks but never loads."""
    spec = served.spec
    text = (
        f"{{layer_type: {spec.layer_type}, depth: {spec.depth}, width: {spec.width}, "
        f"input_shape: {list(spec.input_shape)}, num_outputs: {spec.num_outputs}}}"
    )
    return REMOTE.format(
        name=name, spec=text, url=served.server.endpoints.http_url, duration=duration
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
