"""SavedModel folders and Keras `.keras` files: the `serving_default` signature.

TF Serving serves a SavedModel as it is; a Keras file becomes one through Keras' own
`export` (checked against the Keras model for parity). Triton gets the SavedModel's
`serving_default` function through tf2onnx, in this process (a child process would spend
seconds importing TensorFlow again), which keeps the signature's input and output names.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import numpy as np

from model_zoo.imports.signature import (
    DYNAMIC,
    ModelImportError,
    Signature,
    Tensor,
    first_line,
    refused_as,
    user_file_refused,
)
from model_zoo.imports.source import ModelSource, Unconvertible
from model_zoo.parity import run_savedmodel_feeds
from servebench.common.tf_runtime import import_keras, import_tensorflow
from servebench.common.userfile import copy_folder

SIGNATURE = "serving_default"
ONNX_OPSET = 17
SAVED_MODEL_FILE = "saved_model.pb"


class SavedModelSource(ModelSource):
    format = "savedmodel"
    framework = "tensorflow"
    to_savedmodel = True

    @property
    def savedmodel_dir(self) -> Path:
        return self.path

    @cached_property
    def serving(self):
        """The `serving_default` function of the loaded SavedModel."""
        tf = import_tensorflow()
        folder = self.savedmodel_dir
        if not (folder / SAVED_MODEL_FILE).is_file():
            raise ModelImportError(f"{folder}: not a SavedModel (no {SAVED_MODEL_FILE})")
        with refused_as(folder, "a readable SavedModel"):  # DecodeError, OpError, OSError
            loaded = tf.saved_model.load(str(folder))
        signatures = getattr(loaded, "signatures", {})
        if SIGNATURE not in signatures:
            raise ModelImportError(
                f"{folder}: no {SIGNATURE!r} signature (has: {', '.join(signatures) or 'none'})"
            )
        self._loaded = loaded  # the function needs its object alive
        return signatures[SIGNATURE]

    def signature(self) -> Signature:
        inputs = self.serving.structured_input_signature[1]
        outputs = self.serving.structured_outputs
        return Signature(
            tuple(_tensor(name, spec) for name, spec in sorted(inputs.items())),
            tuple(_tensor(name, spec) for name, spec in sorted(outputs.items())),
        )

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_savedmodel_feeds(self.savedmodel_dir, feeds)

    def write_savedmodel(self, target: Path) -> bool:
        with user_file_refused():
            copy_folder(self.savedmodel_dir, target, self.limit)  # no link, no device
        return False

    def write_onnx(self, target: Path) -> bool:
        try:
            import tf2onnx
        except ImportError:
            raise Unconvertible(
                f"{self.format} -> Triton: needs tf2onnx (pip install tf2onnx)"
            ) from None
        tf = import_tensorflow()
        logging.getLogger("tf2onnx").setLevel(logging.ERROR)  # its INFO lines, per pass
        specs = self.serving.structured_input_signature[1]
        names = sorted(specs)
        signature = [tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n) for n in names]
        serving = self.serving

        # tf2onnx wants a tf.function of positional tensors; the signature takes keywords.
        @tf.function(input_signature=signature)
        def positional(*args):
            return serving(**dict(zip(names, args, strict=True)))

        try:
            tf2onnx.convert.from_function(
                positional, input_signature=signature, opset=ONNX_OPSET, output_path=str(target)
            )
        except Exception as err:  # an op tf2onnx has no mapping for, among others
            raise Unconvertible(
                f"{self.format} -> ONNX: tf2onnx failed: {first_line(err)}"
            ) from None
        return True


class KerasSource(SavedModelSource):
    """A `.keras` file: exported to a SavedModel once, in a folder this source owns."""

    format = "keras"
    framework = "keras"

    @cached_property
    def model(self):
        keras = import_keras()
        with refused_as(self.path, "a readable Keras file"):  # ValueError, BadZipFile, OSError
            return keras.saving.load_model(str(self.path), compile=False)

    @cached_property
    def savedmodel_dir(self) -> Path:
        self._scratch = tempfile.TemporaryDirectory(prefix="servebench-keras-")
        folder = Path(self._scratch.name) / "savedmodel"
        self.model.export(str(folder), format="tf_saved_model", verbose=False)
        return folder

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The Keras model itself, so the export to a SavedModel is checked too.

        Keras' export names the signature's inputs after the model's inputs and its
        outputs `output_0`, `output_1`, ... in the model's order.
        """
        names = [tensor.name for tensor in self.model.inputs]
        args = [feeds[name] for name in names]
        result = self.model(args[0] if len(args) == 1 else args, training=False)
        result = result if isinstance(result, (list, tuple)) else [result]
        return {f"output_{i}": np.asarray(y) for i, y in enumerate(result)}

    def write_savedmodel(self, target: Path) -> bool:
        shutil.copytree(self.savedmodel_dir, target)
        return True


def _tensor(name: str, spec) -> Tensor:
    dims = tuple(DYNAMIC if d is None else int(d) for d in spec.shape)
    return Tensor(name, spec.dtype.name, dims)
