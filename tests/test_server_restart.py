"""A killed tritonserver is restarted (issue 10, item 7).

When only the tritonserver process dies (SIGKILL, a crash), its python-backend stubs live
on under init. Restarting then failed with `Text file busy` on the private copy of the
stub, and every later trial of a run failed. These tests kill the server process alone,
as the kernel's OOM killer or a user's `kill -9 <pid>` would, never its process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import tritonclient.http as triton_http
from scenario_checks import TINY_SETTINGS, TINY_WORKLOAD, tiny_scenario, write

from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.results import RunDirectory
from servebench.servers.local import SHM_DIR, LocalTritonServer

SPEC = ModelSpec(layer_type="dense", depth=2, width=64, input_shape=(32,), num_outputs=4)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, triton_install) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("restart-export")
    settings = TritonSettings(max_batch_size=32, instance_count=2)
    export = export_triton(build_torch(SPEC, seed=0), SPEC, out, settings)
    return out / PYTHON_REPOSITORY, export.name


def _infer(server: LocalTritonServer, name: str, rows: int = 4) -> np.ndarray:
    client = triton_http.InferenceServerClient(server.endpoints.http_address)
    try:
        x = np.random.default_rng(0).standard_normal((rows, *SPEC.input_shape))
        tensor = triton_http.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x.astype(np.float32))
        return client.infer(name, [tensor]).as_numpy("output")
    finally:
        client.close()


def _stubs(server: LocalTritonServer) -> list[psutil.Process]:
    return psutil.Process(server.pid).children(recursive=True)


@pytest.fixture
def busy() -> Iterator[Callable[[LocalTritonServer, str], None]]:
    """Starts clients that keep a server's stubs busy (a kill lands mid-inference)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(server: LocalTritonServer, name: str) -> None:
        def loop() -> None:
            while not stop.is_set():
                try:
                    _infer(server, name, rows=32)
                except Exception:  # the server is being killed: keep trying until told
                    time.sleep(0.01)

        for _ in range(4):
            threads.append(threading.Thread(target=loop, daemon=True))
            threads[-1].start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def test_stubs_die_with_their_server(local_triton, exported) -> None:
    repository, name = exported
    server = local_triton(repository, load_models=[name])
    stubs = _stubs(server)
    assert len(stubs) == 2
    os.kill(server.pid, signal.SIGKILL)  # the server alone, not its group
    _, alive = psutil.wait_procs(stubs, timeout=10)  # without anyone calling stop()
    assert alive == [], f"stubs outlived their server: {[p.pid for p in alive]}"


def test_restart_after_the_server_process_was_killed(local_triton, exported, busy) -> None:
    repository, name = exported
    server = local_triton(repository, load_models=[name])
    want = _infer(server, name)
    for _ in range(3):  # the stubs' exit races the restart: give it several chances to lose
        busy(server, name)
        time.sleep(0.5)
        old = _stubs(server)
        segments = list(SHM_DIR.glob(f"{server._shm_prefix}*"))
        assert old and segments
        os.kill(server.pid, signal.SIGKILL)
        server.stop()
        assert not any(segment.exists() for segment in segments)
        server.start()
        server.load_model(name)
        np.testing.assert_allclose(_infer(server, name), want, rtol=1e-5)
        _, alive = psutil.wait_procs(old, timeout=5)
        assert alive == [], f"stubs of the killed server left: {[p.pid for p in alive]}"


def test_backends_are_copied_fresh_over_a_running_stub(triton_install, tmp_path: Path) -> None:
    """A stub of a dead server may still execute from the old copy; writing over a running
    executable fails with ETXTBSY, so the copy must not write into it."""
    dest = triton_install.prepare_backends(tmp_path / "backends")
    stub = dest / "python" / "triton_python_backend_stub"
    shutil.copy2(shutil.which("sleep"), stub)
    running = subprocess.Popen([str(stub), "30"])
    try:
        time.sleep(0.2)
        triton_install.prepare_backends(dest)
        assert stub.read_bytes() == triton_install.stub.read_bytes()
        assert running.poll() is None  # the old process was left to whoever owns it
    finally:
        running.kill()
        running.wait()


SCENARIO = tiny_scenario(
    "restart",
    settings={**TINY_SETTINGS, "instance_count": 2},
    workload={**TINY_WORKLOAD, "batch_sizes": [1, 2, 4]},
    links=["direct"],
)


def test_run_restarts_a_server_killed_between_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, triton_install
) -> None:
    from servebench.scenario.runner import ScenarioRunner

    path = write(tmp_path, SCENARIO, "restart.yaml")
    killed: list[psutil.Process] = []
    add_trial = RunDirectory.add_trial

    def add_then_kill(self: RunDirectory, row: dict) -> None:
        """After the first trial is recorded, kill the server process alone."""
        add_trial(self, row)
        if killed:
            return
        (leader,) = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.name() == "tritonserver" and str(tmp_path) in " ".join(p.cmdline())
        ]
        killed.extend([leader, *leader.children(recursive=True)])
        leader.kill()

    monkeypatch.setattr(RunDirectory, "add_trial", add_then_kill)
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    assert len(killed) == 3, "the server was not killed between trials"
    trials = pd.read_csv(outcome.directory.path / "trials.csv").sort_values("index")
    assert list(trials.status) == ["ok", "ok", "ok"], list(trials.reason)
    assert outcome.status == "complete", outcome.reason
    _, alive = psutil.wait_procs(killed, timeout=5)
    assert alive == [], f"left running: {[p.pid for p in alive]}"
