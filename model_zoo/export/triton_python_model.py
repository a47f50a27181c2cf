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
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.input_dtype = pb_utils.triton_string_to_numpy(config["input"][0]["data_type"])
        self.output_dtype = pb_utils.triton_string_to_numpy(config["output"][0]["data_type"])
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
        inputs = [
            pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            for request in requests
        ]
        sizes = [len(x) for x in inputs]
        try:
            batch = np.concatenate(inputs).astype(self.input_dtype, copy=False)
            result = self.session.run([self.output_name], {self.input_name: batch})[0]
        except Exception as err:  # reported to each client instead of failing the instance
            error = pb_utils.TritonError(f"onnxruntime: {err}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        result = result.astype(self.output_dtype, copy=False)
        responses = []
        start = 0
        for size in sizes:
            tensor = pb_utils.Tensor(self.output_name, result[start : start + size])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += size
        return responses

    def finalize(self):
        self.session = None
