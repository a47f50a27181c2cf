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


def test_check_names_an_exported_file_it_cannot_run(tmp_path: Path):
    family = tmp_path / "family.yaml"
    generated = invoke("models", "generate", "--depths", "1", "--widths", "8", "-o", str(family))
    assert generated.exit_code == 0, generated.output
    out = tmp_path / "export"
    exported = invoke("models", "export", str(family), "-o", str(out), "--to", "triton")
    assert exported.exit_code == 0, exported.output
    (onnx,) = (out / "triton").glob("*/1/model.onnx")
    onnx.write_bytes(onnx.read_bytes()[:300])  # a copy cut short
    checked = invoke("models", "check", str(out))
    assert checked.exit_code == 2, checked.output
    assert "Traceback" not in checked.output
    (line,) = checked.output.strip().splitlines()
    assert line.startswith("FAIL ") and f"cannot run {onnx}" in line and "INVALID_PROTOBUF" in line


def test_serve_exits_non_zero_with_the_log_when_tritonserver_dies(triton_batching_model):
    """Killing the server out from under `models serve` is a failure, not a clean stop."""
    import os
    import re
    import signal
    import subprocess
    import sys

    model = triton_batching_model
    argv = ["models", "serve", str(model.repository), "--models", model.name]
    proc = subprocess.Popen(
        [sys.executable, "-m", "servebench.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving;"):
                break
        started = "".join(lines)
        pid = int(re.search(r"tritonserver \(pid (\d+)\) ready", started).group(1))
        os.kill(pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, started + rest
    assert "Traceback" not in rest
    assert f"error: tritonserver (pid {pid}) exited on its own; the end of its log:" in rest
    assert "stopped" not in rest


def test_serve_takes_fixed_ports_and_names_one_in_use(triton_batching_model):
    import socket

    from servebench.common.ports import free_ports

    model = triton_batching_model
    http, grpc, metrics = free_ports(3)
    served = invoke(
        "models", "serve", str(model.repository), "--models", model.name, "--once",
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
    )  # fmt: skip
    assert served.exit_code == 0, served.output
    assert f"HTTP    http://127.0.0.1:{http}" in served.output
    assert f"gRPC    127.0.0.1:{grpc}" in served.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = invoke(
            "models", "serve", str(model.repository), "--once", "--http-port", str(port)
        )
    assert refused.exit_code == 2, refused.output
    assert f"port {port} on 127.0.0.1 is already in use" in refused.output
    assert "Traceback" not in refused.output


def test_a_broken_export_record_is_one_line(tmp_path: Path):
    export = tmp_path / "export"
    export.mkdir()
    generated = invoke(
        "models", "generate", "--depths", "1", "--widths", "8", "-o", str(export / "family.yaml")
    )
    assert generated.exit_code == 0, generated.output
    (export / "export.json").write_text("{bad")
    checked = invoke("models", "check", str(export))
    assert checked.exit_code == 2 and "Traceback" not in checked.output
    assert f"{export / 'export.json'}: not an export record" in checked.output
