"""Reading a user's own model (ONNX, TorchScript, torch.export, SavedModel, Keras, a
Triton model folder) into the export layout `models export` writes."""

from model_zoo.imports.importer import IMPORT_FILE, ImportResult, import_model
from model_zoo.imports.model import ImportedModel, ServedModel, read_model
from model_zoo.imports.signature import (
    ModelImportError,
    ShapeError,
    Unconvertible,
    parse_input_shapes,
)
from model_zoo.imports.source import model_limit

__all__ = [
    "IMPORT_FILE",
    "ImportResult",
    "ImportedModel",
    "ModelImportError",
    "ServedModel",
    "ShapeError",
    "Unconvertible",
    "import_model",
    "model_limit",
    "parse_input_shapes",
    "read_model",
]
