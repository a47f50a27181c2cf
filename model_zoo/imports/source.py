"""What every readable model format provides to the importer.

A source knows its file: the signature it states, how to run it (the reference for
parity), and how to write it as ONNX (Triton) and as a SavedModel (TF Serving). A
direction it cannot write raises `Unconvertible` with the reason, and the importer writes
the other one alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from model_zoo.imports.signature import Signature, Unconvertible
from servebench.common.limits import MAX_MODEL_MB
from servebench.common.userfile import ByteLimit, mib_limit


def model_limit(mib: float = MAX_MODEL_MB) -> ByteLimit:
    """The most bytes a user's model file or folder may hold (a scenario's
    `limits.max_model_mb`; the command line's default)."""
    return mib_limit(mib, "limits.max_model_mb, docs/scenario-limits.md")


if TYPE_CHECKING:
    from model_zoo.export.triton import ServedFile

NO_ONNX_TO_TF = (
    "no ONNX -> TensorFlow converter here (onnx-tf, the ONNX project's, is unmaintained "
    "since 2022 and needs TensorFlow < 2.16)"
)


class ModelSource:
    """One model file or folder of a known format."""

    format: ClassVar[str]
    framework: ClassVar[str]  # what runs the source, for parity's report
    label: ClassVar[str] = ""  # the format as users name it, in messages (default: format)
    # Whether `write_savedmodel` can succeed (TF Serving can serve it): known before any
    # conversion, so a scenario pairing the model with a TF Serving server is refused early.
    to_savedmodel: ClassVar[bool] = False
    # The file Triton serves without ONNX (`write_as_is`), used where `write_onnx` fails;
    # None: the model reaches Triton through ONNX only.
    served_as_is: ClassVar[ServedFile | None] = None

    def __init__(
        self,
        path: Path,
        input_shapes: Mapping[str, tuple[int, ...]],
        limit: ByteLimit | None = None,
    ) -> None:
        self.path = Path(path)
        self.input_shapes = dict(input_shapes)
        # What the file (or folder) may hold, checked by `formats.open_source` before this
        # source reads it, and again by each reader that reads more (external data, copies).
        self.limit = limit or model_limit()

    def default_name(self) -> str:
        return self.path.stem if self.path.is_file() else self.path.name

    def signature(self) -> Signature:
        raise NotImplementedError

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The source framework's outputs for `feeds`: parity's reference."""
        raise NotImplementedError

    def write_onnx(self, target: Path) -> bool:
        """Write the model as one ONNX file at `target`; True when that was a conversion
        (to be checked for parity), False when the file was copied as it is."""
        raise Unconvertible(f"{self.label or self.format} -> ONNX: not supported")

    def write_as_is(self, target: Path) -> None:
        """Write the model as its `served_as_is` file at `target` (sources that have one)."""
        raise NotImplementedError

    def write_savedmodel(self, target: Path) -> bool:
        """Write the model as a SavedModel folder `target`; True when converted."""
        raise Unconvertible(f"{self.label or self.format} -> TF Serving: {NO_ONNX_TO_TF}")
