"""Triton repository export: configs are real ModelConfigs, ONNX runs at any batch size,
and nothing already on disk is overwritten without force."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from model_zoo.export import (
    PYTHON_REPOSITORY,
    STANDARD_REPOSITORY,
    ExportExistsError,
    OnnxExportError,
    TritonSettings,
    TritonSettingsError,
    build_model_config,
    export_onnx,
    export_triton,
    parse_config,
    write_triton_model,
)
from model_zoo.export.onnx import check_onnx_interface
from model_zoo.export.triton import (
    PYTHON_MODEL_SOURCE,
    STUB_SOURCE,
    TORCHSCRIPT_MODEL_SOURCE,
    render_config,
)
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch

DENSE = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
SPECS = {
    "dense": DENSE,
    "conv": ModelSpec(layer_type="conv", depth=2, width=8, input_shape=(12, 12, 3), num_outputs=5),
    "lstm": ModelSpec(layer_type="lstm", depth=2, width=16, input_shape=(6,), seq_len=5),
    "attention": ModelSpec(
        layer_type="attention", depth=1, width=16, input_shape=(6,), seq_len=5, heads=2
    ),
}


# Each TritonSettings field with the values tried: 96 combinations.
AXES = {
    "max_batch_size": [0, 1, 8],
    "dynamic_batching": [True, False],
    "preferred_batch_sizes": [(), (2, 4)],
    "max_queue_delay_microseconds": [0, 100],
    "instance_count": [1, 3],
    "instance_kind": ["KIND_CPU", "KIND_GPU"],
}


def _all_settings() -> list[tuple[dict, bool]]:
    """Every combination of the settings axes, with whether Triton's rules allow it."""
    combos = []
    for values in itertools.product(*AXES.values()):
        kwargs = dict(zip(AXES, values, strict=True))
        mbs, preferred = kwargs["max_batch_size"], kwargs["preferred_batch_sizes"]
        if kwargs["dynamic_batching"]:
            valid = mbs >= 1  # dynamic batching needs a batch dimension
        else:  # preferred sizes and a queue delay belong to dynamic batching
            valid = not preferred and not kwargs["max_queue_delay_microseconds"]
        valid = valid and all(p <= mbs for p in preferred)
        combos.append((kwargs, valid))
    return combos


@pytest.mark.parametrize("form", ["onnx", "python"])
def test_every_settings_combination_gives_a_parsing_config(form: str) -> None:
    checked = 0
    for kwargs, valid in _all_settings():
        if not valid:
            with pytest.raises(TritonSettingsError):
                TritonSettings(**kwargs)
            continue
        settings = TritonSettings(**kwargs)
        text = render_config(build_model_config(SPECS["conv"], settings, form=form))
        config = parse_config(text)
        assert config.name == SPECS["conv"].id
        assert config.max_batch_size == kwargs["max_batch_size"]
        if form == "onnx":
            assert (config.platform, config.backend) == ("onnxruntime_onnx", "")
        else:
            assert (config.platform, config.backend) == ("", "python")
        batch_axis = [] if kwargs["max_batch_size"] else [-1]
        assert [(t.name, list(t.dims), t.data_type) for t in config.input] == [
            ("input", [*batch_axis, 12, 12, 3], mc.TYPE_FP32)
        ]
        assert [(t.name, list(t.dims)) for t in config.output] == [("output", [*batch_axis, 5])]
        (group,) = config.instance_group
        assert group.count == kwargs["instance_count"]
        assert mc.ModelInstanceGroup.Kind.Name(group.kind) == kwargs["instance_kind"]
        assert config.HasField("dynamic_batching") == kwargs["dynamic_batching"]
        if kwargs["dynamic_batching"]:
            batching = config.dynamic_batching
            assert tuple(batching.preferred_batch_size) == kwargs["preferred_batch_sizes"]
            assert batching.max_queue_delay_microseconds == kwargs["max_queue_delay_microseconds"]
        checked += 1
    assert checked == 36  # the valid share of the 96 combinations


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_batch_size": -1}, "max_batch_size"),
        ({"max_batch_size": 0}, "dynamic_batching"),
        ({"preferred_batch_sizes": (64,)}, "preferred_batch_sizes"),
        ({"preferred_batch_sizes": (0,)}, "preferred_batch_sizes"),
        ({"max_queue_delay_microseconds": -5}, "max_queue_delay_microseconds"),
        ({"instance_count": 0}, "instance_count"),
        ({"instance_kind": "KIND_TPU"}, "instance_kind"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(TritonSettingsError, match=f"^{field}:"):
        TritonSettings(**kwargs)


def test_parse_config_names_the_file_on_bad_text() -> None:
    with pytest.raises(ValueError, match=r"^models/x/config.pbtxt: not a Triton ModelConfig"):
        parse_config('name: "x"\nmax_batch_sise: 4\n', where="models/x/config.pbtxt")


def test_model_name_must_be_usable() -> None:
    with pytest.raises(ValueError, match=r"^name:"):
        build_model_config(DENSE, TritonSettings(), name="../evil")


# What each python-backend model file may import: the modules Triton's stub process has,
# and triton_stub beside it (the TorchScript model's fallback, model_zoo, runs outside).
STUB_MODULES = [
    (STUB_SOURCE, {"itertools", "json", "os", "numpy", "triton_python_backend_utils"}),
    (PYTHON_MODEL_SOURCE, {"os", "onnxruntime", "triton_stub"}),
    (TORCHSCRIPT_MODEL_SOURCE, {"os", "numpy", "torch", "triton_stub", "model_zoo"}),
]


@pytest.mark.parametrize(("source", "allowed"), STUB_MODULES, ids=["stub", "onnx", "torchscript"])
def test_python_model_imports_only_what_the_stub_has(source: Path, allowed: set[str]) -> None:
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= allowed


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, torch.nn.Module]]:
    """Each SPECS entry built by the real torch builder and exported once to ONNX."""
    root = tmp_path_factory.mktemp("onnx")
    result = {}
    for key, spec in SPECS.items():
        module = build_torch(spec, seed=1)
        result[key] = (export_onnx(module, spec, root / f"{key}.onnx"), module)
    return result


@pytest.mark.parametrize("key", list(SPECS))
@pytest.mark.parametrize("batch", [1, 4])
def test_onnx_runs_batch_1_and_4_like_torch(exported: dict, key: str, batch: int) -> None:
    path, module = exported[key]
    spec = SPECS[key]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(batch).standard_normal((batch, *spec.served_input_shape))
    x = x.astype(np.float32)
    (got,) = session.run(["output"], {"input": x})
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert got.shape == (batch, spec.num_outputs)
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_onnx_file_is_self_contained(exported: dict) -> None:
    path, _ = exported["attention"]
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith("attention")) == [
        "attention.onnx"
    ]
    onnx.checker.check_model(str(path))


def test_interface_check_rejects_a_fixed_batch(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["output"])],
        "fixed",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 4], np.zeros(32, np.float32))],
    )
    path = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(OnnxExportError, match="batch axis is fixed at 2"):
        check_onnx_interface(path, DENSE)


def test_export_onnx_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_text("someone else's")
    with pytest.raises(ExportExistsError, match=re.escape(str(target))):
        export_onnx(build_torch(DENSE), DENSE, target)
    assert target.read_text() == "someone else's"


def test_export_writes_both_repositories(tmp_path: Path, exported: dict) -> None:
    settings = TritonSettings(max_batch_size=16, preferred_batch_sizes=(4, 8), instance_count=2)
    result = export_triton(build_torch(DENSE), DENSE, tmp_path, settings)
    assert result.standard_dir == tmp_path / STANDARD_REPOSITORY / DENSE.id
    assert result.python_dir == tmp_path / PYTHON_REPOSITORY / DENSE.id
    files = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())  # noqa: E731
    assert files(result.standard_dir) == ["1/model.onnx", "config.pbtxt"]
    assert files(result.python_dir) == [
        "1/model.onnx", "1/model.py", "1/triton_stub.py", "config.pbtxt",
    ]  # fmt: skip
    assert (result.python_dir / "1/model.py").read_text() == PYTHON_MODEL_SOURCE.read_text()
    assert (result.python_dir / "1/triton_stub.py").read_text() == STUB_SOURCE.read_text()
    standard = parse_config((result.standard_dir / "config.pbtxt").read_text())
    python = parse_config((result.python_dir / "config.pbtxt").read_text())
    assert standard.platform == "onnxruntime_onnx" and python.backend == "python"
    python.backend, python.platform = "", "onnxruntime_onnx"
    assert python == standard  # everything but the executor is identical
    onnx_bytes = (result.standard_dir / "1/model.onnx").read_bytes()
    assert (result.python_dir / "1/model.onnx").read_bytes() == onnx_bytes

    # An ONNX file made elsewhere goes into another repository the same way.
    path, _ = exported["lstm"]
    model_dir = write_triton_model(path, SPECS["lstm"], tmp_path / "other", settings)
    assert (model_dir / "1/model.onnx").read_bytes() == path.read_bytes()


def test_export_never_clobbers_without_force(tmp_path: Path) -> None:
    module = build_torch(DENSE)
    first = export_triton(module, DENSE, tmp_path, TritonSettings(max_batch_size=8))
    neighbour = tmp_path / STANDARD_REPOSITORY / "someone-elses-model" / "config.pbtxt"
    neighbour.parent.mkdir()
    neighbour.write_text("keep me")
    config_before = (first.standard_dir / "config.pbtxt").read_text()

    with pytest.raises(ExportExistsError, match=re.escape(str(first.standard_dir))):
        export_triton(module, DENSE, tmp_path, TritonSettings(max_batch_size=4))
    assert (first.standard_dir / "config.pbtxt").read_text() == config_before

    # A stray file only in the python repository also stops the export, before any write.
    (first.standard_dir.parent / "x").mkdir()
    stray_dir = tmp_path / PYTHON_REPOSITORY / "x"
    stray_dir.mkdir()
    (stray_dir / "notes.txt").write_text("mine")
    with pytest.raises(ExportExistsError, match=re.escape(str(stray_dir))):
        export_triton(module, DENSE, tmp_path, name="x")
    assert list((first.standard_dir.parent / "x").iterdir()) == []

    (first.standard_dir / "2").mkdir()  # a stale version that force must not leave behind
    again = export_triton(module, DENSE, tmp_path, TritonSettings(max_batch_size=4), force=True)
    assert parse_config((again.standard_dir / "config.pbtxt").read_text()).max_batch_size == 4
    assert not (again.standard_dir / "2").exists()
    assert neighbour.read_text() == "keep me"
