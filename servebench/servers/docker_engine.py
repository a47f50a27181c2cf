"""Servers in containers, started through the Docker Engine API (the `docker` SDK).

A launcher first builds a `ContainerSpec` — plain data: image, command, mounts, published
ports, GPU request, environment — so what would be asked of the engine can be read and
tested without one. `DockerServer` then runs that spec: it makes sure the image is there
(`docker_images`), creates and starts the container (timed apart from the server's own
start-up: `container_start_s`), waits for the server's readiness, reads back the ports the
engine chose, and on stop saves the container log into the run directory before removing
the container. Every container is labelled with its owner (`docker_owner`), so one that a
killed servebench left behind is removed by the next start.

Ports are published on 127.0.0.1 only, with the host port left to the engine (no race
between probing a free port and binding it). Model folders are mounted read-only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servebench.common.ports import LOOPBACK
from servebench.common.wellknown import PODMAN_SOCKET
from servebench.servers.base import Server, ServerEndpoints, ServerError, ServerStartError
from servebench.servers.docker_images import ensure_image
from servebench.servers.docker_owner import (
    OWNER_LABEL as OWNER_LABEL,  # re-exported for callers that label their own containers
)
from servebench.servers.docker_owner import (
    owner_labels,
    reap_stale_containers,
    track,
    untrack,
)

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
_LOG_FILE = "container.log"


class DockerUnavailableError(ServerStartError):
    """No Docker engine answers; the message is one sentence that says where and why."""


@dataclass(frozen=True)
class BindMount:
    """A host folder or file seen at `target` inside the container."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class PublishedPort:
    """A container port published on the host; `host_port=None` lets the engine choose."""

    container_port: int
    host_ip: str = LOOPBACK
    host_port: int | None = None
    protocol: str = "tcp"

    @property
    def key(self) -> str:
        return f"{self.container_port}/{self.protocol}"


@dataclass(frozen=True)
class GpuRequest:
    """GPUs for the container: all of them (`count=-1`), a number, or device ids/UUIDs."""

    count: int = -1
    device_ids: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: int | str | Sequence[str] | None) -> GpuRequest | None:
        """`None`/0 → no GPU, "all" or -1 → all, n → n GPUs, ["0", "2"] → those devices."""
        if value is None or value == 0 or value is False:
            return None
        if value == "all" or value == -1 or value is True:
            return cls()
        if isinstance(value, int) and value > 0:
            return cls(count=value)
        if isinstance(value, str) and value.isdigit():
            return cls(count=int(value))
        if (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and value
            and all(str(v).strip() for v in value)
        ):
            return cls(count=0, device_ids=tuple(str(v) for v in value))
        raise ValueError(
            f"gpus: expected 'all', a positive count or a list of device ids, got {value!r}"
        )


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a launcher asks of the engine, as data."""

    image: str
    command: tuple[str, ...]
    entrypoint: tuple[str, ...] | None = None
    mounts: tuple[BindMount, ...] = ()
    ports: tuple[PublishedPort, ...] = ()
    gpus: GpuRequest | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    shm_size: str | None = None
    ulimits: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # name: (soft, hard)
    labels: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None

    def run_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `docker.DockerClient.containers.run` (detached)."""
        from docker.types import DeviceRequest, Mount, Ulimit

        kwargs: dict[str, Any] = {
            "image": self.image,
            "command": list(self.command),
            "detach": True,
            "mounts": [
                Mount(target=m.target, source=str(m.source), type="bind", read_only=m.read_only)
                for m in self.mounts
            ],
            "ports": {
                p.key: (p.host_ip, p.host_port) if p.host_port else (p.host_ip,) for p in self.ports
            },
            "environment": dict(self.environment),
            "labels": dict(self.labels),
        }
        if self.entrypoint is not None:
            kwargs["entrypoint"] = list(self.entrypoint)
        if self.gpus is not None:
            kwargs["device_requests"] = [
                DeviceRequest(
                    count=self.gpus.count if not self.gpus.device_ids else None,
                    device_ids=list(self.gpus.device_ids) or None,
                    capabilities=[["gpu"]],
                )
            ]
        if self.shm_size:
            kwargs["shm_size"] = self.shm_size
        if self.ulimits:
            kwargs["ulimits"] = [
                Ulimit(name=name, soft=soft, hard=hard)
                for name, (soft, hard) in self.ulimits.items()
            ]
        if self.name:
            kwargs["name"] = self.name
        return kwargs


def engine_address() -> str:
    """DOCKER_HOST if set; else Docker's socket if it exists; else the podman socket that
    `docker/engine.sh up` serves, if it exists; else Docker's default (to name in errors)."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    for address in (DEFAULT_SOCKET, PODMAN_SOCKET):
        if Path(address.removeprefix("unix://")).exists():
            return address
    return DEFAULT_SOCKET


def connect_docker(timeout_s: float = 10.0):
    """A client for a Docker engine that answers a ping, or `DockerUnavailableError`."""
    from docker.errors import DockerException

    import docker

    try:
        timeout = int(max(1, timeout_s))
        if os.environ.get("DOCKER_HOST"):
            # from_env also honours DOCKER_TLS_VERIFY / DOCKER_CERT_PATH for remote engines.
            client = docker.from_env(timeout=timeout)
        else:
            client = docker.DockerClient(base_url=engine_address(), timeout=timeout)
        client.ping()
    except (DockerException, OSError) as err:
        raise DockerUnavailableError(
            f"No Docker engine is reachable at {engine_address()} ({_short_reason(err)}), "
            "so docker servers cannot start here; start Docker or set DOCKER_HOST."
        ) from None
    return client


def docker_engine_problem() -> str | None:
    """Why docker servers cannot start here (one sentence), or None if an engine answers."""
    try:
        connect_docker(timeout_s=3.0).close()
    except DockerUnavailableError as err:
        return str(err)
    return None


def _short_reason(err: BaseException) -> str:
    text = str(err)
    if "FileNotFoundError" in text or "No such file" in text:
        return "its socket does not exist"
    if "Connection refused" in text or "ConnectionRefused" in text:
        return "connection refused"
    if "Permission denied" in text or "PermissionError" in text:
        return "permission denied on its socket"
    return text.splitlines()[0][:160] if text else type(err).__name__


def check_image_tag(tag: str, example: str) -> None:
    """Refuse a tag that would change the image's name (a `:`, `/` or `@` in it) or is empty.

    Launchers take the tag alone and build `<image>:<tag>` themselves; a full reference
    given as a tag would otherwise become an image name nobody asked for.
    """
    if not tag or any(c in tag for c in " /:@"):
        raise ValueError(f"tag: expected an image tag such as {example}, got {tag!r}")


class DockerServer(Server):
    """A server in a container; subclasses say which spec to run and how readiness looks.

    The settings here are every container kind's: `gpus` (see `GpuRequest.parse`), the
    container's `environment`, `extra_args` after the kind's own server arguments, the
    folder its log is kept in, how long to wait for ready and for a stop, and whether a
    missing image may be pulled. A kind's constructor takes its own settings and passes
    these on (`**container`); `servers.kinds` lists both as the kind's settings.
    """

    def __init__(
        self,
        *,
        gpus: int | str | Sequence[str] | None = None,
        environment: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        run_dir: Path | None = None,
        startup_timeout_s: float = 300.0,
        stop_timeout_s: float = 15.0,
        pull: bool = True,
    ) -> None:
        super().__init__()
        self.gpus = GpuRequest.parse(gpus)
        self.environment = dict(environment or {})
        self.extra_args = tuple(extra_args)
        self._given_run_dir = Path(run_dir) if run_dir is not None else None
        # The caller's folder (the container's log is kept there), else a temporary one
        # made when a launcher first writes config (`config_dir`).
        self.run_dir: Path | None = self._given_run_dir
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.pull = pull
        self._client = None
        self._container = None
        self._endpoints: ServerEndpoints | None = None

    # -- what subclasses provide --------------------------------------------------------

    @abstractmethod
    def container_spec(self) -> ContainerSpec:
        """The container to run (`_spec` fills in what all kinds set alike); may write
        config files into `self.config_dir()`."""

    @abstractmethod
    def _endpoints_from_ports(self, host_ports: Mapping[int, int]) -> ServerEndpoints:
        """Endpoints, given container port → host port as the engine published them."""

    def _ready_after_start(self) -> bool:
        """Readiness checked during start (a server may need more than `is_ready`)."""
        return self.is_ready()

    def _spec(self, image: str, command: Sequence[str], **fields: Any) -> ContainerSpec:
        """The spec of `image` running `command`, then the extra arguments, with the GPUs,
        the environment and the kind's label, as every container kind sets them."""
        return ContainerSpec(
            image=image,
            command=(*command, *self.extra_args),
            gpus=self.gpus,
            environment=self.environment,
            labels={"servebench.kind": self.kind},
            **fields,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def config_dir(self) -> Path:
        """A folder of servebench-written files mounted into the container (read-only)."""
        if self.run_dir is None:
            self.run_dir = Path(tempfile.mkdtemp(prefix=f"servebench-{self.kind}-"))
        path = self.run_dir / "config"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def start(self) -> float:
        """Run the container and wait for the server; seconds from the create call to ready.

        Containers that killed servebench processes left are removed first, and the image
        is pulled (if missing) before the clock starts: pull time is network time, not the
        server's cold start. The container is created, then started, so that one whose
        start fails is still known here and removed with everything else on failure.
        """
        if self._container is not None:
            raise ServerError(f"{self.kind}: already started")
        self._client = connect_docker()
        try:
            reap_stale_containers(self._client, local_engine=_local_engine())
            spec = self.container_spec()
            ensure_image(self._client, spec.image, who=self.kind, pull=self.pull)
            kwargs = spec.run_kwargs()
            kwargs["labels"] = {**spec.labels, **owner_labels()}
            started = time.perf_counter()
            self._container = self._client.containers.create(**kwargs)
            track(self._container.id, _remover(self._container))
            self._container.start()
            self.container_start_s = time.perf_counter() - started
            self._endpoints = self._endpoints_from_ports(self._published_ports(spec))
            self._wait_started(started)
        except BaseException as err:
            self.stop()
            if isinstance(err, ServerError):
                raise
            raise ServerStartError(f"{self.kind}: {_engine_error(err)}") from err
        self.startup_s = time.perf_counter() - started
        return self.startup_s

    def stop(self) -> None:
        """Stop the container (the engine kills it after `stop_timeout_s`), keep its log in
        the run directory, then remove it."""
        container, self._container = self._container, None
        self._endpoints = None
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop(timeout=int(self.stop_timeout_s))
            self._save_log(container)
            _remover(container)()
            untrack(container.id)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
        if self._given_run_dir is None and self.run_dir is not None:
            # Without a run dir from the caller, the temporary one (and the log saved in
            # it) goes with the container; failures carry the log tail in their message.
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    @property
    def endpoints(self) -> ServerEndpoints:
        if self._endpoints is None:
            raise ServerError(f"{self.kind}: not running; call start() first")
        return self._endpoints

    @property
    def container_id(self) -> str | None:
        """The running container's id (for the engine's stats), None when not running."""
        return self._container.id if self._container is not None else None

    @property
    def pid(self) -> int | None:
        """The host pid of the container's main process (local engines only)."""
        if self._container is None:
            return None
        with contextlib.suppress(Exception):
            self._container.reload()
            pid = int(self._container.attrs["State"]["Pid"])
            return pid or None
        return None

    def log_tail(self, lines: int = 30) -> str:
        if self._container is None:
            return ""
        try:
            return self._container.logs(tail=lines).decode(errors="replace")
        except Exception:
            return ""

    # -- internals ----------------------------------------------------------------------

    def _published_ports(self, spec: ContainerSpec) -> dict[int, int]:
        self._container.reload()
        published = self._container.attrs["NetworkSettings"]["Ports"] or {}
        ports = {}
        for port in spec.ports:
            bindings = published.get(port.key) or []
            loopback = [b for b in bindings if b.get("HostIp") in (port.host_ip, "")]
            if not loopback:
                raise ServerStartError(
                    f"{self.kind}: the engine did not publish container port {port.key} "
                    f"on {port.host_ip}: {bindings}"
                )
            ports[port.container_port] = int(loopback[0]["HostPort"])
        return ports

    def _wait_started(self, started: float) -> None:
        """Poll the server's readiness often (the ready time is a measurement) and the
        container's state less often (an engine call): an exit ends the wait at once."""
        deadline = started + self.startup_timeout_s
        next_state = 0.0
        while True:
            if time.perf_counter() >= next_state:
                self._container.reload()
                state = self._container.attrs["State"]
                if not state.get("Running", False):
                    raise ServerStartError(
                        f"{self.kind}: container exited with code {state.get('ExitCode')} "
                        f"before it was ready; its log:\n{self.log_tail()}"
                    )
                next_state = time.perf_counter() + _STATE_INTERVAL_S
            if self._ready_after_start():
                return
            if time.perf_counter() > deadline:
                raise ServerStartError(
                    f"{self.kind}: not ready within {self.startup_timeout_s:g} s; "
                    f"its log:\n{self.log_tail()}"
                )
            time.sleep(_READY_INTERVAL_S)

    def _save_log(self, container) -> None:
        if self.run_dir is None:
            return
        with contextlib.suppress(Exception):
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / _LOG_FILE).write_bytes(container.logs())


_READY_INTERVAL_S = 0.02
_STATE_INTERVAL_S = 0.25


def _remover(container) -> Callable[[], None]:
    """Remove `container` (stopped or not), quietly: it may be gone already."""

    def remove() -> None:
        with contextlib.suppress(Exception):
            container.remove(force=True)

    return remove


def _engine_error(err: BaseException) -> str:
    """What the engine said (an APIError's explanation, without the URL it was sent to)."""
    text = str(getattr(err, "explanation", None) or err) or type(err).__name__
    return text.strip().splitlines()[0]


def _local_engine() -> bool:
    """Whether the engine is this machine's (a unix socket): its pids are this host's."""
    return engine_address().startswith("unix://")
