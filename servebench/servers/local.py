"""`triton-local`: the pip-installed `tritonserver` as a subprocess on loopback ports.

One `LocalTritonServer` owns one server process, its run directory (log, private backends
copy) and the shared-memory segments its python backend creates. Readiness and model
control go through Triton's HTTP API in `control`, like every other Triton kind; what this
kind adds is what only a server started here allows: its process is watched (an exit ends
the wait for ready at once), its log is read for failures Triton never reports, and its
whole process group is reaped on stop.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from subprocess import Popen
from typing import Any

from servebench.common.ports import LOOPBACK, free_ports, port_accepts, port_is_free
from servebench.common.serving_apis import TRITON
from servebench.servers import control
from servebench.servers.base import (
    Server,
    ServerEndpoints,
    ServerError,
    ServerModelError,
    ServerStartError,
)
from servebench.servers.process import spawn_server, stop_process_group
from servebench.servers.triton_install import TritonInstall

SHM_DIR = Path("/dev/shm")
# Python-backend shared-memory segments are named after this prefix plus the owning
# servebench pid, so leftovers of a crashed run can be told apart from live ones.
_SHM_PREFIX = "servebench_triton"
_SHM_OWNER = re.compile(rf"^{_SHM_PREFIX}_(\d+)_")
_PORT_IN_USE = re.compile(r"already in use|failed to (bind|start)", re.IGNORECASE)
_START_ATTEMPTS = 3
_POLL_INTERVAL_S = 0.02
# Failures after which tritonserver 2.51 neither finishes the model load nor exits (measured:
# a python model folder without model.py); seen in the log, they end the wait at once.
_HANG_SIGNS = re.compile(r"Failed to preinitialize Python stub[^\n]*")

Ports = tuple[int, int, int]  # http, grpc, metrics


class _HangInLog(Exception):
    """The log shows a failure Triton will not report; carries the line."""


class LocalTritonServer(Server):
    """A tritonserver subprocess serving `model_repository` in explicit model-control mode.

    Use as a context manager, or call `start()` and `stop()` (a stopped server can be
    started again). `load_models` are loaded during start-up (`"*"` loads every model);
    others with `load_model`. Ports left out are free ones, fresh on each start. Without a
    `run_dir` a temporary one is made and removed on stop.
    """

    kind = "triton-local"

    def __init__(
        self,
        model_repository: Path,
        *,
        run_dir: Path | None = None,
        load_models: Sequence[str] = (),
        startup_timeout_s: float = 60.0,
        stop_timeout_s: float = 10.0,
        log_verbose: int = 0,
        extra_args: Sequence[str] = (),
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        super().__init__()
        self.model_repository = Path(model_repository).resolve()
        if not self.model_repository.is_dir():
            raise FileNotFoundError(f"model_repository: {self.model_repository} is not a folder")
        self._given_run_dir = Path(run_dir) if run_dir is not None else None
        self.run_dir: Path | None = None
        self.load_models = tuple(load_models)
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.log_verbose = log_verbose
        self.extra_args = tuple(extra_args)
        self.fixed_ports = (http_port, grpc_port, metrics_port)
        self._proc: Popen | None = None
        self._endpoints: ServerEndpoints | None = None
        self._shm_prefix = f"{_SHM_PREFIX}_{os.getpid()}_{os.urandom(4).hex()}_"
        self._failed = False  # an error pointed at the log: keep it

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> float:
        """Start the server and wait until it is ready; return seconds from spawn to ready.

        Raises `TritonNotInstalledError` (a `ServerStartError`) when the wheel is missing.
        """
        if self._proc is not None:
            raise ServerError(f"{self.kind}: already started")
        install = TritonInstall.locate()
        for port in self.fixed_ports:
            if port is not None and not port_is_free(port):
                raise ServerStartError(f"{self.kind}: port {port} on {LOOPBACK} is already in use")
        remove_stale_shm()
        self.run_dir = self._given_run_dir or Path(tempfile.mkdtemp(prefix="servebench-triton-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        backends = install.prepare_backends(self.run_dir / "backends")
        env = install.environment()
        _LIVE.add(self)
        for attempt in range(1, _START_ATTEMPTS + 1):
            free = iter(free_ports(3))
            http, grpc, metrics = (p if p is not None else next(free) for p in self.fixed_ports)
            ports = (http, grpc, metrics)
            started = time.perf_counter()
            self._proc = spawn_server(self._argv(install, backends, ports), env, self.log_path)
            self._endpoints = _loopback_endpoints(*ports)
            try:
                self._wait_ready(started, ports)
            except ServerStartError:
                self._failed = True
                port_clash = _PORT_IN_USE.search(self.log_tail(40))
                self._stop_process()
                if port_clash and attempt < _START_ATTEMPTS and not any(self.fixed_ports):
                    continue  # another process took a port between probe and bind
                self._cleanup()
                raise
            self.startup_s = time.perf_counter() - started
            return self.startup_s
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after `stop_timeout_s`) and clean up after it."""
        self._stop_process()
        self._cleanup()

    # -- state -----------------------------------------------------------------------

    @property
    def endpoints(self) -> ServerEndpoints:
        if self._endpoints is None or self._proc is None:
            raise ServerError(f"{self.kind}: not running; call start() first")
        return self._endpoints

    @property
    def log_path(self) -> Path:
        if self.run_dir is None:
            raise ServerError(f"{self.kind}: no run directory before start()")
        return self.run_dir / "tritonserver.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        """Whether the tritonserver process is alive (False once it has exited on its own)."""
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, ServerError):
            return ""
        # Leave out the option table Triton prints at start-up: it fills a tail and never
        # says what went wrong.
        kept = [line for line in text.splitlines() if not line.startswith(("|", "+-"))]
        return "\n".join(kept[-lines:])

    # -- models ----------------------------------------------------------------------

    def load_model(self, name: str, timeout_s: float = 300.0) -> float:
        """Load (or reload) `name` (see `Server.load_model`); a failure keeps the log."""
        with self._failure_keeps_log():
            return super().load_model(name, timeout_s)

    def unload_model(self, name: str, timeout_s: float = 60.0) -> None:
        """Unload `name` and wait until its instances are really gone.

        Triton answers the unload request at once and reports the model `UNLOADING`
        (and the whole server not ready) until its python stubs have exited, 1-3 s here.
        """
        with self._failure_keeps_log():
            super().unload_model(name, timeout_s)

    def _send_load(self, http_url: str, name: str, timeout_s: float) -> tuple[int, str]:
        """The load request, given up as soon as the log shows a failure Triton hangs on."""
        try:
            status, reason = self._watching_log(
                lambda: control.triton_load(http_url, name, timeout_s)
            )
        except _HangInLog as hang:
            raise ServerModelError(
                f"{self.describe()}: model {name!r}: load failed and Triton will not report "
                f"it: {hang}; log {self.log_path}"
            ) from None
        if status != 200 and not (self.model_repository / name).is_dir():
            reason = f"{reason} (no folder {name!r} in {self.model_repository})"
        return status, reason

    # -- internals -------------------------------------------------------------------

    def _argv(self, install: TritonInstall, backends: Path, ports: Ports) -> list[str]:
        http_port, grpc_port, metrics_port = ports
        argv = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            "--model-control-mode=explicit",
            f"--http-address={LOOPBACK}",
            f"--http-port={http_port}",
            f"--grpc-address={LOOPBACK}",
            f"--grpc-port={grpc_port}",
            f"--metrics-address={LOOPBACK}",
            f"--metrics-port={metrics_port}",
            f"--exit-timeout-secs={max(1, int(self.stop_timeout_s))}",
            "--exit-on-error=true",
            f"--log-verbose={self.log_verbose}",
        ]
        if not gpu_present():
            argv.append("--allow-gpu-metrics=false")
        argv += [f"--load-model={name}" for name in self.load_models]
        return argv + list(self.extra_args)

    def _wait_ready(self, started: float, ports: Ports) -> None:
        """Poll readiness, but stop at once when the process exits or the log shows a hang.

        Ready means every advertised port listens, not just HTTP's ready answer: Triton
        opens its metrics port after HTTP, so a sampler started at once could find nothing.
        """
        assert self._proc is not None
        deadline = started + self.startup_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"{self.kind}: tritonserver exited with code {code} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            ready = self.is_ready()
            silent = [port for port in ports if not port_accepts(port)] if ready else []
            if ready and not silent:
                return
            if hang := self._hang_in_log():
                raise ServerStartError(
                    f"{self.kind}: tritonserver will never be ready: {hang}; log {self.log_path}"
                )
            if time.perf_counter() > deadline:
                closed = ", ".join(f"{LOOPBACK}:{port}" for port in silent)
                why = f" (it answers ready, but nothing listens on {closed})" if silent else ""
                raise ServerStartError(
                    f"{self.kind}: tritonserver not ready within {self.startup_timeout_s:g} s"
                    f"{why}; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _watching_log(self, call: Callable[[], tuple[int, str]]) -> tuple[int, str]:
        """`call()`, but give up as soon as the log shows a failure Triton never answers.

        The call runs in a daemon thread so the log can be watched meanwhile; a thread
        left waiting on a hung load ends with its own timeout or when the server stops.
        """
        offset = self._log_size()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["answer"] = call()
            except BaseException as err:  # handed to the caller's thread below
                outcome["error"] = err

        thread = threading.Thread(target=run, name="triton-control", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            if hang := self._hang_in_log(offset):
                raise _HangInLog(hang)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["answer"]

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _hang_in_log(self, offset: int = 0) -> str | None:
        """The first log line (after byte `offset`) of a failure that leaves Triton hung."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return None
        match = _HANG_SIGNS.search(text)
        return match.group(0).strip() if match else None

    def _stop_process(self) -> None:
        if self._proc is not None:
            stop_process_group(self._proc, self.stop_timeout_s)
            self._proc = None
        self._endpoints = None
        remove_shm(self._shm_prefix)

    @contextlib.contextmanager
    def _failure_keeps_log(self) -> Iterator[None]:
        try:
            yield
        except ServerError:
            self._failed = True
            raise

    def _cleanup(self) -> None:
        """Forget the server; remove a temporary run dir, but keep its log after a failure
        (error messages point at it)."""
        _LIVE.discard(self)
        if self._given_run_dir is None and self.run_dir is not None:
            if self._failed:
                shutil.rmtree(self.run_dir / "backends", ignore_errors=True)
            else:
                shutil.rmtree(self.run_dir, ignore_errors=True)
                self.run_dir = None


def _loopback_endpoints(http_port: int, grpc_port: int, metrics_port: int) -> ServerEndpoints:
    return ServerEndpoints(
        api=TRITON.name,
        http_url=f"http://{LOOPBACK}:{http_port}",
        grpc_address=f"{LOOPBACK}:{grpc_port}",
        metrics_url=f"http://{LOOPBACK}:{metrics_port}/metrics",
    )


def gpu_present() -> bool:
    """Whether NVML sees a GPU; without one Triton is told not to collect GPU metrics."""
    try:
        import pynvml  # nvidia-ml-py; imported here because most callers never need it

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError_LibraryNotFound and friends all mean "no usable GPU"
        return False


def remove_shm(prefix: str) -> list[Path]:
    """Remove `/dev/shm` segments whose names start with `prefix`; return what went."""
    removed = []
    for segment in SHM_DIR.glob(f"{prefix}*"):
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()
            removed.append(segment)
    return removed


def remove_stale_shm() -> list[Path]:
    """Remove segments left by servers of servebench processes that no longer exist.

    A server killed with its crashed parent (PDEATHSIG) cannot clean up its shared memory;
    the next start does it, touching only segments whose owner pid is gone.
    """
    removed = []
    for segment in SHM_DIR.glob(f"{_SHM_PREFIX}_*"):
        match = _SHM_OWNER.match(segment.name)
        if match and not _pid_alive(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                segment.unlink()
                removed.append(segment)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Strong references: a server the caller dropped without stopping is still stopped at exit.
_LIVE: set[LocalTritonServer] = set()


@atexit.register
def _stop_all() -> None:
    """Stop servers a caller forgot (or could not) stop before the interpreter exits."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()
