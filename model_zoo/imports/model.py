"""A user's model file as a scenario names it: read once, then served like a generated one.

A trial's model is anything with an `id` (the name Triton and TF Serving serve it under, and
trials.csv's `model`): a generated model's `ModelSpec`, or an `ImportedModel`. The
imported one carries what reading its file told: the signature, the sample shapes, the
counts the graph allows, and which servers' formats it reaches, so validation can refuse
an impossible pairing and the run need not read the file again before importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from model_zoo.export.triton import check_name
from model_zoo.imports.counts import GraphCounts, count_onnx
from model_zoo.imports.formats import open_source
from model_zoo.imports.importer import clean_name
from model_zoo.imports.onnx_file import OnnxSource
from model_zoo.imports.signature import Signature, check_sample_shapes, resolve_shapes
from model_zoo.imports.source import model_limit
from model_zoo.imports.triton_repo import TritonModelSource
from model_zoo.spec import ModelSpec
from servebench.common.userfile import ByteLimit


@dataclass(frozen=True, eq=False)
class ImportedModel:
    """One model file of a scenario, read.

    `source_format` is the format the file is in (`formats.FORMATS`' names: onnx, keras,
    triton, ...), trials.csv's `format`: an imported model has no layer family (the
    column `layer_type`), depth or width. `to_savedmodel` says whether TF Serving can serve
    it (which Triton forms it has is what its import writes: `servers.kinds` reads the
    folders).
    """

    id: str
    path: Path
    source_format: str
    signature: Signature
    input_shapes: Mapping[str, tuple[int, ...]]
    counts: GraphCounts = field(default_factory=GraphCounts)
    to_savedmodel: bool = False
    # The bytes its file may hold (the scenario's limits.max_model_mb), which the run's
    # import of it holds it to again.
    limit: ByteLimit = field(default_factory=model_limit)

    @property
    def batched(self) -> bool:
        """Whether Triton may batch it: a batch axis on every tensor (for a Triton folder,
        max_batch_size > 0 in its config)."""
        return self.signature.batched


# What a trial serves: a generated model or a user's; both are named by their `id`.
ServedModel = ModelSpec | ImportedModel


def read_model(
    path: Path,
    *,
    name: str | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    option: str = "--input-shape",
    limit: ByteLimit | None = None,
) -> ImportedModel:
    """Read `path` (any format `models import` reads) without converting it, within
    `limit` (the bytes its file or folder may hold; default: `limits.max_model_mb`'s).

    Raises `ModelImportError` (a `ShapeError` for shapes, naming `option`, where the user
    gives them) or `ValueError` for a name Triton would not take.
    """
    given = check_sample_shapes(input_shapes or {}, option)
    model_name = check_name(name) if name else None
    limit = limit or model_limit()
    source = open_source(path, given, limit)
    signature = source.signature()
    shapes = resolve_shapes(signature, given, str(path), option)
    model_name = model_name or check_name(clean_name(source.default_name()))
    counted = GraphCounts()
    if isinstance(source, OnnxSource):
        counted = count_onnx(source.path, shapes, signature.batched, limit)
    elif isinstance(source, TritonModelSource) and source.is_onnx:
        counted = count_onnx(source.model_file, shapes, signature.batched, limit)
    return ImportedModel(
        id=model_name,
        path=Path(path).resolve(),
        source_format=source.format,
        signature=signature,
        input_shapes=shapes,
        counts=counted,
        to_savedmodel=source.to_savedmodel,
        limit=limit,
    )
