"""Exporting a family for both servers: parity for every layer type, files servers parse."""

from pathlib import Path

import pytest
from google.protobuf import text_format

from model_zoo.export import ExportExistsError, TritonSettings, parse_config
from model_zoo.export.family import export_family, load_family
from model_zoo.export.tfs_batching import TfsBatching, parse_batching_parameters
from model_zoo.mutate import grid
from model_zoo.parity import ParityError, check_parity
from model_zoo.spec import resnet50_spec
from model_zoo.torch_builder import build_torch

SETTINGS = TritonSettings(
    max_batch_size=16, dynamic_batching=True, preferred_batch_sizes=(4, 8),
    max_queue_delay_microseconds=500, instance_count=2,
)  # fmt: skip


@pytest.fixture(scope="module")
def family():
    specs = grid(
        ["dense", "conv", "lstm", "gru", "attention"], [2], [16],
        input_shapes={"conv": (10, 8, 3), "lstm": (6,), "gru": (6,), "attention": (6,)},
        seq_len=5, heads=2,
    )  # fmt: skip
    return [*specs, resnet50_spec(64, num_outputs=7)]


@pytest.fixture(scope="module")
def exported(family, tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    models = export_family(
        family, out, triton_settings=SETTINGS, tfs_batching=TfsBatching(max_batch_size=16), seed=3
    )
    return out, models


def test_every_layer_type_and_resnet50_pass_parity(family, exported):
    _, models = exported
    assert [m.spec_id for m in models] == [s.id for s in family]
    for model in models:
        assert set(model.parity.differences) == {"onnxruntime", "tensorflow"}
        assert model.parity.ok, model.parity.describe()
        assert model.parity.reference_max_abs > 0  # a model that outputs zeros proves nothing


def test_layout_and_server_files_parse(family, exported):
    out, _ = exported
    from tensorflow_serving.config import model_server_config_pb2

    config_text = (out / "tfs" / "models.config").read_text()
    server_config = text_format.Parse(config_text, model_server_config_pb2.ModelServerConfig())
    listed = {c.name: c.base_path for c in server_config.model_config_list.config}
    assert listed == {s.id: f"/models/{s.id}" for s in family}
    batching = parse_batching_parameters((out / "tfs" / "batching_parameters.txt").read_text())
    assert batching.max_batch_size.value == 16
    for spec in family:
        assert (out / "tfs" / spec.id / "1" / "saved_model.pb").is_file()
        for repo, field, value in (
            ("triton", "platform", "onnxruntime_onnx"),
            ("triton-python", "backend", "python"),
        ):
            config = parse_config((out / repo / spec.id / "config.pbtxt").read_text())
            assert config.name == spec.id and config.max_batch_size == 16
            assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
            assert config.instance_group[0].count == 2
            assert getattr(config, field) == value
            assert list(config.input[0].dims) == list(spec.served_input_shape)
    specs, seed = load_family(out)
    assert [s.id for s in specs] == [s.id for s in family] and seed == 3


def test_refuses_to_clobber_without_force(family, exported):
    out, _ = exported
    before = (out / "tfs" / "models.config").read_text()
    with pytest.raises(ExportExistsError, match="--force"):
        export_family(family[:1], out, check=False)
    assert (out / "tfs" / "models.config").read_text() == before


def test_force_replaces_and_keeps_other_models_listed(family, exported, tmp_path: Path):
    out, _ = exported
    export_family(family[:1], out, formats=("tfs",), check=False, force=True, seed=3)
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse(
        (out / "tfs" / "models.config").read_text(), model_server_config_pb2.ModelServerConfig()
    )
    assert len(config.model_config_list.config) == len(family)


def test_parity_failure_names_the_model_and_difference(family, exported):
    _, models = exported
    spec = family[0]
    other_weights = build_torch(spec, seed=99)  # not the function that was exported
    with pytest.raises(ParityError, match=rf"{spec.id}: max \|diff\| vs torch: onnxruntime"):
        check_parity(spec, other_weights, onnx_path=models[0].onnx_path)
