"""`servebench models` commands through the real CLI entry point."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servebench.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_help_everywhere():
    for command in (
        [],
        ["models"],
        *(["models", c] for c in ("generate", "list", "export", "check", "serve")),
    ):
        result = invoke(*command, "--help")
        assert result.exit_code == 0, result.output
        assert "Usage" in result.output


def test_generate_list_export_check(tmp_path: Path):
    family = tmp_path / "family.yaml"
    result = invoke(
        "models",
        "generate",
        "--types",
        "dense,gru",
        "--depths",
        "1,2",
        "--widths",
        "8",
        "-o",
        str(family),
    )
    assert result.exit_code == 0, result.output
    specs = yaml.safe_load(family.read_text())
    assert [(s["layer_type"], s["depth"]) for s in specs] == [
        ("dense", 1),
        ("dense", 2),
        ("gru", 1),
        ("gru", 2),
    ]

    listed = invoke("models", "list", str(family))
    assert listed.exit_code == 0
    assert "dense-d1-w8-" in listed.output and "GFLOPs/sample" in listed.output

    out = tmp_path / "export"
    exported = invoke(
        "models", "export", str(family), "-o", str(out), "--to", "triton", "--instances", "2"
    )
    assert exported.exit_code == 0, exported.output
    assert exported.output.count("parity ok") == 4
    assert len(list((out / "triton-python").glob("*/1/model.py"))) == 4

    again = invoke("models", "export", str(family), "-o", str(out), "--to", "triton")
    assert again.exit_code == 2 and "--force" in again.output

    checked = invoke("models", "check", str(out))
    assert checked.exit_code == 0, checked.output
    assert checked.output.count("ok ") == 4


def test_mutation_is_reproducible(tmp_path: Path):
    base = tmp_path / "base.yaml"
    base.write_text("layer_type: conv\ndepth: 2\nwidth: 8\ninput_shape: [8, 8, 3]\n")
    outputs = []
    for name in ("a.yaml", "b.yaml"):
        result = invoke(
            "models",
            "generate",
            "--spec",
            str(base),
            "--mutate",
            "5",
            "--seed",
            "11",
            "-o",
            str(tmp_path / name),
        )
        assert result.exit_code == 0, result.output
        outputs.append((tmp_path / name).read_text())
    assert outputs[0] == outputs[1]
    assert len(yaml.safe_load(outputs[0])) == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--types", "mlp"], "layer_type: 'mlp'"),
        (["--depths", "0"], "depth: "),
        (["--widths", "-3"], "width: "),
        (["--types", "lstm", "--input-shape", "lstm=32x32x3"], "input_shape: lstm takes"),
        (["--depths", "two"], "--depths: expected comma-separated integers"),
    ],
)
def test_bad_specs_name_the_field(tmp_path: Path, args, message):
    result = invoke("models", "generate", *args, "-o", str(tmp_path / "x.yaml"))
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_bad_spec_file_names_file_and_field(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {layer_type: attention, depth: 1, width: 10, input_shape: [4], heads: 3}\n")
    result = invoke("models", "list", str(bad))
    assert result.exit_code == 2
    assert "bad.yaml[0] heads: width 10 is not divisible by heads 3" in result.output


def test_serve_refuses_a_folder_that_is_not_a_repository(tmp_path: Path):
    result = invoke("models", "serve", str(tmp_path), "--once")
    assert result.exit_code == 2
    assert "not a Triton repository" in result.output
