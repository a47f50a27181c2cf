"""Triton python-backend model that runs the TorchScript `model.pt` beside it with torch (CPU).

The importer copies this file to `<repo>/<model>/<version>/model.py`, and `triton_stub.py`
beside it, when a user's TorchScript file is served as it is (torch's ONNX exporter could
not convert it). It runs inside Triton's python stub, which imports the packages of
servebench's virtualenv, torch among them; what it needs to know (tensor names, dtypes,
instance count) comes from the model config Triton hands to `initialize`. The official Triton image runs the same file on
its `pytorch_libtorch` platform instead; this does what that backend does: inputs in the
order of `forward`'s arguments (the config names them so), outputs in the config's order.

servebench's import runs the served file through `load_module` and `run_module` too (its
parity check), so the file is checked the way the server runs it.
"""

import os

import numpy as np
import torch

try:  # in a model repository: `triton_stub.py` lies beside this file (its docstring says why)
    from triton_stub import BatchingModel, threads_per_instance
except ImportError:  # a module of model_zoo.export: servebench's parity check, the tests
    from model_zoo.export.triton_stub import BatchingModel, threads_per_instance


def set_threads(instances: int) -> None:
    """torch's thread pools for `instances` copies of this model sharing the host's cores.

    Every instance is a separate stub process, and torch's defaults give each one an
    intra-op pool as large as the machine and an inter-op pool as large again: two
    instances on two cores would run four busy threads and slow each other down. The
    cores are split between instances (`threads_per_instance`, as for the onnxruntime
    model), and the inter-op pool, which only runs forked subgraphs, keeps one thread:
    Triton already runs one batch per instance at a time. Called once, first thing in the process
    (torch refuses to resize the inter-op pool after it has been used).
    """
    torch.set_num_threads(threads_per_instance(instances))
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


class TritonPythonModel(BatchingModel):
    """One instance of the model: one TorchScript module."""

    runtime = "torch"

    def load(self, folder: str, instances: int) -> None:
        set_threads(instances)
        self.module = load_module(os.path.join(folder, "model.pt"))

    def infer(self, arrays: list) -> list:
        results = run_module(self.module, arrays)
        if len(results) != len(self.outputs):
            raise ValueError(
                f"the module returned {len(results)} outputs, the config lists {len(self.outputs)}"
            )
        return results

    def finalize(self):
        self.module = None
