"""`tfs-docker`: the official TF Serving container serving an exported base path.

Runs `tensorflow/serving:<tag>` (`<tag>-gpu` when GPUs are asked for) with the SavedModel
base path `model_zoo` exports (`<export>/tfs`) mounted read-only at /models, and a small
folder of files servebench writes (models.config, monitoring.config, batching parameters)
mounted read-only at /servebench. Prometheus metrics are always switched on, because the
benchmark's server-side breakdown comes from them.

TF Serving has no per-model load call: a model is loaded by starting with it in the
config, or by sending a new config (gRPC `ModelService/HandleReloadConfigRequest`) and
waiting until the model's REST status says AVAILABLE. Both are offered.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servebench.common.ports import LOOPBACK
from servebench.common.serving_apis import TFS
from servebench.common.tfs_config import (
    BATCHING_PARAMETERS,
    CONTAINER_BASE,
    MODELS_CONFIG,
    models_config_text,
    savedmodel_names,
)
from servebench.common.wellknown import TFS_GRPC_PORT, TFS_REST_PORT
from servebench.servers import control
from servebench.servers.base import ServerEndpoints, ServerModelError
from servebench.servers.docker_engine import (
    BindMount,
    ContainerSpec,
    DockerServer,
    PublishedPort,
    check_image_tag,
)

if TYPE_CHECKING:
    from model_zoo.export.tfs_batching import TfsBatching

TFS_IMAGE = "tensorflow/serving"
# A tag that exists for both the CPU and the -gpu image; newer SavedModels may need a
# newer server (pick the tag that matches the TensorFlow that exported the models).
DEFAULT_TFS_TAG = "2.18.0"
CONFIG_TARGET = "/servebench"
METRICS_PATH = "/monitoring/prometheus/metrics"
MONITORING_CONFIG = "monitoring.config"
# tensorflow_serving/config/monitoring_config.proto (MonitoringConfig.prometheus_config);
# the proto is not in the tensorflow-serving-api wheel, and this text never varies.
MONITORING_CONFIG_TEXT = f'prometheus_config {{\n  enable: true\n  path: "{METRICS_PATH}"\n}}\n'


class TfsDocker(DockerServer):
    """TF Serving in its official container, with the settings users tune as arguments.

    `models` are served from start (default: every SavedModel under `base_path`; pass
    `[]` to start empty and time `load_model`). `batching` turns batching on with those
    parameters (a `model_zoo` `TfsBatching` or a parameters file); `enable_batching=True`
    alone uses the export's `batching_parameters.txt` if there is one, else TFS defaults.
    GPUs, environment, extra arguments, run folder and timeouts are `DockerServer`'s.
    """

    kind = "tfs-docker"

    def __init__(
        self,
        base_path: Path,
        *,
        models: Sequence[str] | None = None,
        tag: str = DEFAULT_TFS_TAG,
        image: str | None = None,
        enable_batching: bool = False,
        batching: TfsBatching | Path | None = None,
        rest_api_num_threads: int | None = None,
        tensorflow_intra_op_parallelism: int | None = None,
        tensorflow_inter_op_parallelism: int | None = None,
        **container: Any,
    ) -> None:
        super().__init__(**container)
        self.base_path = Path(base_path).resolve()
        if not self.base_path.is_dir():
            raise FileNotFoundError(f"base_path: {self.base_path} is not a folder")
        self.available = savedmodel_names(self.base_path)
        self.served = list(self.available if models is None else models)
        for name in self.served:
            self._check_model(name, "models")
        check_image_tag(tag, DEFAULT_TFS_TAG)
        self.image = image or f"{TFS_IMAGE}:{tag}{'-gpu' if self.gpus else ''}"
        if batching is not None and not enable_batching:
            enable_batching = True
        if isinstance(batching, Path | str) and not Path(batching).is_file():
            raise FileNotFoundError(f"batching: {batching} is not a file")
        self.enable_batching = enable_batching
        self.batching = batching
        for field, value in (
            ("rest_api_num_threads", rest_api_num_threads),
            ("tensorflow_intra_op_parallelism", tensorflow_intra_op_parallelism),
            ("tensorflow_inter_op_parallelism", tensorflow_inter_op_parallelism),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{field}: must be >= 0 (0 lets TF Serving choose), got {value}")
        self.rest_api_num_threads = rest_api_num_threads
        self.intra_op = tensorflow_intra_op_parallelism
        self.inter_op = tensorflow_inter_op_parallelism

    # -- the container ------------------------------------------------------------------

    def container_spec(self) -> ContainerSpec:
        config = self.config_dir()
        (config / MODELS_CONFIG).write_text(models_config_text(self.served))
        (config / MONITORING_CONFIG).write_text(MONITORING_CONFIG_TEXT)
        command = [
            f"--port={TFS_GRPC_PORT}",
            f"--rest_api_port={TFS_REST_PORT}",
            f"--model_config_file={CONFIG_TARGET}/{MODELS_CONFIG}",
            f"--monitoring_config_file={CONFIG_TARGET}/{MONITORING_CONFIG}",
        ]
        if self.enable_batching:
            command.append("--enable_batching=true")
            if self._write_batching_parameters(config):
                command.append(f"--batching_parameters_file={CONFIG_TARGET}/{BATCHING_PARAMETERS}")
        if self.rest_api_num_threads is not None:
            command.append(f"--rest_api_num_threads={self.rest_api_num_threads}")
        if self.intra_op is not None:
            command.append(f"--tensorflow_intra_op_parallelism={self.intra_op}")
        if self.inter_op is not None:
            command.append(f"--tensorflow_inter_op_parallelism={self.inter_op}")
        return self._spec(
            self.image,
            command,
            entrypoint=("tensorflow_model_server",),
            mounts=(
                BindMount(self.base_path, CONTAINER_BASE, read_only=True),
                BindMount(config, CONFIG_TARGET, read_only=True),
            ),
            ports=(PublishedPort(TFS_GRPC_PORT), PublishedPort(TFS_REST_PORT)),
        )

    def _write_batching_parameters(self, config: Path) -> bool:
        """Put the batching parameters (if any) into the config folder; True if written."""
        target = config / BATCHING_PARAMETERS
        if self.batching is None:
            exported = self.base_path / BATCHING_PARAMETERS
            if not exported.is_file():
                return False  # TF Serving's defaults
            shutil.copyfile(exported, target)
        elif isinstance(self.batching, Path | str):
            shutil.copyfile(self.batching, target)
        else:
            target.write_text(self.batching.to_text())
        return True

    def _endpoints_from_ports(self, host_ports: Mapping[int, int]) -> ServerEndpoints:
        rest = f"http://{LOOPBACK}:{host_ports[TFS_REST_PORT]}"
        return ServerEndpoints(
            api=TFS.name,
            http_url=rest,
            grpc_address=f"{LOOPBACK}:{host_ports[TFS_GRPC_PORT]}",
            metrics_url=rest + METRICS_PATH,
        )

    def _ready_after_start(self) -> bool:
        return self.is_ready() and all(self.is_model_ready(name) for name in self.served)

    # -- models ---------------------------------------------------------------------------

    def load_model(self, name: str, timeout_s: float = 300.0) -> float:
        """Serve `name` too (config reload); seconds from the reload request to AVAILABLE."""
        self._check_model(name, "model")
        served = [*self.served, name] if name not in self.served else list(self.served)
        reload = _config_reloader(self.endpoints.grpc_address)  # imports TensorFlow: untimed
        started = time.perf_counter()
        reload(served, timeout_s)
        self.served = served
        remaining = max(1.0, timeout_s - (time.perf_counter() - started))
        self.wait_model_ready(name, remaining)
        elapsed = time.perf_counter() - started
        self.load_s[name] = elapsed
        return elapsed

    def unload_model(self, name: str, timeout_s: float = 60.0) -> None:
        """Stop serving `name` (config reload) and wait until none of its versions is up."""
        if name not in self.served:
            raise ServerModelError(f"{self.describe()}: model {name!r} is not being served")
        served = [m for m in self.served if m != name]
        _config_reloader(self.endpoints.grpc_address)(served, timeout_s)
        self.served = served
        deadline = time.monotonic() + timeout_s
        while (states := control.tfs_model_states(self.endpoints.http_url, name)) and any(
            state in ("LOADING", "AVAILABLE", "UNLOADING") for state in states.values()
        ):
            if time.monotonic() > deadline:
                raise ServerModelError(
                    f"{self.describe()}: model {name!r} still {states} {timeout_s:g} s after unload"
                )
            time.sleep(control.POLL_INTERVAL_S)

    def _check_model(self, name: str, field: str) -> None:
        if name not in self.available:
            raise ValueError(
                f"{field}: {name!r} has no SavedModel under {self.base_path} "
                f"(expected {name}/<version>/saved_model.pb; found: {', '.join(self.available) or 'none'})"
            )


def _config_reloader(grpc_address: str | None):
    """A function that makes TF Serving at `grpc_address` serve exactly the given models."""
    if not grpc_address:
        raise ServerModelError("tfs-docker: no gRPC address to send the config to")
    import grpc
    from google.protobuf import text_format
    from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
    from tensorflow_serving.config import model_server_config_pb2

    def reload(names: Sequence[str], timeout_s: float) -> None:
        config = text_format.Parse(
            models_config_text(names), model_server_config_pb2.ModelServerConfig()
        )
        with grpc.insecure_channel(grpc_address) as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            try:
                answer = stub.HandleReloadConfigRequest(
                    model_management_pb2.ReloadConfigRequest(config=config), timeout=timeout_s
                )
            except grpc.RpcError as err:
                raise ServerModelError(
                    f"tfs-docker at {grpc_address}: config reload failed: {err.code().name} "
                    f"{err.details()}"
                ) from None
        if answer.status.error_code != 0:
            raise ServerModelError(
                f"tfs-docker at {grpc_address}: config reload refused: "
                f"{answer.status.error_message}"
            )

    return reload
