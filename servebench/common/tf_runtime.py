"""Import TensorFlow (and Keras) once, without its start-up noise on the user's terminal.

TensorFlow 2.21 logs through absl before `absl::InitializeLog()` runs, so those lines go
straight to file descriptor 2 whatever `TF_CPP_MIN_LOG_LEVEL` says: the oneDNN notice, "Could
not find cuda drivers" and, at the first device query, `failed call to cuInit` on every
CPU-only machine. None of them is news to a servebench user, and every export printed them.
No environment variable silences them (tried: TF_CPP_MIN_LOG_LEVEL=3, GLOG_minloglevel,
ABSL_MIN_LOG_LEVEL), so the import and the device query run with fd 2 pointed at a temporary
file; afterwards the known harmless lines are dropped and anything else is written back to
stderr, so a real error is never swallowed.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# What TensorFlow prints while it starts on a CPU-only machine, and nothing else.
_HARMLESS = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|oneDNN custom operations are on"
    r"|Could not find cuda drivers on your machine"
    r"|failed call to cuInit"
    r"|cpu_feature_guard|rebuild TensorFlow with the appropriate compiler flags"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
)


def harmless_line(line: str) -> bool:
    """Whether a stderr line is TensorFlow's CPU-only start-up chatter."""
    return bool(_HARMLESS.search(line))


@contextmanager
def _stderr_filtered() -> Iterator[None]:
    """Capture fd 2 for the block; replay every line that is not start-up chatter."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            kept = [line for line in text.splitlines() if line and not harmless_line(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()


_started = False


def import_tensorflow() -> ModuleType:
    """`tensorflow`, imported and its devices probed, with the start-up chatter dropped."""
    global _started
    if not _started:
        with _stderr_filtered():
            import tensorflow as tf

            tf.config.list_physical_devices()  # the cuInit attempt happens here, once
        _started = True
    import tensorflow

    return tensorflow


def import_keras() -> ModuleType:
    """`keras` on the TensorFlow backend, imported after TensorFlow's quiet start."""
    import_tensorflow()
    import keras

    return keras
