"""Triton python-backend model that runs the `model.onnx` beside it with onnxruntime (CPU).

The exporter copies this file to `<repo>/<model>/<version>/model.py`, and `triton_stub.py`
beside it. It runs inside Triton's python stub, so it may import only onnxruntime and
`triton_stub` (which imports numpy and the stub's `triton_python_backend_utils`);
everything it needs to know (tensor names, dtypes, instance count) comes from the model
config Triton hands to `initialize`.

It exists because the `tritonserver` binary that pip can install has only the python
backend; the Triton core around it (HTTP/gRPC front ends, dynamic batcher, instance groups,
metrics) is the real one, and this file does what the onnxruntime backend would do.
"""

import os

import onnxruntime as ort
from triton_stub import BatchingModel, threads_per_instance


def _session_options(instances: int) -> ort.SessionOptions:
    """Thread settings for `instances` copies of this model sharing the host's cores.

    Every instance is a separate stub process with its own onnxruntime thread pool. With
    onnxruntime's defaults each pool takes all cores and its threads spin while waiting, so
    two instances on two cores fight each other and latency gets worse as instances are
    added. Splitting the cores between instances and turning spinning off keeps the total
    number of busy threads at the core count, which is what a CPU instance group means.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads_per_instance(instances)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


class TritonPythonModel(BatchingModel):
    """One instance of the model: one onnxruntime session."""

    runtime = "onnxruntime"

    def load(self, folder: str, instances: int) -> None:
        self.session = ort.InferenceSession(
            os.path.join(folder, "model.onnx"),
            sess_options=_session_options(instances),
            providers=["CPUExecutionProvider"],
        )

    def infer(self, arrays: list) -> list:
        feeds = {name: array for (name, _), array in zip(self.inputs, arrays, strict=True)}
        return self.session.run([name for name, _ in self.outputs], feeds)

    def finalize(self):
        self.session = None
