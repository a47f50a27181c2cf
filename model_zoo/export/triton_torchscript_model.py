"""Triton python-backend model that runs the TorchScript `model.pt` beside it with torch (CPU).

The importer copies this file to `<repo>/<model>/<version>/model.py` when a user's
TorchScript file is served as it is (torch's ONNX exporter could not convert it). It runs
inside Triton's python stub, which imports the packages of servebench's virtualenv, torch
among them; what it needs to know (tensor names, dtypes, instance count) comes from the
model config Triton hands to `initialize`. The official Triton image runs the same file on
its `pytorch_libtorch` platform instead; this does what that backend does: inputs in the
order of `forward`'s arguments (the config names them so), outputs in the config's order.

servebench's import runs the served file through `load_module` and `run_module` too (its
parity check), so the file is checked the way the server runs it.
"""

import itertools
import json
import os

import numpy as np
import torch

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by servebench's parity check, outside Triton's stub
    pb_utils = None


def set_threads(instances: int) -> None:
    """torch's thread pools for `instances` copies of this model sharing the host's cores.

    Every instance is a separate stub process, and torch's defaults give each one an
    intra-op pool as large as the machine and an inter-op pool as large again: two
    instances on two cores would run four busy threads and slow each other down. The
    cores are split between instances (the same rule as the onnxruntime model), and the
    inter-op pool, which only runs forked subgraphs, keeps one thread: Triton already
    runs one batch per instance at a time. Called once, first thing in the process
    (torch refuses to resize the inter-op pool after it has been used).
    """
    # The cores this process may run on (a container's CPU set), not the host's count.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(max(1, (cores or 1) // max(1, instances)))
    torch.set_num_interop_threads(1)


def load_module(path: str) -> torch.jit.ScriptModule:
    """The TorchScript module at `path`, on the CPU, in inference mode (dropout off)."""
    return torch.jit.load(path, map_location="cpu").eval()


def run_module(module: torch.jit.ScriptModule, inputs: list) -> list:
    """The module's outputs (numpy arrays, in its return order) for `inputs`, numpy arrays
    in the order of `forward`'s arguments; without autograd's bookkeeping."""
    with torch.no_grad():
        result = module(*(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs))
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    return [y.numpy() for y in outputs]


class TritonPythonModel:
    """One instance of the model: one TorchScript module."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inputs = [
            (t["name"], pb_utils.triton_string_to_numpy(t["data_type"])) for t in config["input"]
        ]
        self.outputs = [
            (t["name"], pb_utils.triton_string_to_numpy(t["data_type"])) for t in config["output"]
        ]
        # Without a batch axis (max_batch_size 0) requests cannot be stacked: run each alone.
        self.batched = int(config.get("max_batch_size", 0)) > 0
        instances = sum(group.get("count", 1) for group in config.get("instance_group", [])) or 1
        set_threads(instances)
        path = os.path.join(args["model_repository"], args["model_version"], "model.pt")
        self.module = load_module(path)

    def execute(self, requests):
        """Run all requests the dynamic batcher gathered as one call of the module, as the
        libtorch backend does, and split the result back by each request's batch size."""
        groups = [requests] if self.batched else [[request] for request in requests]
        responses = []
        for group in groups:
            responses.extend(self._run(group))
        return responses

    def _run(self, requests):
        arrays = []
        sizes = []
        try:
            for name, dtype in self.inputs:
                parts = [
                    pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                    for request in requests
                ]
                sizes = [len(x) for x in parts]
                arrays.append(np.concatenate(parts).astype(dtype, copy=False))
            results = run_module(self.module, arrays)
            if len(results) != len(self.outputs):
                raise ValueError(
                    f"the module returned {len(results)} outputs, the config lists "
                    f"{len(self.outputs)}"
                )
        except Exception as err:  # reported to each client instead of failing the instance
            error = pb_utils.TritonError(f"torch: {err}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        # One request takes the outputs whole: without a batch axis their first dimension
        # need not be the inputs'.
        bounds = np.cumsum([0, *sizes]) if len(requests) > 1 else [0, None]
        responses = []
        for start, stop in itertools.pairwise(bounds):
            tensors = [
                pb_utils.Tensor(name, result[start:stop].astype(dtype, copy=False))
                for (name, dtype), result in zip(self.outputs, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self):
        self.module = None
