"""The small dense model (8 -> 4, batch <= 64) the client benchmarks serve on the local
Triton: `clients_cpu.py` and `locust_users.py` compare their figures, so both measure
against this one model and server."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.servers.base import Server
from servebench.servers.kinds import create_server

SPEC = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)


@contextmanager
def served_dense_model() -> Iterator[tuple[Server, str]]:
    """The model exported to a temporary folder and served by a local Triton: (the server,
    its name); the folder goes with the server."""
    with tempfile.TemporaryDirectory(prefix="bench-dense-") as tmp:
        out = Path(tmp)
        export = export_triton(build_torch(SPEC), SPEC, out, TritonSettings(max_batch_size=64))
        with create_server(
            "triton-local", model_repository=out / PYTHON_REPOSITORY, load_models=[export.name]
        ) as server:
            yield server, export.name
