"""What the cluster tests share: tiny self-contained scenarios (one small dense model, one
short trial, or `rates` trials), free loopback ports, and servebench commands run as
children.

`local_scenario` starts its own Triton in the job (export, server start, model load: the
whole runner, ~15 s); `remote_scenario` measures a Triton the test already serves (conftest's
`triton_dense_model`), about half as long, for tests that need many jobs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "servebench.cli", "cluster"]

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
    api: triton
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
    api: triton
    launch: remote
    url: {url}
"""
    + _WORKLOAD
)


def local_scenario(name: str, *, width: int = 8, duration: float = 0.5, trials: int = 1) -> str:
    """A job that exports its model and starts its own Triton (everything inline: a job
    carries no files); `trials` load levels (20, 21, ... requests/s)."""
    return _rates(LOCAL.format(name=name, width=width, duration=duration), trials)


def _rates(text: str, trials: int) -> str:
    return text.replace("rates: [20]", f"rates: {list(range(20, 20 + trials))}")


def remote_scenario(name: str, served: Any, *, duration: float = 0.5, trials: int = 1) -> str:
    """A job against `served` (a conftest `ServedModel`), which it checks but never loads;
    `trials` load levels."""
    spec = served.spec
    text = (
        f"{{layer_type: {spec.layer_type}, depth: {spec.depth}, width: {spec.width}, "
        f"input_shape: {list(spec.input_shape)}, num_outputs: {spec.num_outputs}}}"
    )
    return _rates(
        REMOTE.format(
            name=name, spec=text, url=served.server.endpoints.http_url, duration=duration
        ),
        trials,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def child(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A servebench command in its own process group, whose leftovers are killed at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
