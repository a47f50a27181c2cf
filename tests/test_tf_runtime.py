"""TensorFlow's CPU-only start-up chatter stays off the terminal; real errors do not."""

from __future__ import annotations

import subprocess
import sys

QUIET_IMPORT = """
import os
from servebench.common.tf_runtime import _stderr_filtered, import_keras, import_tensorflow
tf = import_tensorflow()
keras = import_keras()
assert int(tf.constant(1) + 1) == 2 and keras.backend.backend() == "tensorflow"
with _stderr_filtered():
    os.write(2, b"failed call to cuInit: noise\\nE0000 something real went wrong\\n")
"""


def test_tensorflow_imports_without_startup_noise_but_keeps_real_errors() -> None:
    done = subprocess.run(
        [sys.executable, "-c", QUIET_IMPORT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "E0000 something real went wrong\n"
