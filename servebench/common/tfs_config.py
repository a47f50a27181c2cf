"""TF Serving's model config and its base-path layout, for the two that write them.

The TF Serving export (`model_zoo.export.tfs`) writes `models.config` beside the SavedModels
it exports, and the `tfs-docker` server (`servebench.servers.docker_tfs`) writes the one it
starts with and sends again on every config reload. Both must list models the same way,
and `model_zoo` and `servers` may not import each other (nor would a server want the
exporters' torch import), so the format lives here, at the bottom.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

MODELS_CONFIG = "models.config"
BATCHING_PARAMETERS = "batching_parameters.txt"
# Where the official container sees a base path (docker/ and the tfs-docker server mount it).
CONTAINER_BASE = "/models"
_VERSION_DIR = re.compile(r"^\d+$")


def savedmodel_names(base_path: Path) -> list[str]:
    """Models under a TF Serving base path: folders holding `<version>/saved_model.pb`."""
    return sorted(
        p.parent.parent.name
        for p in Path(base_path).glob("*/*/saved_model.pb")
        if _VERSION_DIR.match(p.parent.name)
    )


def models_config_text(names: Sequence[str], root: str = CONTAINER_BASE) -> str:
    """A `ModelServerConfig` serving `names` from `<root>/<name>`, in text format."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2  # no TensorFlow import

    config = model_server_config_pb2.ModelServerConfig()
    # An explicit empty list: TF Serving then starts with no model and accepts model
    # lists in later config reloads.
    config.model_config_list.SetInParent()
    for name in names:
        entry = config.model_config_list.config.add()
        entry.name = name
        entry.base_path = f"{root.rstrip('/')}/{name}"
        entry.model_platform = "tensorflow"
    return text_format.MessageToString(config)
