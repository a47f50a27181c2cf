"""Where a probe runs: on the host, or inside one long-lived container of the servebench
image. Both start `python -m servebench.overhead.probe_main` with the same interpreter,
the same venv and the same project files, so the comparison measures the container and
nothing else.

The container gets the host's interpreter prefix, the venv and the project folder
bind-mounted read-only at the same paths (no second, different Python or torch inside
the image), the scratch folder bind-mounted read-write at the same path, the host's
OpenBLAS/OpenMP settings (a container does not inherit them, and OpenBLAS picks a
different kernel without them: ENVIRONMENT.md, "Containers"), and the CPUs this process
may use. `init=True` puts a real init at PID 1 so the container stops on a signal. It is
labelled with its owner (servers.docker_owner) and removed when the side closes, also
after Ctrl-C or a failure, at interpreter exit if nothing closed it, and by the next
servebench docker start if its owner was killed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import servebench
from servebench.common.wellknown import SERVEBENCH_IMAGE
from servebench.overhead.errors import OverheadError
from servebench.overhead.measure import Measurement, Side
from servebench.overhead.probe_main import UNAVAILABLE_EXIT
from servebench.overhead.probes import ProbeUnavailable
from servebench.servers.docker_engine import (
    DockerUnavailableError,
    connect_docker,
    engine_address,
)
from servebench.servers.docker_owner import owner_labels, reap_stale_containers, track, untrack

PROJECT_ROOT = Path(servebench.__file__).resolve().parents[1]
# A folder on the container's own (overlay) filesystem, made when the container starts.
CONTAINER_OVERLAY = "/var/tmp/servebench-overlay"
# Environment a probe's speed depends on that a container would not inherit.
PASSED_ENV_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_")
# How long one probe may run inside the container: the engine API call waits for it.
EXEC_TIMEOUT_S = 3 * 3600
KIND_LABEL = "servebench.kind"
KIND = "overhead"


class ProbeFailed(OverheadError, RuntimeError):
    """A probe crashed (not "unavailable"): one line naming the probe, the side and why."""


class ContainerUnavailable(OverheadError, RuntimeError):
    """The container side cannot run here: one sentence why (no engine, no image)."""


class ProbeSide(ABC):
    """One side of the comparison: runs a probe and returns what it measured."""

    name: Side

    @abstractmethod
    def run(self, probe: str, *, quick: bool = False) -> list[Measurement]:
        """Run `probe` once; `ProbeUnavailable` or `ProbeFailed` when it measured nothing."""

    @abstractmethod
    def close(self) -> None:
        """Release what the side holds (the container); safe to call twice."""


def probe_command(probe: str, scratch: Path, overlay: str | Path, quick: bool) -> list[str]:
    """The probe_main command line, with this interpreter (the same on both sides)."""
    command = [sys.executable, "-m", "servebench.overhead.probe_main", probe]
    command += ["--scratch", str(scratch), "--overlay", str(overlay)]
    return command + (["--quick"] if quick else [])


def parse_result(probe: str, side: Side, code: int, stdout: str, stderr: str) -> list[Measurement]:
    """probe_main's answer as measurements, or the exception that says why there are none."""
    if code == UNAVAILABLE_EXIT:
        raise ProbeUnavailable(stdout.strip() or f"{probe} cannot run on the {side}")
    if code != 0:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else "no error output"
        raise ProbeFailed(f"{probe} on the {side}: exit {code}: {why}")
    try:
        return [Measurement.from_json(line) for line in stdout.splitlines() if line.strip()]
    except (ValueError, TypeError) as err:
        raise ProbeFailed(f"{probe} on the {side}: unreadable measurement ({err})") from None


class HostSide(ProbeSide):
    """Probes as subprocesses of this process, on the host's filesystems."""

    name: Side = "host"

    def __init__(self, scratch: Path, overlay: Path) -> None:
        self.scratch = scratch
        self.overlay = overlay

    def run(self, probe: str, *, quick: bool = False) -> list[Measurement]:
        # A Ctrl-C reaches the probe too (same process group); subprocess.run kills and
        # reaps it before the KeyboardInterrupt goes on to the runner.
        done = subprocess.run(
            probe_command(probe, self.scratch, self.overlay, quick),
            capture_output=True,
            text=True,
            cwd=PROJECT_ROOT,
            check=False,
        )
        return parse_result(probe, self.name, done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        """Nothing to release: each probe's process has ended with its run."""


def container_problem(image: str = SERVEBENCH_IMAGE) -> str | None:
    """Why the container side cannot run here (one sentence), or None."""
    try:
        client = connect_docker(timeout_s=5.0)
    except DockerUnavailableError:
        return no_engine()
    try:
        return _image_problem(client, image)
    finally:
        client.close()


def no_engine() -> str:
    return (
        f"no container engine answers at {engine_address()}; start one with "
        "docker/engine.sh up (or set DOCKER_HOST)."
    )


def _image_problem(client: Any, image: str) -> str | None:
    from docker.errors import DockerException, ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound:
        return f"the image {image} is not built here; run docker/images.sh to build it."
    except DockerException as err:
        return f"the engine could not look up the image {image} ({err})."
    return None


def passed_environment() -> dict[str, str]:
    """The host environment a probe's speed depends on, for the container."""
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV_PREFIXES)}
    # The mounts are read-only: no attempt to write bytecode next to the sources.
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


# Prefixes that hold the whole distribution: mounted, they would hide the image's own tools
# and libraries. A Debian python3.11 lives in /usr; the image installs the same package.
SYSTEM_PREFIXES = frozenset({Path("/"), Path("/usr")})


def read_only_folders(base_prefix: str = sys.base_prefix) -> list[Path]:
    """The interpreter prefix (unless it is the system's), the venv and the project, without
    folders nested in others."""
    candidates = {Path(p).resolve() for p in (sys.prefix, PROJECT_ROOT)}
    if Path(base_prefix).resolve() not in SYSTEM_PREFIXES:
        candidates.add(Path(base_prefix).resolve())
    folders = sorted(candidates)
    kept: list[Path] = []
    for folder in folders:
        if not any(folder.is_relative_to(outer) for outer in kept):
            kept.append(folder)
    return kept


class ContainerSide(ProbeSide):
    """Probes run with `exec` in one container of the servebench image, kept for the run."""

    name: Side = "container"

    def __init__(self, scratch: Path, image: str = SERVEBENCH_IMAGE) -> None:
        """Start the container; `ContainerUnavailable` (one sentence) if it cannot run."""
        self.scratch = scratch
        self.image = image
        self.notes: list[str] = []
        try:
            self._client = connect_docker(timeout_s=EXEC_TIMEOUT_S)
        except DockerUnavailableError:
            raise ContainerUnavailable(no_engine()) from None
        self._container = None
        try:
            problem = _image_problem(self._client, image)
            if problem:
                raise ContainerUnavailable(problem)
            self._container = self._start()
            self._exec(["mkdir", "-p", CONTAINER_OVERLAY])
        except BaseException:
            self.close()
            raise

    def _start(self) -> Any:
        """Create, then start, the container (so one whose start fails is still known and
        removed); containers that killed servebench processes left go first."""
        from docker.errors import DockerException
        from docker.types import DeviceRequest, Mount

        reap_stale_containers(self._client, local_engine=engine_address().startswith("unix://"))
        mounts = [Mount(str(p), str(p), type="bind", read_only=True) for p in read_only_folders()]
        mounts.append(Mount(str(self.scratch), str(self.scratch), type="bind", read_only=False))
        kwargs: dict[str, Any] = {
            "image": self.image,
            "command": ["sleep", "infinity"],
            "init": True,
            "mounts": mounts,
            "environment": passed_environment(),
            "cpuset_cpus": ",".join(str(c) for c in sorted(os.sched_getaffinity(0))),
            "labels": {**owner_labels(), KIND_LABEL: KIND},
        }
        if Path("/dev/nvidiactl").exists():
            gpus = DeviceRequest(count=-1, capabilities=[["gpu"]])
            try:
                return self._create_and_start({**kwargs, "device_requests": [gpus]})
            except DockerException as err:
                # The GPU probe then says inside the container that it sees no GPU.
                self.notes.append(f"the container got no GPU ({_first_line(err)})")
        try:
            return self._create_and_start(kwargs)
        except DockerException as err:
            raise ContainerUnavailable(
                f"the container of {self.image} did not start ({_first_line(err)})."
            ) from None

    def _create_and_start(self, kwargs: dict[str, Any]) -> Any:
        container = self._client.containers.create(**kwargs)
        track(container.id, lambda: _remove(container))
        try:
            container.start()
        except BaseException:
            _remove(container)
            untrack(container.id)
            raise
        return container

    def _exec(self, command: list[str]) -> tuple[int, str, str]:
        result = self._container.exec_run(
            command, environment=passed_environment(), workdir=str(PROJECT_ROOT), demux=True
        )
        out, err = result.output or (None, None)
        return (
            result.exit_code,
            (out or b"").decode(errors="replace"),
            (err or b"").decode(errors="replace"),
        )

    def run(self, probe: str, *, quick: bool = False) -> list[Measurement]:
        code, out, err = self._exec(probe_command(probe, self.scratch, CONTAINER_OVERLAY, quick))
        return parse_result(probe, self.name, code, out, err)

    def close(self) -> None:
        """Remove the container (killing a probe still running in it)."""
        container, self._container = self._container, None
        if container is not None:
            _remove(container)
            untrack(container.id)
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def _remove(container: Any) -> None:
    """Remove `container`, running or not, quietly: it may be gone already."""
    with contextlib.suppress(Exception):
        container.remove(force=True)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
