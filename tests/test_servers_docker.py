"""Docker launchers: the container spec each would ask the engine for, checked as data;
real containers only where a Docker engine answers (skipped with its one-sentence reason).

The spec tests lay out a TF Serving base path by hand (`<model>/1/saved_model.pb`): the
launcher only looks at the layout, and a real SavedModel export would cost a TensorFlow
import for nothing. The real-container tests export real models. Those on servebench's
local Triton CPU image (`docker/images.sh` builds it) run wherever an engine answers; those
on the official nvcr.io / tensorflow/serving images skip, saying why, where the image is
absent and cannot be pulled (no registry is reachable on the development machines).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docker.types import DeviceRequest, Mount
from docker_checks import (
    ENGINE_PROBLEM,
    MISSING_IMAGE,
    needs_engine,
    needs_image,
    owned_containers,
)
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from model_zoo.export.tfs_batching import TfsBatching, parse_batching_parameters
from servebench.common.wellknown import TRITON_CPU_IMAGE
from servebench.servers.base import ServerStartError
from servebench.servers.docker_engine import (
    ContainerSpec,
    DockerUnavailableError,
    GpuRequest,
    connect_docker,
)
from servebench.servers.docker_images import ImageUnavailableError, pull_reason
from servebench.servers.docker_owner import (
    OWNER_HOST_LABEL,
    OWNER_LABEL,
    owner_labels,
    reap_stale_containers,
)
from servebench.servers.docker_tfs import DEFAULT_TFS_TAG, MONITORING_CONFIG_TEXT, TfsDocker
from servebench.servers.docker_triton import (
    DEFAULT_TRITON_TAG,
    TritonDocker,
    official_image,
    repository_form,
)
from servebench.telemetry import ContainerStatsSampler, SamplerUnavailable
from servebench.telemetry.container import memory_in_use


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

    # The local CPU image gets none: it needs no pinned memory, and podman refuses any limit
    # on hosts without CAP_SYS_RESOURCE.
    local = TritonDocker(triton_repo, image=TRITON_CPU_IMAGE).container_spec()
    assert local.image == TRITON_CPU_IMAGE and "ulimits" not in local.run_kwargs()
    assert official_image("24.08") == "nvcr.io/nvidia/tritonserver:24.08-py3"


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
    from servebench.scenario.serving import client_probe

    needs_image(official_image())

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
    from servebench.scenario.serving import client_probe
    from servebench.servers import control
    from servebench.telemetry import parse_metrics

    needs_image(TfsDocker(tmp_path).image, who="tfs-docker")
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
    another tag of an official image (a scenario that wants one names it with `image:`, on
    purpose); the only image a shipped scenario names is the locally built Triton one."""
    import yaml

    text = COMPOSE.read_text()
    assert set(re.findall(r"\$\{TFS_TAG:-([^}]+)\}", text)) == {DEFAULT_TFS_TAG}
    assert set(re.findall(r"\$\{TRITON_TAG:-([^}]+)\}", text)) == {DEFAULT_TRITON_TAG}
    for scenario in sorted((COMPOSE.parents[1] / "scenarios").glob("*.yaml")):
        servers = yaml.safe_load(scenario.read_text()).get("servers", [])
        images = {server["image"] for server in servers if "image" in server}
        assert images <= {TRITON_CPU_IMAGE}, scenario.name


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


# -- images, owners and container telemetry as data ------------------------------------------


def test_pull_errors_are_cut_to_the_registry_and_its_failure() -> None:
    refused = (
        "initializing source docker://localhost/nope:latest: pinging container registry "
        'localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443: connect: connection '
        "refused"
    )
    assert pull_reason(refused) == "registry localhost: connection refused"
    dns = (
        "initializing source docker://nvcr.io/nvidia/tritonserver:24.10-py3: pinging "
        'container registry nvcr.io: Get "https://nvcr.io/v2/": dial tcp: lookup nvcr.io on '
        "10.255.255.53:53: no such host"
    )
    assert pull_reason(dns) == "registry nvcr.io: no such host"
    assert pull_reason("pull access denied for x\nmore") == "pull access denied for x"


def test_container_memory_is_usage_less_inactive_file_cache_where_reported() -> None:
    # Docker on cgroup v2 breaks the usage out; podman's compatible API gives usage alone.
    assert memory_in_use({"usage": 500, "stats": {"inactive_file": 200}}) == 300
    assert memory_in_use({"usage": 500, "stats": {"total_inactive_file": 100}}) == 400
    assert memory_in_use({"usage": 500, "limit": 10_000}) == 500
    assert memory_in_use({}) is None


# -- real containers of the local Triton CPU image (docker/images.sh) -------------------------


@pytest.fixture(scope="module")
def python_repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A small dense model in the python-backend form the local image serves."""
    from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
    from model_zoo.spec import ModelSpec
    from model_zoo.torch_builder import build_torch

    spec = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
    out = tmp_path_factory.mktemp("docker-export")
    export = export_triton(build_torch(spec, seed=0), spec, out, TritonSettings(max_batch_size=8))
    return out / PYTHON_REPOSITORY, export.name


@needs_engine
def test_local_image_publishes_loopback_ports_serves_and_is_removed(
    python_repository: tuple[Path, str], tmp_path: Path
) -> None:
    from servebench.scenario.serving import client_probe
    from servebench.servers import control

    needs_image(TRITON_CPU_IMAGE)
    repository, model = python_repository
    assert repository_form(TRITON_CPU_IMAGE) == "python"
    server = TritonDocker(repository, image=TRITON_CPU_IMAGE, run_dir=tmp_path / "run")
    try:
        total = server.start()
        assert 0 < server.container_start_s < total  # the engine's part of the start
        (container,) = owned_containers()
        assert container.id == server.container_id
        assert container.labels[OWNER_HOST_LABEL] == owner_labels()[OWNER_HOST_LABEL]
        bindings = [b for ports in container.ports.values() for b in ports or []]
        assert len(bindings) == 3 and {b["HostIp"] for b in bindings} == {"127.0.0.1"}
        assert server.endpoints.http_url.startswith("http://127.0.0.1:")
        assert server.load_model(model) > 0
        sampler = ContainerStatsSampler(server.container_id, connect_docker)
        sampler.sample()
        assert client_probe("triton", "grpc", timeout_s=10.0)(server, model, 20)[0] > 0
        readings = {r.metric: r for r in sampler.sample()}
        assert readings["cpu_cores"].value > 0  # the requests ran in the container
        assert readings["memory_bytes"].value > 0 and readings["processes"].value >= 2
        assert readings["cpu_cores"].labels == {"container": server.container_id[:12]}
        _, page, _ = control.request("GET", server.endpoints.metrics_url)
        assert f'nv_inference_request_success{{model="{model}"'.encode() in page
    finally:
        server.stop()
    assert owned_containers() == []
    with pytest.raises(SamplerUnavailable, match="is gone"):
        sampler.sample()
    sampler.close()
    assert b"Started GRPCInferenceService" in (tmp_path / "run" / "container.log").read_bytes()


@needs_engine
def test_missing_image_is_refused_in_one_sentence_and_leaves_nothing(tmp_path: Path) -> None:
    server = TritonDocker(tmp_path, image=MISSING_IMAGE)
    with pytest.raises(ImageUnavailableError) as err:
        server.start()
    message = str(err.value)
    assert message.startswith(
        f"triton-docker: image {MISSING_IMAGE} is not present and could not be pulled ("
    )
    assert "\n" not in message and message.count(". ") == 0
    assert owned_containers() == []


@needs_engine
def test_a_server_that_exits_at_start_leaves_nothing_but_its_log(tmp_path: Path) -> None:
    needs_image(TRITON_CPU_IMAGE)
    server = TritonDocker(
        tmp_path, image=TRITON_CPU_IMAGE, extra_args=["--no-such-flag"], run_dir=tmp_path / "run"
    )
    with pytest.raises(ServerStartError, match="container exited with code"):
        server.start()
    assert owned_containers() == []
    assert b"no-such-flag" in (tmp_path / "run" / "container.log").read_bytes()


KILLED_OWNER = """\
import sys, time
from pathlib import Path
from servebench.servers.docker_triton import TritonDocker
server = TritonDocker(Path(sys.argv[1]), image=sys.argv[2])
server.start()
print(server.container_id, flush=True)
time.sleep(600)
"""


@needs_engine
def test_containers_of_a_killed_servebench_are_removed_by_the_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    needs_image(TRITON_CPU_IMAGE)
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, str(tmp_path), TRITON_CPU_IMAGE],
        stdout=subprocess.PIPE,
        text=True,
    )
    client = connect_docker()
    elsewhere = None
    try:
        container_id = owner.stdout.readline().strip()
        assert container_id, "the owner process did not start its container"
        owner.kill()  # SIGKILL: no stop, no atexit
        owner.wait(30)
        assert [c.id for c in owned_containers(owner.pid)] == [container_id]
        # A container another host's servebench left is not this host's to judge.
        elsewhere = client.containers.create(
            TRITON_CPU_IMAGE, ["true"],
            labels={OWNER_LABEL: str(owner.pid), OWNER_HOST_LABEL: "another-host"},
        )  # fmt: skip
        server = TritonDocker(tmp_path, image=TRITON_CPU_IMAGE)
        with caplog.at_level("WARNING", logger="servebench.servers.docker_owner"):
            server.start()
        server.stop()
        assert [c.id for c in owned_containers(owner.pid)] == [elsewhere.id]
        assert f"left by servebench pid {owner.pid}, which is gone" in caplog.text
        assert reap_stale_containers(client, local_engine=True) == []
    finally:
        owner.kill()
        if elsewhere is not None:
            elsewhere.remove(force=True)
        client.close()
