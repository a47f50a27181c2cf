"""A user's files made hostile: each refused in one line, exit 2, in bounded memory and
time, leaving nothing on disk (issue 33, class A; `servebench.common.userfile`).

Every case is generated here: links out of a Triton model folder (to /dev/zero, to a file
elsewhere, a version folder elsewhere), link loops, dangling links, a fifo, zip bombs (a
.keras and a TorchScript file of a few MB that inflate to 5 GiB), .npz bombs (250 bytes
whose header declares 1e9 x 16 floats; 2 MB that inflate to a 2 GiB array), ONNX models
whose external data declares 3.6 and 6.4 GB (sparse files), shapes of 10^10 and 10^20
elements, empty files, a 300-character name. Each goes to the command that reads it —
`models import`, `load --input-data`, `scenario validate` — run in a forked child of this
process (`hostile._child`, as tests/test_cli_hostile.py runs them), and must answer with one
`error:` line naming the file or option, exit 2, no traceback, within `TIMEOUT_S` and
`MEMORY_GROWTH` of peak memory above what the child started with, leaving no `--out` and
no staging folder. A zip or .npz bomb inflated or a header's shape allocated would blow
the memory bound (or end in the 8 GiB address-space limit the child runs under).

A stop of `models import` by SIGTERM or SIGINT while it copies a model folder removes
what it staged.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import hostile
import numpy as np
import pytest
import torch
from hostile import Invocation, Outcome, problems
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
#: Seconds each command may take; a refusal takes well under one (a child on a loaded
#: 2-core machine, importing nothing new, has taken 3).
TIMEOUT_S = 60.0
#: Peak resident memory a child may add to what it shared with this process at the fork.
#: A refusal adds tens of MB; each hostile file, read, asks for 2 GiB or more.
MEMORY_GROWTH = 768 * 2**20
_PRELOAD = (
    "servebench.cli.load", "servebench.cli.models", "servebench.cli.scenario",
    "servebench.clients.factory", "servebench.scenario.validate", "model_zoo.imports.formats",
    "model_zoo.imports.onnx_file", "model_zoo.imports.tf_file", "model_zoo.imports.torch_file",
    "model_zoo.imports.triton_repo", "model_zoo.imports.counts", "model_zoo.parity",
)  # fmt: skip
_ZEROS = 2**24  # bytes of zeros per deflate block in a bomb


# -- making hostile files -------------------------------------------------------------------


def _deflated(prefix: bytes, zeros: int) -> tuple[bytes, int]:
    """Raw deflate of `prefix` then `zeros` zero bytes, and its CRC-32, made in a second
    instead of compressing gigabytes: after a full flush the compressor starts afresh, so
    every further block of zeros compresses to the same bytes."""
    assert zeros % _ZEROS == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(bytes(_ZEROS)) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc, zero_block = zlib.crc32(prefix), bytes(_ZEROS)
    for _ in range(zeros // _ZEROS):
        crc = zlib.crc32(zero_block, crc)
    return head + block * (zeros // _ZEROS) + compressor.flush(), crc


def _zip(path: Path, members: dict[str, tuple[bytes, int]]) -> None:
    """A zip file (no zip64: each member under 4 GiB) of deflated members, each `prefix`
    followed by that many zero bytes; written record by record, since Python's zipfile
    would compress every zero."""
    local, central = io.BytesIO(), io.BytesIO()
    for name, (prefix, zeros) in members.items():
        data, crc = _deflated(prefix, zeros)
        size, encoded, offset = len(prefix) + zeros, name.encode(), local.tell()
        fields = (8, 0, 0x21, crc, len(data), size, len(encoded))  # deflate, time, date
        local.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, *fields, 0) + encoded + data)
        central.write(
            struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, *fields, 0, 0, 0, 0, 0,
                        offset) + encoded
        )  # fmt: skip
    count, directory = len(members), central.getvalue()
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), local.tell(), 0)
    path.write_bytes(local.getvalue() + directory + end)


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    return out.getvalue()


def _onnx_with_external(folder: Path, name: str, side: int, location: str = "w.bin") -> Path:
    """y = x @ w, w a float32 side x side matrix in `location` (a sparse file of that
    size, unless the location leaves the folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[side, side])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(side * side * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    data = folder / location
    if data.parent == folder:
        with open(data, "wb") as handle:
            handle.truncate(side * side * 4)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", side])], [weight],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return path


def _dynamic_onnx(path: Path) -> Path:
    """y = x, x of shape (batch, n): its second dimension is the user's to give."""
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "dynamic",
        [value("x", TensorProto.FLOAT, ["batch", "n"])],
        [value("y", TensorProto.FLOAT, ["batch", "n"])],
    )  # fmt: skip
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    return path


TRITON_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 4
input { name: "x" data_type: TYPE_FP32 dims: [ 3 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ 3 ] }
"""


def _triton_folder(root: Path, name: str) -> Path:
    """A python-backend Triton model folder (copied as it is by an import)."""
    folder = root / name / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(TRITON_CONFIG)
    (folder / "1" / "model.py").write_text("# the model\n")
    return folder


class Files:
    """Every hostile file, made once under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        elsewhere = root / "elsewhere"
        (elsewhere / "1").mkdir(parents=True)
        (elsewhere / "1" / "model.py").write_text("# not the user's folder\n")
        links = {
            "to /dev/zero": ("1/extra.bin", "/dev/zero"),
            "to a file elsewhere": ("1/secret.txt", "/etc/hostname"),
            "a version folder elsewhere": ("2", str(elsewhere / "1")),
            "a link loop": ("1/loop", "loop"),
            "a dangling link": ("1/gone.bin", str(root / "no-such-file")),
            "model file to /dev/zero": ("1/model.onnx", "/dev/zero"),
        }
        self.folders: dict[str, tuple[Path, str]] = {}
        for i, (label, (inside, target)) in enumerate(links.items()):
            folder = _triton_folder(root, f"triton-{i}")
            (folder / inside).unlink(missing_ok=True)
            (folder / inside).symlink_to(target)
            self.folders[label] = (folder, Path(inside).name)
        looped = _triton_folder(root, "triton-two-loop")
        (looped / "1" / "a").symlink_to("b")
        (looped / "1" / "b").symlink_to("a")
        self.folders["two links in a loop"] = (looped, "1/a")
        fifo = _triton_folder(root, "triton-fifo")
        os.mkfifo(fifo / "1" / "pipe")
        self.folders["a fifo"] = (fifo, "pipe")

        self.zero_onnx = root / "zero.onnx"
        self.zero_onnx.symlink_to("/dev/zero")
        self.dangling = root / "dangling.onnx"
        self.dangling.symlink_to(root / "no-such-model.onnx")
        bomb = {"config.json": (b'{"class_name": "Sequential"}', 0),
                "model.weights.h5": (b"", 3 * 2**30), "assets/blob": (b"", 2 * 2**30)}  # fmt: skip
        self.keras_bomb = root / "bomb.keras"
        _zip(self.keras_bomb, bomb)
        self.torch_bomb = root / "bomb.pt"
        _zip(self.torch_bomb, {"bomb/data.pkl": (b"", 3 * 2**30), "bomb/data/0": (b"", 2 * 2**30)})
        self.empty = {}
        for suffix in (".onnx", ".pt", ".pt2", ".keras"):
            path = root / f"empty{suffix}"
            path.write_bytes(b"")
            self.empty[suffix] = path

        self.huge_onnx = _onnx_with_external(root / "huge", "huge.onnx", 30_000)  # 3.6 GB
        self.huger_onnx = _onnx_with_external(root / "huger", "huger.onnx", 40_000)  # 6.4 GB
        (root / "outside.bin").write_bytes(bytes(64))
        self.escaping_onnx = _onnx_with_external(root / "escaping", "m.onnx", 4, "../outside.bin")
        self.dynamic_onnx = _dynamic_onnx(root / "dynamic.onnx")
        self.scripted = root / "scripted.pt"
        torch.jit.script(torch.nn.Linear(3, 2)).save(str(self.scripted))
        # The `input` of `Linear.forward` is the TorchScript file's one input.

        self.npz_header_bomb = root / "header-bomb.npz"
        with zipfile.ZipFile(self.npz_header_bomb, "w") as archive:
            archive.writestr("x.npy", _npy_header((10**9, 16)))
        self.npz_zip_bomb = root / "zip-bomb.npz"
        _zip(self.npz_zip_bomb, {"x.npy": (_npy_header((512, 2**20)), 2**31)})
        self.zero_npz = root / "zero.npz"
        self.zero_npz.symlink_to("/dev/zero")

        self.scenario_model = root / "your_model.onnx"
        self.scenario_model.write_bytes((ROOT / "scenarios/data/your_model.onnx").read_bytes())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    for module in _PRELOAD:  # imported once here, so each forked child starts with them
        importlib.import_module(module)
    hostile.root()
    return Files(tmp_path_factory.mktemp("hostile-files"))


# -- running a command in a child ---------------------------------------------------------


def _rss() -> int:
    """This process's resident bytes now."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def run(argv: list[str], scratch: Path) -> tuple[Outcome, int]:
    """`servebench ARGV` in a forked child (`hostile._child`); what it printed and how it
    ended, and the resident memory it added to what it started with (its peak, from the
    kernel's accounting, less this process's resident memory at the fork)."""
    result = scratch / "outcome.json"
    before = _rss()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        hostile._child(argv, result)  # never returns
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        elapsed = time.monotonic() - started
        if done:
            break
        if elapsed > TIMEOUT_S:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            status = None
            break
        time.sleep(0.02)
    data = json.loads(result.read_text()) if result.exists() else {}
    code = data.get("exit_code") if status is not None else None
    invocation = Invocation(tuple(argv[:2]), "", "", argv, ())
    outcome = Outcome(
        invocation, code, data.get("stdout", ""), data.get("stderr", ""),
        data.get("traceback"), elapsed,
    )  # fmt: skip
    return outcome, usage.ru_maxrss * 1024 - before


def assert_refused(argv: list[str], scratch: Path, *names: str) -> str:
    """The command refuses in one `error:` line naming one of `names`, exit 2, within the
    time and memory bounds; returns the line."""
    outcome, grown = run(argv, scratch)
    outcome.invocation.names = names
    found = problems(outcome, TIMEOUT_S)
    assert not found, f"servebench {' '.join(argv)}: {found}: {outcome.output[-2000:]}"
    assert grown < MEMORY_GROWTH, f"{argv}: {grown / 2**20:.0f} MiB more resident memory"
    return outcome.stderr.strip()


def _left_over(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name != "outcome.json")


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    """A folder for one command's --out; nothing but the outcome may be left in it."""
    yield tmp_path
    assert _left_over(tmp_path) == []


def _import(source: Path, work: Path, *extra: str) -> list[str]:
    return ["models", "import", str(source), "--out", str(work / "out"), *extra]


# -- models import --------------------------------------------------------------------------

FOLDER_CASES = [
    "to /dev/zero", "to a file elsewhere", "a version folder elsewhere", "a link loop",
    "a dangling link", "model file to /dev/zero", "two links in a loop", "a fifo",
]  # fmt: skip


@pytest.mark.parametrize("case", FOLDER_CASES)
def test_a_triton_folder_with_a_link_or_device_is_refused_by_name(
    case: str, files: Files, work: Path
) -> None:
    folder, named = files.folders[case]
    line = assert_refused(_import(folder, work), work, named)
    assert "fifo" in line if case == "a fifo" else "a link (to " in line


def test_the_same_folder_is_refused_by_scenario_validate(files: Files, tmp_path: Path) -> None:
    folder, named = files.folders["to /dev/zero"]
    scenario = _scenario(tmp_path, f"models:\n  files:\n    - path: {folder}\n")
    line = assert_refused(["scenario", "validate", str(scenario)], tmp_path, named)
    assert "models.files[0].path" in line


@pytest.mark.parametrize(
    ("label", "attribute", "named", "reason"),
    [
        ("a link to /dev/zero as the model", "zero_onnx", "zero.onnx", "a character device"),
        ("a dangling link as the model", "dangling", "dangling.onnx", "no such file"),
        ("a .keras zip bomb", "keras_bomb", "bomb.keras", "inflates to 5 GiB"),
        ("a TorchScript zip bomb", "torch_bomb", "bomb.pt", "inflates to 5 GiB"),
        ("3.6 GB of external data", "huge_onnx", "huge.onnx", "2 GiB"),
        ("6.4 GB of external data", "huger_onnx", "huger.onnx", "limits.max_model_mb"),
        ("external data out of its folder", "escaping_onnx", "outside.bin", "not a path inside"),
    ],
)  # fmt: skip
def test_a_hostile_model_file_is_refused_before_it_is_read(
    label: str, attribute: str, named: str, reason: str, files: Files, work: Path
) -> None:
    line = assert_refused(_import(getattr(files, attribute), work), work, named)
    assert reason in line, line


@pytest.mark.parametrize("suffix", [".onnx", ".pt", ".pt2", ".keras"])
def test_an_empty_model_file_says_it_is_empty(suffix: str, files: Files, work: Path) -> None:
    line = assert_refused(_import(files.empty[suffix], work), work, f"empty{suffix}")
    assert "empty (0 bytes)" in line and "File not found" not in line


@pytest.mark.parametrize(
    ("source", "shape"),
    [("scripted", "input=100000x100000"), ("scripted", "input=99999999999999999999"),
     ("dynamic_onnx", "x=1x99999999999999999999")],
)  # fmt: skip
def test_a_huge_input_shape_is_refused(source: str, shape: str, files: Files, work: Path) -> None:
    argv = _import(getattr(files, source), work, "--input-shape", shape)
    line = assert_refused(argv, work, "--input-shape")
    assert "elements per sample" in line


def test_a_huge_input_shape_in_a_scenario_is_refused(files: Files, tmp_path: Path) -> None:
    """The scenario's schema bounds each dimension; their product is bounded before the
    TorchScript module runs on it."""
    models = (
        f"models:\n  files:\n    - path: {files.scripted}\n"
        "      input_shapes: {input: [100000, 100000]}\n"
    )
    argv = ["scenario", "validate", str(_scenario(tmp_path, models))]
    line = assert_refused(argv, tmp_path, "models.files[0].input_shapes")
    assert "10,000,000,000 elements per sample" in line


def test_a_long_name_is_refused(files: Files, work: Path) -> None:
    line = assert_refused(_import(files.dynamic_onnx, work, "--name", "a" * 300), work, "name")
    assert "300 characters" in line


# -- input data -----------------------------------------------------------------------------

NPZ_CASES = [
    ("npz_header_bomb", "header-bomb.npz", "59.6 GiB"),
    ("npz_zip_bomb", "zip-bomb.npz", "2 GiB"),
    ("zero_npz", "zero.npz", "a character device"),
]


@pytest.mark.parametrize(("attribute", "named", "reason"), NPZ_CASES)
def test_hostile_input_data_is_refused_by_load(
    attribute: str, named: str, reason: str, files: Files, work: Path
) -> None:
    argv = ["load", "--url", "http://127.0.0.1:9/v2/models/m/infer", "--protocol", "triton-http",
            "--model", "m", "--count", "1", "--input-data", str(getattr(files, attribute))]  # fmt: skip
    assert reason in assert_refused(argv, work, named)


@pytest.mark.parametrize(("attribute", "named", "reason"), NPZ_CASES)
def test_hostile_input_data_is_refused_by_scenario_validate(
    attribute: str, named: str, reason: str, files: Files, tmp_path: Path
) -> None:
    models = f"models:\n  files:\n    - path: {files.scenario_model}\n"
    inputs = f"  inputs: {getattr(files, attribute)}\n"
    scenario = _scenario(tmp_path, models, inputs)
    line = assert_refused(["scenario", "validate", str(scenario)], tmp_path, named)
    assert "workload.inputs" in line and reason in line


def test_a_scenarios_own_model_limit_holds_its_files(files: Files, tmp_path: Path) -> None:
    """3.6 GB of external data is within the default 4 GiB, and past a scenario's 1 GiB."""
    models = f"models:\n  files:\n    - path: {files.huge_onnx}\n      input_shapes: {{}}\n"
    scenario = _scenario(tmp_path, models, limits="limits: {max_model_mb: 1024}\n")
    line = assert_refused(["scenario", "validate", str(scenario)], tmp_path, "huge.onnx")
    assert "the most is 1 GiB (limits.max_model_mb" in line


def _scenario(folder: Path, models: str, inputs: str = "", limits: str = "") -> Path:
    path = folder / "scenario.yaml"
    path.write_text(
        "name: hostile\n" + models
        + "servers:\n  - {name: triton, api: triton, launch: local}\n"
        + "workload:\n  mode: open\n  rates: [5]\n  batch_sizes: [1]\n  duration_s: 1\n"
        + inputs + limits
    )  # fmt: skip
    return path


# -- a stop while importing -----------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_import_leaves_nothing_staged(signum: int, tmp_path: Path) -> None:
    """A model folder of 2 GiB (a sparse file) is being copied into the staging folder
    beside --out when the signal comes: the command ends with one line, exit 128 + the
    signal, and neither --out nor the staging folder is left."""
    folder = _triton_folder(tmp_path, "big")
    with open(folder / "1" / "weights.bin", "wb") as handle:
        handle.truncate(2 * 2**30)
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-m", "servebench.cli", *_import(folder, work, "--to", "triton")]
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        staged = _wait_for_staged_bytes(work, child)
        child.send_signal(signum)
        stdout, stderr = child.communicate(timeout=TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert staged, "the import ended before it staged anything"
    assert child.returncode == 128 + signum, stderr.decode()
    lines = (stdout + stderr).decode().strip().splitlines()
    assert lines == [f"error: stopped by {signal.Signals(signum).name}; nothing was imported"]
    assert sorted(p.name for p in work.iterdir()) == []


def _wait_for_staged_bytes(work: Path, child: subprocess.Popen) -> bool:
    """Whether a staging folder beside `work/out` holds a MiB of copied data before the
    child ends (or `TIMEOUT_S` passes)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and child.poll() is None:
        for staging in work.glob(".out.import-*"):
            with contextlib.suppress(OSError):
                if sum(p.stat().st_size for p in staging.rglob("*.bin")) > 2**20:
                    return True
        time.sleep(0.02)
    return False
