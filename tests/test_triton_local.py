"""The real local Triton: exported repositories load, answer like torch, and stop cleanly."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
import tritonclient.http as triton_http

from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.servers import control
from servebench.servers import triton_install as install_module
from servebench.servers.base import ServerModelError, ServerStartError
from servebench.servers.local import SHM_DIR, LocalTritonServer
from servebench.servers.triton_install import TritonInstall, TritonNotInstalledError

SPECS = [
    ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4),
    ModelSpec(layer_type="gru", depth=1, width=16, input_shape=(6,), seq_len=5, num_outputs=3),
]
SETTINGS = TritonSettings(
    max_batch_size=16,
    preferred_batch_sizes=(4,),
    max_queue_delay_microseconds=2000,
    instance_count=2,
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both SPECS exported with the real torch builder; name -> (spec, module)."""
    out = tmp_path_factory.mktemp("export")
    models = {}
    for spec in SPECS:
        module = build_torch(spec, seed=3)
        export = export_triton(module, spec, out, SETTINGS)
        models[export.name] = (spec, module)
    return {"path": out / PYTHON_REPOSITORY, "models": models}


@pytest.fixture(scope="module")
def server(local_triton_module, repository: dict) -> LocalTritonServer:
    return local_triton_module(repository["path"])


def _infer(client: triton_http.InferenceServerClient, name: str, x: np.ndarray) -> np.ndarray:
    tensor = triton_http.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(name, [tensor]).as_numpy("output")


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_start_is_timed_and_listens_on_loopback(server: LocalTritonServer) -> None:
    assert server.is_ready()
    assert 0 < server.startup_s < 60
    endpoints = server.endpoints
    assert endpoints.http_url.startswith("http://127.0.0.1:")
    assert endpoints.grpc_address.startswith("127.0.0.1:")
    metrics_address = urllib.parse.urlsplit(endpoints.metrics_url).netloc
    addresses = {endpoints.http_address, endpoints.grpc_address, metrics_address}
    assert len(addresses) == 3
    listening = {
        f"{c.laddr.ip.removeprefix('::ffff:')}:{c.laddr.port}"  # gRPC binds a v4-mapped socket
        for c in psutil.Process(server.pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == addresses


def test_exported_models_answer_like_torch(server: LocalTritonServer, repository: dict) -> None:
    client = triton_http.InferenceServerClient(server.endpoints.http_address, concurrency=8)
    rng = np.random.default_rng(0)
    for name, (spec, module) in repository["models"].items():
        load_s = server.load_model(name)
        assert server.is_model_ready(name) and load_s == server.load_s[name] > 0
        for batch in (1, 4):
            x = rng.standard_normal((batch, *spec.served_input_shape)).astype(np.float32)
            with torch.no_grad():
                want = module(torch.from_numpy(x)).numpy()
            got = _infer(client, name, x)
            assert got.shape == want.shape and _close(got, want), (name, batch)

        # Concurrent requests of different sizes: the dynamic batcher hands several to
        # one execute call, which must give every request back exactly its own rows.
        xs = [
            rng.standard_normal((n, *spec.served_input_shape)).astype(np.float32)
            for n in (1, 2, 3, 1, 2, 3, 1, 2)
        ]
        pending = []
        for x in xs:
            tensor = triton_http.InferInput("input", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            pending.append(client.async_infer(name, [tensor]))
        for x, request in zip(xs, pending, strict=True):
            with torch.no_grad():
                want = module(torch.from_numpy(x)).numpy()
            assert _close(request.get_result().as_numpy("output"), want), name
    client.close()


def test_metrics_endpoint_answers(server: LocalTritonServer) -> None:
    with urllib.request.urlopen(server.endpoints.metrics_url, timeout=5) as response:
        assert b"nv_inference_request_success" in response.read()


def test_unload_and_reload(server: LocalTritonServer, repository: dict) -> None:
    name = next(iter(repository["models"]))
    server.load_model(name)
    server.unload_model(name)
    assert not server.is_model_ready(name)
    assert control.triton_model_state(server.endpoints.http_url, name) == "UNAVAILABLE"
    assert server.is_ready()  # nothing is left half-stopped
    server.load_model(name)
    assert server.is_model_ready(name)


def test_missing_model_gives_a_clear_error(server: LocalTritonServer) -> None:
    with pytest.raises(
        ServerModelError,
        match=r"model 'no-such-model': load failed: .* \(no folder 'no-such-model' in ",
    ):
        server.load_model("no-such-model")
    assert server.is_ready()  # one bad load does not take the server down


def test_stop_leaves_no_process_and_no_shared_memory(local_triton, repository: dict) -> None:
    name = next(iter(repository["models"]))
    server = local_triton(repository["path"], load_models=[name])
    assert server.is_model_ready(name)
    leader = psutil.Process(server.pid)
    processes = [leader, *leader.children(recursive=True)]
    assert len(processes) == 1 + SETTINGS.instance_count  # the server and one stub each
    segments = list(SHM_DIR.glob(f"{server._shm_prefix}*"))
    assert segments
    server.stop()
    _, alive = psutil.wait_procs(processes, timeout=5)
    assert alive == []
    assert not any(segment.exists() for segment in segments)
    server.stop()  # a second stop is harmless


def test_no_orphan_when_the_caller_is_killed(triton_install, repository: dict, tmp_path) -> None:
    name = next(iter(repository["models"]))
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from servebench.servers.local import LocalTritonServer
        repository, run_dir = Path({str(repository["path"])!r}), Path({str(tmp_path)!r})
        server = LocalTritonServer(repository, run_dir=run_dir)
        server.start()
        server.load_model({name!r})
        print(server.pid, flush=True)
        time.sleep(300)
        """
    )
    caller = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    try:
        line = caller.stdout.readline()
        assert line.strip().isdigit(), f"caller did not start the server; log:\n{_log(tmp_path)}"
        leader = psutil.Process(int(line))
        processes = [leader, *leader.children(recursive=True)]
        caller.send_signal(signal.SIGKILL)  # no atexit, no context manager: only the kernel
        caller.wait()
        _, alive = psutil.wait_procs(processes, timeout=30)
        assert alive == [], f"left running: {[p.pid for p in alive]}"
    finally:
        caller.kill()
        caller.wait()


def test_server_started_from_a_finished_thread_keeps_running(local_triton, repository) -> None:
    """The death signal follows the forking thread; a worker thread must not take it along."""
    import threading

    started: list[LocalTritonServer] = []
    worker = threading.Thread(target=lambda: started.append(local_triton(repository["path"])))
    worker.start()
    worker.join()
    (server,) = started
    time.sleep(0.5)
    assert server.is_running() and server.is_ready()


def test_temporary_run_dir_goes_unless_a_failure_points_at_its_log(
    triton_install, repository: dict
) -> None:
    with LocalTritonServer(repository["path"]) as server:
        run_dir = server.run_dir
        assert (run_dir / "backends" / "python" / "triton_python_backend_stub").is_file()
    assert not run_dir.exists()

    with LocalTritonServer(repository["path"]) as server, pytest.raises(ServerModelError):
        server.load_model("no-such-model")
    assert server.log_path.is_file() and "no-such-model" in server.log_path.read_text()
    assert not (server.run_dir / "backends").exists()
    shutil.rmtree(server.run_dir)


def _log(run_dir: Path) -> str:
    log = run_dir / "tritonserver.log"
    return log.read_text()[-3000:] if log.exists() else "(no log)"


def _python_model(repo: Path, name: str, source: str | None) -> None:
    """A hand-made python-backend model; `source=None` leaves out model.py."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 1\n'
        'input { name: "input" data_type: TYPE_FP32 dims: 2 }\n'
        'output { name: "output" data_type: TYPE_FP32 dims: 2 }\n'
    )
    if source is not None:
        (repo / name / "1" / "model.py").write_text(source)


BOOM = "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('boom')\n"


def test_failed_startup_load_reports_the_log(local_triton, tmp_path: Path) -> None:
    _python_model(tmp_path, "boom", BOOM)
    with pytest.raises(
        ServerStartError, match=r"(?s)exited with code 1 before it was ready; log .*boom"
    ):
        local_triton(tmp_path, load_models=["boom"])


def test_a_port_that_never_listens_is_named(local_triton, tmp_path: Path) -> None:
    """Ready means every advertised port listens: with metrics switched off, HTTP answers
    ready but the metrics port stays closed, and the start says which address. 15 s: time
    for Triton to answer ready on a busy CI machine, or the message has no port to name."""
    with pytest.raises(
        ServerStartError, match=r"answers ready, but nothing listens on 127\.0\.0\.1:\d+\); log "
    ):
        local_triton(tmp_path, extra_args=["--allow-metrics=false"], startup_timeout_s=15)


def test_model_without_model_py_fails_fast(local_triton, tmp_path: Path) -> None:
    """Triton itself hangs on this one; the launcher reads it from the log instead."""
    _python_model(tmp_path, "boom", BOOM)
    _python_model(tmp_path, "empty", None)
    server = local_triton(tmp_path, stop_timeout_s=2)  # a hung load also delays SIGTERM
    with pytest.raises(ServerModelError, match=r"model 'boom': load failed: .*boom"):
        server.load_model("boom")
    # Each failure is read from the log, not waited out: under the timeouts (the load's
    # and the start's, 60 s each), which are what a hang would take.
    started = time.perf_counter()
    with pytest.raises(ServerModelError, match=r"model 'empty': .*Python model file not found"):
        server.load_model("empty", timeout_s=60)
    assert time.perf_counter() - started < 60
    started = time.perf_counter()
    with pytest.raises(ServerStartError, match=r"will never be ready: .*model file not found"):
        local_triton(tmp_path, load_models=["empty"], stop_timeout_s=2, startup_timeout_s=60)
    assert time.perf_counter() - started < 60


def test_missing_wheel_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        install_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pytriton" else real_find_spec(name, *a),
    )
    with pytest.raises(TritonNotInstalledError, match=r"pip install 'nvidia-pytriton"):
        TritonInstall.locate()


def test_missing_binary_is_named(monkeypatch: pytest.MonkeyPatch, triton_install) -> None:
    monkeypatch.setattr(TritonInstall, "binary", property(lambda self: Path("/nonexistent/ts")))
    with pytest.raises(TritonNotInstalledError, match=r"tritonserver binary not found at /nonex"):
        TritonInstall.locate()


def test_numpy_2_is_refused(monkeypatch: pytest.MonkeyPatch, triton_install) -> None:
    real_version = importlib.metadata.version
    monkeypatch.setattr(
        install_module.importlib.metadata,
        "version",
        lambda name: "2.1.0" if name == "numpy" else real_version(name),
    )
    with pytest.raises(TritonNotInstalledError, match=r"numpy 2.1.0 .* needs numpy<2"):
        TritonInstall.locate()


def test_shared_dense_model_answers_over_grpc(triton_dense_model) -> None:
    import tritonclient.grpc as triton_grpc

    served = triton_dense_model
    client = triton_grpc.InferenceServerClient(served.server.endpoints.grpc_address)
    x = np.random.default_rng(7).standard_normal((3, *served.spec.served_input_shape))
    tensor = triton_grpc.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x.astype(np.float32))
    got = client.infer(served.name, [tensor]).as_numpy("output")
    with torch.no_grad():
        want = served.module(torch.from_numpy(x.astype(np.float32))).numpy()
    assert _close(got, want)
    client.close()
