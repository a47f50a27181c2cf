"""The local Triton on an export folder by hand (`servebench models serve`): which of the
folder's repositories the bundled tritonserver can run, and one inference per model to
show it answers.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from model_zoo.export.triton import (
    ONNX_FILE,
    PYTHON_REPOSITORY,
    STANDARD_REPOSITORY,
    TORCHSCRIPT_FILE,
)
from servebench.servers.errors import ServerStartError


def runnable_repository(path: Path) -> Path:
    """The python-backend repository the bundled tritonserver can run.

    An export folder is accepted as well as the repository itself; a standard repository
    (the onnxruntime or libtorch platform) is refused with the path of its runnable twin,
    since the binary shipped in the nvidia-pytriton wheel has only the python backend
    (a ServerStartError naming the folder to serve instead).
    """
    if (path / PYTHON_REPOSITORY).is_dir():
        return path / PYTHON_REPOSITORY
    configs = sorted(path.glob("*/config.pbtxt"))
    if not configs:
        raise ServerStartError(
            f"{path}: no model folders with config.pbtxt (not a Triton repository)"
        )
    platforms = (ONNX_FILE.platform, TORCHSCRIPT_FILE.platform)
    if path.name == STANDARD_REPOSITORY and any(p in configs[0].read_text() for p in platforms):
        raise ServerStartError(
            f"{path}: the local tritonserver has only the python backend; "
            f"serve {path.parent / PYTHON_REPOSITORY} instead"
        )
    return path


def smoke_infer(http_url: str, model: str) -> str:
    """One inference with seeded inputs shaped from the server's own metadata."""
    import tritonclient.http as httpclient
    from tritonclient.utils import triton_to_np_dtype

    client = httpclient.InferenceServerClient(http_url.removeprefix("http://"))
    try:
        metadata = client.get_model_metadata(model)
        rng = np.random.default_rng(0)
        inputs = []
        for tensor in metadata["inputs"]:
            shape = [1 if d < 0 else d for d in tensor["shape"]]
            dtype = triton_to_np_dtype(tensor["datatype"])
            infer_input = httpclient.InferInput(tensor["name"], shape, tensor["datatype"])
            infer_input.set_data_from_numpy(rng.standard_normal(shape).astype(dtype))
            inputs.append(infer_input)
        started = time.perf_counter()
        result = client.infer(model, inputs)
        elapsed_ms = (time.perf_counter() - started) * 1e3
        outputs = {t["name"]: result.as_numpy(t["name"]) for t in metadata["outputs"]}
    finally:
        client.close()
    shapes = ", ".join(f"{name} {tuple(array.shape)}" for name, array in outputs.items())
    return f"{shapes} in {elapsed_ms:.1f} ms"
