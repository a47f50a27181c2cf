"""TF Serving export: a SavedModel per model, `models.config`, `batching_parameters.txt`.

Layout (what `tensorflow_model_server --model_config_file` expects):
`<base>/<model>/<version>/saved_model.pb`, `<base>/models.config` and, when batching
settings are given, `<base>/batching_parameters.txt`. The signature `serving_default` takes
`input` and returns `output`, the same names the Triton export uses, so one client payload
fits both servers. `models.config` is written as `servebench.common.tfs_config` says, the
format the tfs-docker server writes too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from model_zoo.export.tfs_batching import TfsBatching
from model_zoo.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec
from servebench.common.tf_runtime import import_keras, import_tensorflow
from servebench.common.tfs_config import (
    BATCHING_PARAMETERS,
    CONTAINER_BASE,
    MODELS_CONFIG,
    models_config_text,
)


def export_savedmodel(keras_model, spec: ModelSpec, base: Path, version: int = 1) -> Path:
    """Write the SavedModel for one spec and return its version directory.

    `keras.Model.export()` would name the input `keras_tensor_N` (unstable across builds)
    and the output `output_0`, so the endpoint is declared explicitly.
    """
    tf, keras = import_tensorflow(), import_keras()
    target = base / spec.id / str(version)
    archive = keras.export.ExportArchive()
    archive.track(keras_model)
    signature = tf.TensorSpec(
        (None, *spec.served_input_shape), tf.dtypes.as_dtype(spec.dtype), name=INPUT_NAME
    )

    def serve(input):
        return {OUTPUT_NAME: keras_model(input, training=False)}

    archive.add_endpoint("serving_default", serve, input_signature=[signature])
    archive.write_out(str(target), verbose=False)
    return target


def write_server_files(
    base: Path,
    model_names: Sequence[str],
    batching: TfsBatching | None = None,
    base_path_root: str = CONTAINER_BASE,
) -> list[Path]:
    """Write `models.config` (and `batching_parameters.txt` if batching is set)."""
    written = [base / MODELS_CONFIG]
    written[0].write_text(models_config_text(model_names, base_path_root))
    if batching is not None:
        written.append(base / BATCHING_PARAMETERS)
        written[1].write_text(batching.to_text())
    return written
