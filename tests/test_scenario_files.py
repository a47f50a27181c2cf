"""A user's own model files in a scenario (`models.files`), run on the real local Triton.

The models are built here (no downloads): a torch module exported to ONNX, and a
hand-written Triton model folder whose config.pbtxt has fields servebench does not sweep
(a parameter, a version policy). A two-setting matrix (dynamic batching off and on) runs
both with inputs from an .npz; each setting's copy of the user's config keeps the user's
fields and carries the swept ones. Bad files are one `file:line field` line each.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from google.protobuf import text_format
from scenario_checks import problems, write
from tritonclient.grpc import model_config_pb2 as mc
from typer.testing import CliRunner

from model_zoo.counting import count
from model_zoo.export.onnx import export_onnx
from model_zoo.imports.counts import count_onnx
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.analysis.roofline import uncounted_models
from servebench.cli import app
from servebench.scenario.plan import expand
from servebench.scenario.runner import ScenarioRunner
from servebench.scenario.trial import model_columns
from servebench.scenario.validate import load_scenario

ROOT = Path(__file__).resolve().parents[1]
HAND_CONFIG = """
# written by hand: the parameter and the version policy are not settings servebench sweeps
name: "hand"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy { latest { num_versions: 1 } }
input { name: "x" data_type: TYPE_FP32 dims: [ 6 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 3 ] }
parameters { key: "owner" value { string_value: "the user" } }
instance_group { name: "mine" count: 3 kind: KIND_CPU }
"""


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)).eval()


def _to_onnx(module: torch.nn.Module, path: Path, dynamic_features: bool = False) -> Path:
    axes = {0: "batch", 1: "features"} if dynamic_features else {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(
            module, (torch.randn(2, 6),), str(path), input_names=["x"], output_names=["y"],
            dynamic_axes={"x": axes, "y": {0: "batch"}}, dynamo=False,
        )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """net.onnx, the Triton folder hand/ (its own config and ONNX file), inputs.npz."""
    root = tmp_path_factory.mktemp("user-files")
    _to_onnx(_mlp(0), root / "net.onnx")
    (root / "hand" / "1").mkdir(parents=True)
    _to_onnx(_mlp(1), root / "hand" / "1" / "model.onnx")
    (root / "hand" / "config.pbtxt").write_text(HAND_CONFIG)
    rng = np.random.default_rng(0)
    np.savez(root / "inputs.npz", x=rng.standard_normal((16, 6)).astype(np.float32))
    return root


def _scenario(files: str, *, settings: str = "{max_batch_size: 4, dynamic_batching: false}") -> str:
    return (
        "# which setting serves my models best?\n"
        "name: files\n"
        "models:\n"
        "  files:\n"
        f"{files}"
        "servers:\n"
        "  - name: triton\n"
        "    api: triton\n"
        f"    settings: {settings}\n"
        "workload:\n"
        "  rates: [40]\n"
        "  batch_sizes: [1, 2]\n"
        "  inputs: inputs.npz\n"
        "  duration_s: 1\n"
        "  warmup_s: 0.2\n"
        "  timeout_s: 2\n"
    )


BOTH = "    - {path: net.onnx}\n    - {path: hand, name: hand}\n"


def test_user_files_run_on_local_triton_with_only_swept_fields_rewritten(
    user_files: Path, triton_install, tmp_path: Path
) -> None:
    text = _scenario(BOTH, settings="{max_batch_size: 4, dynamic_batching: [false, true]}")
    path = write(user_files, text, "run.yaml")
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    run = outcome.directory.path
    rows = list(csv.DictReader((run / "trials.csv").open()))
    # 2 settings x 2 models x 2 batch sizes, every one measured.
    assert len(rows) == 8 and {r["status"] for r in rows} == {"ok"}, rows
    by_model = {r["model"]: r for r in rows}
    assert set(by_model) == {"net", "hand"}
    module = _mlp(0)
    params = sum(p.numel() for p in module.parameters())
    # A file's format has its own column; it is not one of the generated families.
    assert by_model["net"]["format"] == "onnx" and by_model["hand"]["format"] == "triton"
    assert by_model["net"]["layer_type"] == by_model["hand"]["layer_type"] == ""
    for row in by_model.values():  # both are ONNX graphs: counted
        assert int(row["params"]) == params
        assert float(row["flops_per_sample"]) == 2 * (6 * 5 + 5 * 3)
        assert int(row["weight_bytes"]) == 4 * params
        assert row["depth"] == "" and row["width"] == ""
    # Each setting's copy of the user's config: the user's fields kept, the swept ones set.
    batchers = set()
    for config_path in sorted(run.glob("repos/*/models/hand/config.pbtxt")):
        config = text_format.Parse(config_path.read_text(), mc.ModelConfig())
        assert config.parameters["owner"].string_value == "the user"
        assert config.version_policy.latest.num_versions == 1
        assert config.max_batch_size == 4
        assert [(g.name, g.count) for g in config.instance_group] == [("mine", 1)]
        assert config.backend == "python"  # the local tritonserver's twin of the ONNX model
        batchers.add(config.HasField("dynamic_batching"))
    assert batchers == {False, True}
    # Imported once into the run's export, from where every setting copied it.
    assert (run / "export" / "import.json").is_file()
    assert sorted(p.name for p in (run / "export" / "triton").iterdir()) == ["hand", "net"]


def test_counts_of_an_exported_graph_match_the_zoos_own(tmp_path: Path) -> None:
    for spec in (
        ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,)),
        ModelSpec(layer_type="conv", depth=2, width=4, input_shape=(8, 8, 3)),
    ):
        path = export_onnx(build_torch(spec, seed=0), spec, tmp_path / f"{spec.id}.onnx")
        counted = count_onnx(path, {"input": spec.served_input_shape}, batched=True)
        expected = count(spec)
        assert (
            counted.params, counted.flops, counted.weight_bytes, counted.activation_bytes
        ) == (
            expected.params, expected.flops, expected.weight_bytes, expected.activation_bytes
        ), spec.id  # fmt: skip


def test_a_recurrent_graph_has_its_params_but_unknown_flops(tmp_path: Path) -> None:
    """An LSTM node is not counted: its FLOPs are unknown, not the few MatMuls around it."""
    spec = ModelSpec(layer_type="lstm", depth=1, width=16, input_shape=(8,))
    path = export_onnx(build_torch(spec, seed=0), spec, tmp_path / f"{spec.id}.onnx")
    counted = count_onnx(path, {"input": spec.served_input_shape}, batched=True)
    assert counted.flops is None and counted.activation_bytes is None
    # Params are still counted (a scalar constant the exporter writes as a float tensor
    # counts too: within 1 %).
    assert counted.params == pytest.approx(count(spec).params, rel=0.01)


def test_a_graph_that_leaves_a_dim_to_the_data_has_no_flops(tmp_path: Path) -> None:
    path = tmp_path / "reshape.onnx"

    class Flatten(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(x.shape[0], -1) @ torch.ones(24, 2)

    with torch.no_grad():
        torch.onnx.export(
            Flatten(), (torch.randn(2, 4, 6),), str(path), input_names=["x"],
            output_names=["y"], dynamic_axes={"x": {0: "b", 1: "t"}, "y": {0: "b"}}, dynamo=False,
        )  # fmt: skip
    counted = count_onnx(path, {}, batched=True)  # the open dim was never given
    assert counted.params == 48 and counted.flops is None and counted.activation_bytes is None


def test_generated_models_keep_their_trial_ids() -> None:
    """--resume and `report compare` join on trial ids: a scenario without files plans the
    same ids as before models could be files (taken at bed3ebd)."""
    for name, expected in (
        ("quickstart", "9a0ee62d425fb845"),
        ("triton_settings", "99e5d39d775be189"),
        ("mutation_sweep", "372f92fd58161d66"),
    ):
        path = ROOT / "scenarios" / f"{name}.yaml"
        ids = " ".join(t.id for t in expand(load_scenario(path), path.parent).trials)
        assert hashlib.sha256(ids.encode()).hexdigest()[:16] == expected, name


def test_the_file_is_read_once(user_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation reads each file; the plan takes what it read (no second read)."""
    import model_zoo.imports.model as model_module

    reads = []
    real = model_module.open_source
    monkeypatch.setattr(
        model_module, "open_source", lambda *a, **k: reads.append(a[0]) or real(*a, **k)
    )
    path = write(user_files, _scenario(BOTH), "once.yaml")
    plan = expand(load_scenario(path), path.parent)
    assert len(reads) == 2 and {m.id for m in plan.models} == {"net", "hand"}


def _validate(path: Path):
    return CliRunner().invoke(app, ["scenario", "validate", str(path)])


def test_bad_files_are_one_line_each_naming_file_line_and_field(
    user_files: Path, tmp_path: Path
) -> None:
    (tmp_path / "inputs.npz").write_bytes((user_files / "inputs.npz").read_bytes())
    good = (user_files / "net.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(good[: len(good) // 2])
    _to_onnx(_mlp(0), tmp_path / "open.onnx", dynamic_features=True)
    (tmp_path / "net.onnx").write_bytes(good)
    files = (
        "    - {path: missing.onnx}\n"  # line 5
        "    - {path: cut.onnx}\n"  # line 6
        "    - {path: open.onnx}\n"  # line 7
        "    - {path: net.onnx}\n"  # line 8
        "    - {path: net.onnx}\n"  # line 9: the same name again
    )
    path = write(tmp_path, _scenario(files))
    found = problems(tmp_path, _scenario(files))
    assert len(found) == 4, found
    missing, cut, dynamic, clash = found
    assert missing.startswith(f"{path}:5 models.files[0].path: 'missing.onnx'")
    assert "no such file" in missing
    assert cut.startswith(f"{path}:6 models.files[1].path: 'cut.onnx'")
    assert "not a readable ONNX model" in cut
    assert dynamic.startswith(f"{path}:7 models.files[2].input_shapes: ")
    assert "input 'x' dim 0" in dynamic and "input_shapes: {x: [DIMS]}" in dynamic
    assert clash.startswith(f"{path}:9 models.files[4].path: ") and "'net' is already" in clash
    result = _validate(path)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for line in found:
        assert line in result.output
    # Given the open dimension, the file is fine.
    fixed = _scenario("    - {path: open.onnx, input_shapes: {x: [6]}}\n")
    assert _validate(write(tmp_path, fixed, "fixed.yaml")).exit_code == 0


def test_input_data_that_does_not_fit_a_model_is_refused_at_validation(
    user_files: Path, tmp_path: Path
) -> None:
    """`workload.inputs` is matched against each model's served signature before anything
    runs: a file's own (net.onnx takes x of 6 features), a generated model's (`input`)."""
    (tmp_path / "net.onnx").write_bytes((user_files / "net.onnx").read_bytes())
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "inputs.npz", x=rng.standard_normal((4, 5)).astype(np.float32))
    path = write(tmp_path, _scenario("    - {path: net.onnx}\n"))
    (found,) = problems(tmp_path, _scenario("    - {path: net.onnx}\n"))
    assert found.startswith(f"{path}:13 workload.inputs: 'inputs.npz' — does not fit model 'net'")
    assert "per-sample shape [5], the model's is [6]" in found
    assert _validate(path).exit_code == 2
    # A generated model is served with one tensor named `input`: x is not it.
    np.savez(tmp_path / "inputs.npz", x=rng.standard_normal((4, 6)).astype(np.float32))
    generated = _scenario("    - {path: net.onnx}\n").replace(
        "  files:\n",
        "  specs: [{layer_type: dense, depth: 1, width: 8, input_shape: [6]}]\n  files:\n",
    )
    (found,) = problems(tmp_path, generated)
    assert "does not fit model 'dense-d1-w8-" in found and "'x' is not an input" in found


def test_a_model_servebench_cannot_serve_so_is_refused_before_the_run(
    user_files: Path, tmp_path: Path
) -> None:
    (tmp_path / "net.onnx").write_bytes((user_files / "net.onnx").read_bytes())
    tfs = (
        "name: tfs\nmodels: {files: [{path: net.onnx}]}\n"
        "servers: [{name: tfs, api: tfs, launch: docker}]\n"
        "workload: {rates: [1], duration_s: 1}\n"
    )
    (problem,) = problems(tmp_path, tfs)
    assert problem.startswith(f"{tmp_path / 's.yaml'}:2 models.files[0].path: ")
    assert "'net' (onnx) cannot be served by server 'tfs' (TF Serving)" in problem
    # A Triton folder without a batch axis takes neither batches nor the dynamic batcher.
    flat = tmp_path / "flat"
    (flat / "1").mkdir(parents=True)
    (flat / "1" / "model.onnx").write_bytes((user_files / "net.onnx").read_bytes())
    (flat / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [ 2, 6 ] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [ 2, 3 ] }\n'
    )
    text = (
        "name: flat\nmodels: {files: [{path: flat}]}\n"
        "servers: [{name: t, api: triton, settings: {dynamic_batching: true}}]\n"
        "workload: {rates: [1], batch_sizes: [1, 2], duration_s: 1}\n"
    )
    found = problems(tmp_path, text, "flat.yaml")
    where = tmp_path / "flat.yaml"
    assert any(p.startswith(f"{where}:3 servers[0].settings.dynamic_batching") for p in found)
    assert any(p.startswith(f"{where}:4 workload.batch_sizes[1]: 2") for p in found), found
    assert all("has no batch axis" in p for p in found) and len(found) == 2, found


def test_the_shipped_your_model_scenario_validates_with_its_files() -> None:
    path = ROOT / "scenarios" / "your_model.yaml"
    plan = expand(load_scenario(path), path.parent)
    (model,) = plan.models
    assert model.id == "your_model" and model.counts.flops is not None
    assert len(plan.settings) == 4 and plan.scenario.workload.inputs is not None


def test_a_resumed_run_imports_each_file_once(user_files: Path, tmp_path: Path) -> None:
    """The run's export holds each file after its first import; a second pass (a resumed
    run) finds it in import.json and leaves it as it was."""
    from servebench.scenario.deploy import export_for
    from servebench.servers.kinds import KINDS

    path = write(user_files, _scenario(BOTH), "resume.yaml")
    plan = expand(load_scenario(path), path.parent)
    kinds = [KINDS["triton-local"]]
    out = export_for(kinds, plan.models, tmp_path, seed=0)
    record = out / "import.json"
    assert set(json.loads(record.read_text())) == {"net", "hand"}
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    export_for(kinds, plan.models, tmp_path, seed=0)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_models_without_counts_are_named_not_plotted() -> None:
    trials = pd.DataFrame(
        {
            "status": ["ok", "ok", "failed"],
            "model": ["counted", "keras-file", "broken"],
            "flops_per_sample": [1e6, None, None],
        }
    )
    assert uncounted_models(trials) == ["keras-file"]


def test_a_torchscript_file_needs_its_shapes_and_is_not_counted(tmp_path: Path) -> None:
    torch.jit.script(_mlp(0)).save(str(tmp_path / "net.pt"))
    text = _scenario("    - {path: net.pt}\n").replace("  inputs: inputs.npz\n", "")
    (problem,) = problems(tmp_path, text)
    assert problem.startswith(f"{tmp_path / 's.yaml'}:5 models.files[0].input_shapes: ")
    assert "input_shapes: {input: [DIMS]}" in problem
    given = text.replace("{path: net.pt}", "{path: net.pt, input_shapes: {input: [6]}}")
    path = write(tmp_path, given, "given.yaml")
    (model,) = expand(load_scenario(path), path.parent).models
    columns = model_columns(model)
    assert (columns.format, columns.layer_type, columns.params, columns.flops_per_sample) == (
        "torchscript", None, None, None,
    )  # fmt: skip
