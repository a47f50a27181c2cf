"""Write Triton model repositories for a spec: the standard ONNX form and a local python form.

Configs are built as Triton's own `ModelConfig` protobuf (shipped in tritonclient) and
written with `text_format`, so a field name or enum typo is an error here, not a model that
fails to load in a server later.

Two repositories come from one export, differing only in how the model is executed:

- `<out>/triton/<model>/`: `platform: "onnxruntime_onnx"`, what the official Triton
  container runs (GPU machines);
- `<out>/triton-python/<model>/`: `backend: "python"` plus a `model.py` (and the
  `triton_stub.py` it imports) that runs the same `model.onnx` with onnxruntime, for the
  pip-installed `tritonserver` that only has the python backend.

What a version folder holds is a `ServedFile`: ONNX for everything servebench converts, or a
user's TorchScript file as it is (`pytorch_libtorch` in the official image, a `model.py`
running it with torch on the local server) where torch's ONNX exporter cannot convert it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from model_zoo.errors import ModelZooError
from model_zoo.export.onnx import ExportExistsError, export_onnx
from model_zoo.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec
from servebench.common.limits import MAX_NAME_CHARS

if TYPE_CHECKING:
    from torch import nn  # annotations only: reading configs must not import torch

STANDARD_REPOSITORY = "triton"
PYTHON_REPOSITORY = "triton-python"
ONNX_FILENAME = "model.onnx"
CONFIG_FILENAME = "config.pbtxt"
PYTHON_MODEL_SOURCE = Path(__file__).with_name("triton_python_model.py")
TORCHSCRIPT_FILENAME = "model.pt"  # the name Triton's pytorch_libtorch backend loads
TORCHSCRIPT_MODEL_SOURCE = Path(__file__).with_name("triton_torchscript_model.py")
# What both python models import, copied beside each `model.py` (its docstring says why).
STUB_SOURCE = Path(__file__).with_name("triton_stub.py")

Form = Literal["onnx", "python"]
InstanceKind = Literal["KIND_CPU", "KIND_GPU"]

_TRITON_DTYPES = {"float32": mc.TYPE_FP32}
# Triton accepts model names that are valid directory names; restricting to this set keeps
# them safe in URLs (`/v2/models/<name>`) and file systems alike.
_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TritonSettingsError(ModelZooError, ValueError):
    """A server setting Triton would reject; the message names the field."""


class TritonConfigError(ModelZooError, ValueError):
    """A config text that does not parse into Triton's `ModelConfig`."""


@dataclass(frozen=True)
class TritonSettings:
    """The per-model server settings a benchmark varies.

    `max_batch_size=0` means the model takes no batch axis from Triton (the client's batch
    is then part of the tensor shape, and dynamic batching is impossible).
    """

    max_batch_size: int = 32
    dynamic_batching: bool = True
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0
    instance_count: int = 1
    instance_kind: InstanceKind = "KIND_CPU"

    def __post_init__(self) -> None:
        object.__setattr__(self, "preferred_batch_sizes", tuple(self.preferred_batch_sizes))
        if self.max_batch_size < 0:
            raise TritonSettingsError(f"max_batch_size: must be >= 0, got {self.max_batch_size}")
        if self.dynamic_batching and self.max_batch_size == 0:
            raise TritonSettingsError(
                "dynamic_batching: needs max_batch_size >= 1 (Triton batches along the batch axis)"
            )
        if self.preferred_batch_sizes and not self.dynamic_batching:
            raise TritonSettingsError("preferred_batch_sizes: only apply with dynamic_batching on")
        for size in self.preferred_batch_sizes:
            if not 1 <= size <= self.max_batch_size:
                raise TritonSettingsError(
                    f"preferred_batch_sizes: {size} is outside 1..max_batch_size "
                    f"({self.max_batch_size})"
                )
        if self.max_queue_delay_microseconds < 0:
            raise TritonSettingsError(
                f"max_queue_delay_microseconds: must be >= 0, got {self.max_queue_delay_microseconds}"
            )
        if self.max_queue_delay_microseconds and not self.dynamic_batching:
            raise TritonSettingsError(
                "max_queue_delay_microseconds: only applies with dynamic_batching on"
            )
        if self.instance_count < 1:
            raise TritonSettingsError(f"instance_count: must be >= 1, got {self.instance_count}")
        if self.instance_kind not in ("KIND_CPU", "KIND_GPU"):
            raise TritonSettingsError(
                f"instance_kind: must be KIND_CPU or KIND_GPU, got {self.instance_kind!r}"
            )


@dataclass(frozen=True)
class ServedFile:
    """What a model's version folder holds and what runs it in each repository form.

    `platform`: the standard repository's (`triton/`), whose backend ships in the official
    Triton image; `python_model`: the `model.py` that runs the same file on the python
    backend (`triton-python/`), the only backend of the local tritonserver.
    """

    label: str  # as users name it, in messages
    filename: str  # in <model>/<version>/
    platform: str
    python_model: Path


ONNX_FILE = ServedFile("ONNX", ONNX_FILENAME, "onnxruntime_onnx", PYTHON_MODEL_SOURCE)
TORCHSCRIPT_FILE = ServedFile(
    "TorchScript", TORCHSCRIPT_FILENAME, "pytorch_libtorch", TORCHSCRIPT_MODEL_SOURCE
)


@dataclass(frozen=True)
class TritonExport:
    """Where one model's two forms were written."""

    name: str
    version: int
    standard_dir: Path  # <out>/triton/<name>
    python_dir: Path  # <out>/triton-python/<name>

    @property
    def onnx_path(self) -> Path:
        return self.standard_dir / str(self.version) / ONNX_FILENAME


@dataclass(frozen=True)
class TensorConfig:
    """One input or output of a model's config: its name, Triton data type and dims per
    sample (-1 where a dimension is dynamic), the batch axis not included."""

    name: str
    data_type: int  # a model_config_pb2.DataType value, e.g. mc.TYPE_FP32
    dims: tuple[int, ...]


def build_model_config(
    spec: ModelSpec, settings: TritonSettings, *, name: str | None = None, form: Form = "onnx"
) -> mc.ModelConfig:
    """The `ModelConfig` for `spec`; `form` only decides platform vs python backend."""
    dtype = _TRITON_DTYPES[spec.dtype]
    return build_config(
        name or spec.id,
        [TensorConfig(INPUT_NAME, dtype, spec.served_input_shape)],
        [TensorConfig(OUTPUT_NAME, dtype, spec.served_output_shape)],
        settings,
        form=form,
    )


def build_config(
    name: str,
    inputs: Sequence[TensorConfig],
    outputs: Sequence[TensorConfig],
    settings: TritonSettings,
    *,
    form: Form = "onnx",
    served: ServedFile = ONNX_FILE,
) -> mc.ModelConfig:
    """The `ModelConfig` of a model (a spec's or an imported one) with `settings`: in the
    standard form on the platform that runs `served`, else on the python backend."""
    config = mc.ModelConfig(name=check_name(name), max_batch_size=settings.max_batch_size)
    if form == "onnx":
        config.platform = served.platform
    elif form == "python":
        config.backend = "python"
    else:
        raise ValueError(f"form: must be 'onnx' or 'python', got {form!r}")
    # With max_batch_size 0 Triton sees no implicit batch axis, so it is spelled out as -1.
    batch_axis = [] if settings.max_batch_size > 0 else [-1]
    for tensor in inputs:
        config.input.add(
            name=tensor.name, data_type=tensor.data_type, dims=[*batch_axis, *tensor.dims]
        )
    for tensor in outputs:
        config.output.add(
            name=tensor.name, data_type=tensor.data_type, dims=[*batch_axis, *tensor.dims]
        )
    config.instance_group.add(
        count=settings.instance_count,
        kind=mc.ModelInstanceGroup.Kind.Value(settings.instance_kind),
    )
    if settings.dynamic_batching:
        batching = config.dynamic_batching
        batching.preferred_batch_size.extend(settings.preferred_batch_sizes)
        batching.max_queue_delay_microseconds = settings.max_queue_delay_microseconds
    return config


def python_twin(config: mc.ModelConfig) -> mc.ModelConfig:
    """The same model on the python backend (the local tritonserver has no onnxruntime
    backend): every other field, batching and instances included, stays as it was."""
    twin = mc.ModelConfig()
    twin.CopyFrom(config)
    twin.ClearField("platform")
    twin.ClearField("default_model_filename")  # the python backend would look for its .py
    twin.backend = "python"
    return twin


# The export folder each form is served from.
FORM_REPOSITORY: dict[str, str] = {"onnx": STANDARD_REPOSITORY, "python": PYTHON_REPOSITORY}


def apply_settings(config: mc.ModelConfig, settings: TritonSettings) -> mc.ModelConfig:
    """A copy of a user's `config` with only the fields a settings matrix sweeps rewritten.

    Swept: `max_batch_size`, the dynamic batcher (on: its preferred sizes and queue delay
    set, every other field of the user's batcher kept; off: removed) and the instance
    group (one group of the setting's count and kind; the user's first group's other
    fields, like its name, kept; its GPUs dropped for KIND_CPU). Everything else — the
    platform or backend, tensors, parameters, version policy, optimization, ... — stays
    the user's. A model with `max_batch_size: 0` has no batch axis: its batching fields
    stay as they are (scenario validation refuses batching settings for it).
    """
    out = mc.ModelConfig()
    out.CopyFrom(config)
    if config.max_batch_size > 0:
        out.max_batch_size = settings.max_batch_size
        if settings.dynamic_batching:
            batcher = out.dynamic_batching
            del batcher.preferred_batch_size[:]
            batcher.preferred_batch_size.extend(settings.preferred_batch_sizes)
            batcher.max_queue_delay_microseconds = settings.max_queue_delay_microseconds
        else:
            out.ClearField("dynamic_batching")
    del out.instance_group[:]
    group = out.instance_group.add()
    if config.instance_group:
        group.CopyFrom(config.instance_group[0])
    group.count = settings.instance_count
    group.kind = mc.ModelInstanceGroup.Kind.Value(settings.instance_kind)
    if settings.instance_kind == "KIND_CPU":
        group.ClearField("gpus")
    return out


def write_settings_copy(
    model_dir: Path, repository: Path, settings: TritonSettings, *, name: str | None = None
) -> Path:
    """Copy a model folder whose config servebench did not write (a user's Triton model, an
    imported model) into `repository` with `settings` applied (`apply_settings`), under
    `name` if given (its config's name otherwise); the copy replaces an earlier one."""
    model_dir = Path(model_dir)
    config = parse_config(
        (model_dir / CONFIG_FILENAME).read_text(), where=str(model_dir / CONFIG_FILENAME)
    )
    if name is not None:
        config.name = name
    target = Path(repository) / check_name(config.name or model_dir.name)
    _claim_model_dirs([target], force=True)
    shutil.copytree(model_dir, target)
    (target / CONFIG_FILENAME).write_text(render_config(apply_settings(config, settings)))
    return target


def render_config(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse_config(text: str, where: str = "config.pbtxt") -> mc.ModelConfig:
    """Parse config text into `ModelConfig`, naming `where` if it does not parse."""
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as err:
        raise TritonConfigError(f"{where}: not a Triton ModelConfig: {err}") from None


def export_triton(
    module: nn.Module,
    spec: ModelSpec,
    out: Path,
    settings: TritonSettings | None = None,
    *,
    name: str | None = None,
    version: int = 1,
    force: bool = False,
) -> TritonExport:
    """Export `module` to ONNX once and write both repositories under `out`.

    Both model folders are checked before anything is written, so a refused export leaves
    the tree as it was; with `force=True` existing folders of this model are replaced
    whole (a stale higher version would otherwise be the one Triton serves).
    """
    settings = settings or TritonSettings()
    name = check_name(name or spec.id)
    out = Path(out)
    standard_dir = out / STANDARD_REPOSITORY / name
    python_dir = out / PYTHON_REPOSITORY / name
    _claim_model_dirs([standard_dir, python_dir], force=force)
    onnx_path = export_onnx(module, spec, standard_dir / str(version) / ONNX_FILENAME)
    write_triton_model(
        onnx_path,
        spec,
        out / STANDARD_REPOSITORY,
        settings,
        name=name,
        version=version,
        form="onnx",
        force=True,
    )
    write_triton_model(
        onnx_path,
        spec,
        out / PYTHON_REPOSITORY,
        settings,
        name=name,
        version=version,
        form="python",
        force=True,
    )
    return TritonExport(
        name=name, version=version, standard_dir=standard_dir, python_dir=python_dir
    )


def write_triton_model(
    onnx_path: Path,
    spec: ModelSpec,
    repository: Path,
    settings: TritonSettings,
    *,
    name: str | None = None,
    version: int = 1,
    form: Form = "onnx",
    force: bool = False,
) -> Path:
    """Write `<repository>/<name>/` for an existing ONNX file and return that folder.

    The ONNX file is copied into the version folder unless it is already there.
    """
    config = build_model_config(spec, settings, name=name, form=form)
    return write_model_folder(onnx_path, config, repository, version=version, force=force)


def write_model_folder(
    model_path: Path,
    config: mc.ModelConfig,
    repository: Path,
    *,
    version: int = 1,
    force: bool = False,
    served: ServedFile = ONNX_FILE,
) -> Path:
    """Write `<repository>/<config.name>/` serving `model_path` (a `served` file) as
    `config` says.

    A python-backend config gets the `model.py` that runs that file beside it, and the
    `triton_stub.py` that `model.py` imports.
    """
    if version < 1:
        raise ValueError(f"version: must be >= 1, got {version}")
    model_dir = Path(repository) / check_name(config.name)
    version_dir = model_dir / str(version)
    target = version_dir / served.filename
    model_path = Path(model_path)
    if not model_path.is_file():
        raise FileNotFoundError(f"{model_path}: no {served.label} file to put into the repository")
    if model_dir.resolve() in model_path.resolve().parents and not target.exists():
        raise ValueError(f"{model_path}: lies inside {model_dir}, which this write would replace")
    if not (target.exists() and target.samefile(model_path)):
        # A model file already in place is this model's (export_triton writes it there).
        _claim_model_dirs([model_dir], force=force)
        version_dir.mkdir(parents=True)
        shutil.copyfile(model_path, target)
    if config.backend == "python":
        shutil.copyfile(served.python_model, version_dir / "model.py")
        shutil.copyfile(STUB_SOURCE, version_dir / STUB_SOURCE.name)
    text = render_config(config)
    parse_config(text, where=str(model_dir / CONFIG_FILENAME))  # by construction, but cheap
    (model_dir / CONFIG_FILENAME).write_text(text)
    return model_dir


def _claim_model_dirs(model_dirs: list[Path], *, force: bool) -> None:
    """Refuse (or with force, clear) model folders that already hold files."""
    taken = [d for d in model_dirs if d.exists() and (not d.is_dir() or any(d.iterdir()))]
    if taken and not force:
        listed = ", ".join(str(d) for d in taken)
        raise ExportExistsError(f"{listed}: already holds files; pass force=True to replace")
    for model_dir in taken:
        if model_dir.is_dir():
            shutil.rmtree(model_dir)
        else:
            model_dir.unlink()


def check_name(name: str) -> str:
    """`name` if Triton (and a URL path) takes it as a model name, and a folder can be named
    after it (`MAX_NAME_CHARS`); ValueError otherwise."""
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(
            f"name: {name[:20]!r}... has {len(name)} characters; a model name has at most "
            f"{MAX_NAME_CHARS}"
        )
    if not _NAME_PATTERN.match(name):
        raise ValueError(
            f"name: {name!r} is not a usable Triton model name (letters, digits, '_', '.', '-')"
        )
    return name
