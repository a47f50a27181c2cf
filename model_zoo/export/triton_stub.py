"""What servebench's two python-backend models share: reading the model config Triton
hands them, gathering the requests the dynamic batcher grouped into one call, splitting
the answers back, and their rule for threads.

The exporter copies this file beside each `model.py` it writes
(`<repo>/<model>/<version>/triton_stub.py`, `write_model_folder`); Triton's python stub puts
that folder on `sys.path` before it imports `model.py`, so the models import this by name
(a repository stays self-contained, whichever Triton serves it). It runs inside the stub,
so it imports only json, os, numpy and the stub's `triton_python_backend_utils`.
"""

import itertools
import json
import os

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by servebench's parity check, outside Triton's stub
    pb_utils = None


def threads_per_instance(instances: int) -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)
    split between `instances` copies of the model, each a stub process of its own: at
    least one each, so the busy threads of all instances together stay at the core count."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, instances))


class BatchingModel:
    """One instance of a model: what Triton calls (`initialize`, `execute`), running
    the requests of one `execute` as one call of the runtime, as Triton's own backends do.

    A subclass names its `runtime` (the word its errors start with) and gives `load` (the
    model in the version folder, for this many instances) and `infer` (the outputs, in the
    config's order, for the inputs concatenated over the requests, in the config's order).
    """

    runtime = ""

    def load(self, folder: str, instances: int) -> None:
        raise NotImplementedError

    def infer(self, arrays: list) -> list:
        raise NotImplementedError

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
        self.load(os.path.join(args["model_repository"], args["model_version"]), instances)

    def execute(self, requests):
        """Run all requests the dynamic batcher gathered as one call of the runtime.

        Triton hands the python backend a list of requests without merging them; the
        onnxruntime and libtorch backends would run them as one batch, so this does the
        same and splits the result back by each request's batch size.
        """
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
            results = self.infer(arrays)
        except Exception as err:  # reported to each client instead of failing the instance
            error = pb_utils.TritonError(f"{self.runtime}: {err}")
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
