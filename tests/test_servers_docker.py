"""Docker launchers: the container spec each would ask the engine for, checked as data;
real containers only where a Docker engine answers (skipped with its one-sentence reason).

The spec tests lay out a TF Serving base path by hand (`<model>/1/saved_model.pb`): the
launcher only looks at the layout, and a real SavedModel export would cost a TensorFlow
import for nothing. The real-container tests export real models.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from docker.types import DeviceRequest, Mount
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from model_zoo.export.tfs_batching import TfsBatching, parse_batching_parameters
from servebench.servers.docker_engine import (
    ContainerSpec,
    DockerUnavailableError,
    GpuRequest,
    docker_engine_problem,
)
from servebench.servers.docker_tfs import DEFAULT_TFS_TAG, MONITORING_CONFIG_TEXT, TfsDocker
from servebench.servers.docker_triton import DEFAULT_TRITON_TAG, TritonDocker

ENGINE_PROBLEM = docker_engine_problem()
needs_engine = pytest.mark.skipif(ENGINE_PROBLEM is not None, reason=ENGINE_PROBLEM or "")


@pytest.fixture
def tfs_base(tmp_path: Path) -> Path:
    base = tmp_path / "tfs"
    for name in ("dense-a", "conv-b"):
        (base / name / "1").mkdir(parents=True)
        (base / name / "1" / "saved_model.pb").write_bytes(b"")
    (base / "not-a-model").mkdir()
    return base


@pytest.fixture
def triton_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "triton"
    (repo / "m" / "1").mkdir(parents=True)
    return repo


def _flags(spec: ContainerSpec) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in spec.command if "=" in arg)


def _assert_loopback_and_read_only(spec: ContainerSpec, ports: set[int]) -> dict:
    kwargs = spec.run_kwargs()
    assert kwargs["detach"] is True
    # Every port on 127.0.0.1 only, host port left to the engine.
    assert kwargs["ports"] == {f"{p}/tcp": ("127.0.0.1",) for p in ports}
    assert all(isinstance(m, Mount) for m in kwargs["mounts"])
    assert all(m["ReadOnly"] is True and m["Type"] == "bind" for m in kwargs["mounts"])
    assert all(m.read_only for m in spec.mounts)
    return kwargs


def test_triton_container_spec(triton_repo: Path) -> None:
    server = TritonDocker(
        triton_repo, tag="24.08", load_models=["m"], extra_args=["--log-verbose=1"]
    )
    spec = server.container_spec()
    assert spec.image == "nvcr.io/nvidia/tritonserver:24.08-py3"
    assert spec.command[0] == "tritonserver"
    flags = _flags(spec)
    assert flags["model-repository"] == "/models"
    assert flags["model-control-mode"] == "explicit"
    assert flags["load-model"] == "m"
    assert (flags["http-port"], flags["grpc-port"], flags["metrics-port"]) == (
        "8000",
        "8001",
        "8002",
    )
    assert flags["allow-gpu-metrics"] == "false"  # no GPU asked for
    assert spec.command[-1] == "--log-verbose=1"
    assert [(m.source, m.target) for m in spec.mounts] == [(triton_repo.resolve(), "/models")]
    kwargs = _assert_loopback_and_read_only(spec, {8000, 8001, 8002})
    assert "device_requests" not in kwargs
    assert kwargs["shm_size"] == "1g"
    assert {u["Name"]: u["Soft"] for u in kwargs["ulimits"]} == {"memlock": -1, "stack": 67108864}


def test_triton_gpu_request_and_modes(triton_repo: Path) -> None:
    spec = TritonDocker(triton_repo, gpus="all", model_control_mode="none").container_spec()
    assert "--allow-gpu-metrics=false" not in spec.command
    assert _flags(spec)["model-control-mode"] == "none"
    (request,) = spec.run_kwargs()["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    (pinned,) = (
        TritonDocker(triton_repo, gpus=["0", "2"]).container_spec().run_kwargs()["device_requests"]
    )
    assert pinned["DeviceIDs"] == ["0", "2"]
    assert GpuRequest.parse(2) == GpuRequest(count=2)
    assert GpuRequest.parse(None) is None and GpuRequest.parse(0) is None
    with pytest.raises(ValueError, match="gpus: expected 'all'"):
        GpuRequest.parse("many")
    with pytest.raises(ValueError, match="model_control_mode: must be one of"):
        TritonDocker(triton_repo, model_control_mode="lazy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="load_models: only applies in explicit"):
        TritonDocker(triton_repo, model_control_mode="none", load_models=["m"])
    with pytest.raises(ValueError, match="tag: expected an image tag"):
        TritonDocker(triton_repo, tag="24.10-py3:latest")
    with pytest.raises(FileNotFoundError, match="model_repository"):
        TritonDocker(triton_repo / "missing")


def test_tfs_container_spec_with_batching_and_threads(tfs_base: Path, tmp_path: Path) -> None:
    batching = TfsBatching(max_batch_size=16, batch_timeout_micros=2000, num_batch_threads=4)
    server = TfsDocker(
        tfs_base,
        models=["dense-a"],
        tag="2.17.0",
        batching=batching,
        rest_api_num_threads=8,
        tensorflow_intra_op_parallelism=2,
        tensorflow_inter_op_parallelism=1,
        run_dir=tmp_path / "run",
    )
    spec = server.container_spec()
    assert spec.image == "tensorflow/serving:2.17.0"
    assert spec.entrypoint == ("tensorflow_model_server",)
    flags = _flags(spec)
    assert flags == {
        "port": "8500",
        "rest_api_port": "8501",
        "model_config_file": "/servebench/models.config",
        "monitoring_config_file": "/servebench/monitoring.config",
        "enable_batching": "true",
        "batching_parameters_file": "/servebench/batching_parameters.txt",
        "rest_api_num_threads": "8",
        "tensorflow_intra_op_parallelism": "2",
        "tensorflow_inter_op_parallelism": "1",
    }
    mounts = {m.target: m.source for m in spec.mounts}
    assert mounts == {"/models": tfs_base.resolve(), "/servebench": tmp_path / "run" / "config"}
    _assert_loopback_and_read_only(spec, {8500, 8501})
    # The files the flags point at, as TF Serving will parse them.
    config_dir = tmp_path / "run" / "config"
    models = text_format.Parse(
        (config_dir / "models.config").read_text(), model_server_config_pb2.ModelServerConfig()
    )
    assert [(c.name, c.base_path, c.model_platform) for c in models.model_config_list.config] == [
        ("dense-a", "/models/dense-a", "tensorflow")
    ]
    assert (config_dir / "monitoring.config").read_text() == MONITORING_CONFIG_TEXT
    assert "enable: true" in MONITORING_CONFIG_TEXT
    assert '"/monitoring/prometheus/metrics"' in MONITORING_CONFIG_TEXT
    written = parse_batching_parameters((config_dir / "batching_parameters.txt").read_text())
    assert written.max_batch_size.value == 16 and written.num_batch_threads.value == 4


def test_tfs_defaults_gpu_image_and_exported_batching(tfs_base: Path) -> None:
    server = TfsDocker(tfs_base, gpus=1)
    assert server.served == ["conv-b", "dense-a"]  # every SavedModel, nothing else
    spec = server.container_spec()
    assert spec.image == "tensorflow/serving:2.18.0-gpu"
    assert not any(a.startswith("--enable_batching") for a in spec.command)
    assert spec.run_kwargs()["device_requests"][0]["Count"] == 1
    server.stop()  # removes its temporary config folder
    # enable_batching alone picks up the export's batching_parameters.txt.
    (tfs_base / "batching_parameters.txt").write_text(TfsBatching(max_batch_size=8).to_text())
    exported = TfsDocker(tfs_base, enable_batching=True)
    flags = _flags(exported.container_spec())
    assert flags["batching_parameters_file"] == "/servebench/batching_parameters.txt"
    assert "max_batch_size" in (exported.config_dir() / "batching_parameters.txt").read_text()
    exported.stop()
    with pytest.raises(ValueError, match=r"models: 'nope' has no SavedModel under"):
        TfsDocker(tfs_base, models=["nope"])
    with pytest.raises(ValueError, match="rest_api_num_threads: must be >= 0"):
        TfsDocker(tfs_base, rest_api_num_threads=-1)
    with pytest.raises(FileNotFoundError, match="batching: "):
        TfsDocker(tfs_base, batching=tfs_base / "missing.txt")


@pytest.mark.skipif(ENGINE_PROBLEM is None, reason="a Docker engine answers here")
def test_no_engine_fails_at_start_with_one_sentence(triton_repo: Path, tfs_base: Path) -> None:
    assert ENGINE_PROBLEM.startswith("No Docker engine is reachable at ")
    assert ENGINE_PROBLEM.count(". ") == 0 and ENGINE_PROBLEM.endswith(".")
    for server in (TritonDocker(triton_repo), TfsDocker(tfs_base)):
        with pytest.raises(DockerUnavailableError) as err:
            server.start()
        assert str(err.value) == ENGINE_PROBLEM
        server.stop()


# -- real containers (only where `docker info` works; they pull multi-GB images) ------------


@pytest.mark.slow
@needs_engine
def test_triton_container_serves_and_loads(tmp_path: Path) -> None:
    from model_zoo.export import STANDARD_REPOSITORY, TritonSettings, export_triton
    from model_zoo.spec import ModelSpec
    from model_zoo.torch_builder import build_torch
    from servebench.scenario.runner import client_probe

    spec = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
    export = export_triton(build_torch(spec, seed=0), spec, tmp_path, TritonSettings())
    with TritonDocker(tmp_path / STANDARD_REPOSITORY, run_dir=tmp_path / "run") as server:
        assert server.pid and server.endpoints.http_url.startswith("http://127.0.0.1:")
        assert 0 < server.load_model(export.name) < 300
        assert client_probe("triton", "http", timeout_s=60.0)(server, export.name, 1)[0] > 0
        server.unload_model(export.name)
    assert (tmp_path / "run" / "container.log").stat().st_size > 0


@pytest.mark.slow
@needs_engine
def test_tfs_container_serves_reloads_and_exports_metrics(tmp_path: Path) -> None:
    from model_zoo.export.family import export_family
    from model_zoo.spec import ModelSpec
    from servebench.scenario.runner import client_probe
    from servebench.servers import control
    from servebench.telemetry import parse_metrics

    spec = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
    export_family([spec], tmp_path, formats=("tfs",), check=False)
    with TfsDocker(tmp_path / "tfs", models=[], enable_batching=True) as server:
        assert 0 < server.load_model(spec.id) < 300
        assert client_probe("tfs", "http", timeout_s=60.0)(server, spec.id, 1)[0] > 0
        _, page, _ = control.request("GET", server.endpoints.metrics_url)
        names = {r.metric for r in parse_metrics(page.decode())}
        assert ":tensorflow:serving:request_count" in names
        server.unload_model(spec.id)
        assert not server.is_model_ready(spec.id)


COMPOSE = Path(__file__).resolve().parents[1] / "docker" / "compose.yaml"


def test_compose_serves_both_servers_on_loopback_read_only() -> None:
    import yaml

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert set(services) == {"tfs", "triton", "tfs-gpu", "triton-gpu"}
    for name, service in services.items():
        gpu = name.endswith("-gpu")
        assert service["profiles"] == (["gpu"] if gpu else ["cpu"])
        assert all(p.startswith("127.0.0.1:") for p in service["ports"]), name
        assert all(v.endswith(":ro") for v in service["volumes"]), name
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {})
        assert bool(devices.get("devices")) == gpu, name
    tfs = services["tfs"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in tfs["command"])
    assert flags["model_config_file"] == "/models/models.config"
    assert flags["monitoring_config_file"] == "/servebench/monitoring.config"
    assert {"enable_batching", "batching_parameters_file"} <= set(flags)
    assert services["tfs-gpu"]["image"].endswith("-gpu")
    assert services["triton"]["image"].startswith("nvcr.io/nvidia/tritonserver:")
    # The monitoring config compose mounts is the one the launcher writes.
    assert (COMPOSE.parent / "tfs_monitoring.config").read_text() == MONITORING_CONFIG_TEXT


def test_default_image_tags_live_in_one_place() -> None:
    """compose.yaml's fallbacks are the launchers' defaults, and no shipped scenario pins
    another tag (a scenario that wants one names it with `image:`, on purpose)."""
    import yaml

    text = COMPOSE.read_text()
    assert set(re.findall(r"\$\{TFS_TAG:-([^}]+)\}", text)) == {DEFAULT_TFS_TAG}
    assert set(re.findall(r"\$\{TRITON_TAG:-([^}]+)\}", text)) == {DEFAULT_TRITON_TAG}
    for scenario in sorted((COMPOSE.parents[1] / "scenarios").glob("*.yaml")):
        servers = yaml.safe_load(scenario.read_text()).get("servers", [])
        assert all("image" not in server for server in servers), scenario.name


@pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose is not installed"
)
def test_compose_file_is_valid_for_docker_compose(tmp_path: Path) -> None:
    env = {**os.environ, "ZOO": str(tmp_path)}
    for profile in ("cpu", "gpu"):
        check = subprocess.run(
            ["docker-compose", "-f", str(COMPOSE), "-p", "servebench", "--profile", profile,
             "config", "-q"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert check.returncode == 0, check.stderr
