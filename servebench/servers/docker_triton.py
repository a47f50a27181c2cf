"""`triton-docker`: Triton in a container serving an exported repository.

By default the official image, `nvcr.io/nvidia/tritonserver:<tag>-py3`, with the standard
(onnxruntime) repository that `model_zoo` exports (`<export>/triton`) mounted read-only at
/models. The tag is a setting; the default, 24.10, is Triton 2.51, the same core as the
local binary, so local and container runs differ only in where they run.

`image` names another one, such as the CPU image `docker/images.sh` builds where no
registry is reachable (`wellknown.TRITON_CPU_IMAGE`): the nvidia-pytriton wheel's
tritonserver with the python backend, which serves the python-backend repository the
local server runs (`model.py` calling onnxruntime), not the onnxruntime backend. An image
says which repository it serves with the label `servebench.repository` ("python" or
"onnx"); without the label, the local CPU image serves the python form and any other is
taken for the official one ("onnx"). See `repository_form`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from servebench.common.ports import LOOPBACK
from servebench.common.serving_apis import TRITON
from servebench.common.wellknown import (
    TRITON_CPU_IMAGE,
    TRITON_GRPC_PORT,
    TRITON_HTTP_PORT,
    TRITON_METRICS_PORT,
)
from servebench.servers.base import ServerEndpoints, ServerStartError
from servebench.servers.docker_engine import (
    BindMount,
    ContainerSpec,
    DockerServer,
    PublishedPort,
    check_image_tag,
    connect_docker,
)
from servebench.servers.docker_images import ensure_image, image_labels

TRITON_IMAGE = "nvcr.io/nvidia/tritonserver"
DEFAULT_TRITON_TAG = "24.10"
REPOSITORY_TARGET = "/models"
ModelControlMode = Literal["explicit", "poll", "none"]
MODEL_CONTROL_MODES: tuple[str, ...] = ("explicit", "poll", "none")
# The image label that says which repository form the image serves (model_zoo's forms).
REPOSITORY_LABEL = "servebench.repository"
RepositoryForm = Literal["onnx", "python"]
REPOSITORY_FORMS: tuple[str, ...] = ("onnx", "python")


def official_image(tag: str = DEFAULT_TRITON_TAG) -> str:
    return f"{TRITON_IMAGE}:{tag}-py3"


def repository_form(image: str, *, pull: bool = True) -> RepositoryForm:
    """The repository form `image` serves, from its `servebench.repository` label.

    The image must be known to read its labels, so it is pulled here if missing (a
    launch would pull it anyway): a missing image fails now, in one sentence, before any
    repository is written. Raises `ServerStartError` (no engine, no image, a label value
    servebench does not know).
    """
    client = connect_docker()
    try:
        ensure_image(client, image, who=TritonDocker.kind, pull=pull)
        default = "python" if image == TRITON_CPU_IMAGE else "onnx"
        form = image_labels(client, image).get(REPOSITORY_LABEL, default)
    finally:
        client.close()
    if form not in REPOSITORY_FORMS:
        raise ServerStartError(
            f"{TritonDocker.kind}: image {image} has label {REPOSITORY_LABEL}={form!r}; "
            f"expected one of {', '.join(REPOSITORY_FORMS)}"
        )
    return form  # type: ignore[return-value]


class TritonDocker(DockerServer):
    """Triton in its official container.

    `model_control_mode="explicit"` (the default) starts with no model loaded (or just
    `load_models`) so that model loads can be timed; "none" loads the whole repository at
    start, as `docker/compose.yaml` does; "poll" also watches it for changes. GPUs,
    environment, extra arguments, run folder and timeouts are `DockerServer`'s.
    """

    kind = "triton-docker"

    def __init__(
        self,
        model_repository: Path,
        *,
        tag: str = DEFAULT_TRITON_TAG,
        image: str | None = None,
        model_control_mode: ModelControlMode = "explicit",
        load_models: Sequence[str] = (),
        shm_size: str = "1g",
        **container: Any,
    ) -> None:
        super().__init__(**container)
        self.model_repository = Path(model_repository).resolve()
        if not self.model_repository.is_dir():
            raise FileNotFoundError(f"model_repository: {self.model_repository} is not a folder")
        if model_control_mode not in MODEL_CONTROL_MODES:
            raise ValueError(
                f"model_control_mode: must be one of {', '.join(MODEL_CONTROL_MODES)}, "
                f"got {model_control_mode!r}"
            )
        if load_models and model_control_mode != "explicit":
            raise ValueError(
                "load_models: only applies in explicit model-control mode "
                f"(mode {model_control_mode!r} loads the whole repository)"
            )
        check_image_tag(tag, DEFAULT_TRITON_TAG)
        self.image = image or official_image(tag)
        self.model_control_mode = model_control_mode
        self.load_models = tuple(load_models)
        self.shm_size = shm_size

    def container_spec(self) -> ContainerSpec:
        command = [
            "tritonserver",
            f"--model-repository={REPOSITORY_TARGET}",
            f"--model-control-mode={self.model_control_mode}",
            f"--http-port={TRITON_HTTP_PORT}",
            f"--grpc-port={TRITON_GRPC_PORT}",
            f"--metrics-port={TRITON_METRICS_PORT}",
            "--exit-on-error=true",
            f"--exit-timeout-secs={max(1, int(self.stop_timeout_s) - 1)}",
            *[f"--load-model={name}" for name in self.load_models],
        ]
        if self.gpus is None:
            command.append("--allow-gpu-metrics=false")
        return self._spec(
            self.image,
            command,
            mounts=(BindMount(self.model_repository, REPOSITORY_TARGET, read_only=True),),
            ports=tuple(
                PublishedPort(p) for p in (TRITON_HTTP_PORT, TRITON_GRPC_PORT, TRITON_METRICS_PORT)
            ),
            shm_size=self.shm_size,
            ulimits=self._ulimits(),
        )

    def _ulimits(self) -> dict[str, tuple[int, int]]:
        """NVIDIA's recommended limits for its container (pinned memory, deep stacks in
        some backends), for the official image only: a CPU image needs neither, and
        podman replaces its configured limits by its defaults as soon as any limit is
        asked for, which a host without CAP_SYS_RESOURCE refuses (measured: every start
        fails with "error setting rlimits")."""
        if not self.image.startswith(f"{TRITON_IMAGE}:"):
            return {}
        return {"memlock": (-1, -1), "stack": (67108864, 67108864)}

    def _endpoints_from_ports(self, host_ports: Mapping[int, int]) -> ServerEndpoints:
        return ServerEndpoints(
            api=TRITON.name,
            http_url=f"http://{LOOPBACK}:{host_ports[TRITON_HTTP_PORT]}",
            grpc_address=f"{LOOPBACK}:{host_ports[TRITON_GRPC_PORT]}",
            metrics_url=f"http://{LOOPBACK}:{host_ports[TRITON_METRICS_PORT]}/metrics",
        )
