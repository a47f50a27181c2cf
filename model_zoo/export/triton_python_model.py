"""Triton python-backend model that runs the `model.onnx` beside it with onnxruntime (CPU).

The exporter copies this file to `<repo>/<model>/<version>/model.py`. It runs inside
Triton's python stub, so it may import only numpy, onnxruntime and
`triton_python_backend_utils` (the stub's module); everything it needs to know (tensor
names, dtypes, instance count) comes from the model config Triton hands to `initialize`.

It exists because the `tritonserver` binary that pip can install has only the python
backend; the Triton core around it (HTTP/gRPC front ends, dynamic batcher, instance groups,
metrics) is the real one, and this file does what the onnxruntime backend would do.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


def _session_options(instances: int) -> ort.SessionOptions:
    """Thread settings for `instances` copies of this model sharing the host's cores.

    Every instance is a separate stub process with its own onnxruntime thread pool. With
    onnxruntime's defaults each pool takes all cores and its threads spin while waiting, so
    two instances on two cores fight each other and latency gets worse as instances are
    added. Splitting the cores between instances and turning spinning off keeps the total
    number of busy threads at the core count, which is what a CPU instance group means.
    """
    options = ort.SessionOptions()
    # The cores this process may run on (a container's CPU set), not the host's count.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    options.intra_op_num_threads = max(1, (cores or 1) // max(1, instances))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


class TritonPythonModel:
    """One instance of the model: one onnxruntime session."""

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
        onnx_path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(
            onnx_path, sess_options=_session_options(instances), providers=["CPUExecutionProvider"]
        )

    def execute(self, requests):
        """Run all requests the dynamic batcher gathered as one onnxruntime call.

        Triton hands the python backend a list of requests without merging them; the
        onnxruntime backend would run them as one batch, so this does the same and splits
        the result back by each request's batch size.
        """
        groups = [requests] if self.batched else [[request] for request in requests]
        responses = []
        for group in groups:
            responses.extend(self._run(group))
        return responses

    def _run(self, requests):
        feeds = {}
        sizes = []
        try:
            for name, dtype in self.inputs:
                arrays = [
                    pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                    for request in requests
                ]
                sizes = [len(x) for x in arrays]
                feeds[name] = np.concatenate(arrays).astype(dtype, copy=False)
            results = self.session.run([name for name, _ in self.outputs], feeds)
        except Exception as err:  # reported to each client instead of failing the instance
            error = pb_utils.TritonError(f"onnxruntime: {err}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        responses = []
        start = 0
        for size in sizes:
            tensors = [
                pb_utils.Tensor(name, result[start : start + size].astype(dtype, copy=False))
                for (name, dtype), result in zip(self.outputs, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses

    def finalize(self):
        self.session = None
