"""The local Triton: the pip-installed `tritonserver` as a subprocess on loopback ports.

One `LocalTriton` owns one server process, its run directory (log, private backends copy)
and the shared-memory segments its python backend creates. It measures the two cold-start
figures the benchmark reports: process start → server ready, and load request → model
ready. Models are loaded and unloaded explicitly through Triton's repository API.

HTTP calls use the standard library rather than tritonclient: the control plane is four
small REST calls, and tritonclient.http brings gevent, which has no business in a process
that also runs the asyncio load generator.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from types import TracebackType
from typing import Any

from servebench.servers.ports import LOOPBACK, free_ports, port_is_free
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


class TritonError(RuntimeError):
    """Base of the local Triton's errors."""


class _HangInLog(Exception):
    """The log shows a failure Triton will not report; carries the line."""


class TritonStartError(TritonError):
    """The server did not become ready; the message carries its log tail."""


class TritonModelError(TritonError):
    """A model did not load or unload; the message carries Triton's reason."""


@dataclass(frozen=True)
class TritonEndpoints:
    """Where a running server listens. `*_address` is the `host:port` tritonclient takes."""

    host: str
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


class LocalTriton:
    """A tritonserver subprocess serving `model_repository` in explicit model-control mode.

    Use as a context manager, or call `start()` and `stop()`. `load_models` are loaded
    during start-up (`"*"` loads every model); others with `load_model`. Without a
    `run_dir` a temporary one is made and removed on stop.
    """

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
        # Ports a user fixed (None: a free one, fresh on each start attempt).
        self.fixed_ports = (http_port, grpc_port, metrics_port)
        self._proc: Popen | None = None
        self._endpoints: TritonEndpoints | None = None
        self._shm_prefix = f"{_SHM_PREFIX}_{os.getpid()}_{os.urandom(4).hex()}_"
        self.startup_s: float | None = None
        self.load_s: dict[str, float] = {}
        self._failed = False  # an error pointed at the log: keep it

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> float:
        """Start the server and wait until it is ready; return seconds from spawn to ready."""
        if self._proc is not None:
            raise TritonError("this LocalTriton is already started")
        install = TritonInstall.locate()
        for port in self.fixed_ports:
            if port is not None and not port_is_free(port):
                raise TritonStartError(f"port {port} on {LOOPBACK} is already in use")
        remove_stale_shm()
        self.run_dir = self._given_run_dir or Path(tempfile.mkdtemp(prefix="servebench-triton-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        backends = install.prepare_backends(self.run_dir / "backends")
        env = install.environment()
        _LIVE.add(self)
        for attempt in range(1, _START_ATTEMPTS + 1):
            free = iter(free_ports(3))
            endpoints = TritonEndpoints(
                LOOPBACK, *(port if port is not None else next(free) for port in self.fixed_ports)
            )
            started = time.perf_counter()
            self._proc = spawn_server(self._argv(install, backends, endpoints), env, self.log_path)
            self._endpoints = endpoints
            try:
                self._wait_ready(started)
            except TritonStartError:
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

    def __enter__(self) -> LocalTriton:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state -----------------------------------------------------------------------

    @property
    def endpoints(self) -> TritonEndpoints:
        if self._endpoints is None or self._proc is None:
            raise TritonError("the local Triton is not running; call start() first")
        return self._endpoints

    @property
    def log_path(self) -> Path:
        if self.run_dir is None:
            raise TritonError("the local Triton has no run directory before start()")
        return self.run_dir / "tritonserver.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def is_ready(self) -> bool:
        return self._get("/v2/health/ready") == 200

    def is_model_ready(self, name: str) -> bool:
        return self._get(f"/v2/models/{_quote(name)}/ready") == 200

    def model_index(self) -> list[dict]:
        """Triton's view of the repository: name, version, state and reason per model."""
        status, body = self._post("/v2/repository/index", timeout_s=10.0)
        if status != 200:
            raise TritonError(f"repository index failed with HTTP {status}: {body}")
        return json.loads(body or "[]")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, TritonError):
            return ""
        # Leave out the option table Triton prints at start-up: it fills a tail and never
        # says what went wrong.
        kept = [line for line in text.splitlines() if not line.startswith(("|", "+-"))]
        return "\n".join(kept[-lines:])

    # -- models ----------------------------------------------------------------------

    def load_model(self, name: str, timeout_s: float = 120.0) -> float:
        """Load (or reload) `name`; return seconds from the load request to model ready."""
        with self._failure_keeps_log():
            return self._load(name, timeout_s)

    def _load(self, name: str, timeout_s: float) -> float:
        started = time.perf_counter()
        try:
            status, body = self._post_watching_log(
                f"/v2/repository/models/{_quote(name)}/load", timeout_s=timeout_s
            )
        except _HangInLog as hang:
            raise TritonModelError(
                f"model {name!r}: load failed and Triton will not report it: {hang}; "
                f"server log {self.log_path}"
            ) from None
        except TimeoutError:
            raise TritonModelError(
                f"model {name!r}: load did not finish within {timeout_s:g} s; "
                f"server log {self.log_path}:\n{self.log_tail()}"
            ) from None
        except OSError as err:
            raise TritonModelError(
                f"model {name!r}: server did not answer the load request ({err}); "
                f"server log {self.log_path}:\n{self.log_tail()}"
            ) from None
        if status != 200:
            missing = (
                ""
                if (self.model_repository / name).is_dir()
                else (f" (no folder {name!r} in {self.model_repository})")
            )
            raise TritonModelError(f"model {name!r}: load failed{missing}: {_error_text(body)}")
        if not self.is_model_ready(name):
            raise TritonModelError(f"model {name!r}: loaded but not ready:\n{self.log_tail()}")
        elapsed = time.perf_counter() - started
        self.load_s[name] = elapsed
        return elapsed

    def unload_model(self, name: str, timeout_s: float = 30.0) -> None:
        """Unload `name` and wait until its instances are really gone.

        Triton answers the unload request at once and reports the model `UNLOADING`
        (and the whole server not ready) until its python stubs have exited, 1-3 s here;
        waiting for that keeps the next measurement off a half-stopped server.
        """
        with self._failure_keeps_log():
            self._unload(name, timeout_s)

    def _unload(self, name: str, timeout_s: float) -> None:
        status, body = self._post(
            f"/v2/repository/models/{_quote(name)}/unload", timeout_s=timeout_s
        )
        if status != 200:
            raise TritonModelError(f"model {name!r}: unload failed: {_error_text(body)}")
        deadline = time.monotonic() + timeout_s
        while (state := self.model_state(name)) in ("READY", "UNLOADING"):
            if time.monotonic() > deadline:
                raise TritonModelError(
                    f"model {name!r}: still {state} {timeout_s:g} s after unload"
                )
            time.sleep(_POLL_INTERVAL_S)

    def model_state(self, name: str) -> str | None:
        """Triton's state of `name` (READY, LOADING, UNLOADING, UNAVAILABLE) or None if
        it has never been loaded (or is not in the repository)."""
        for model in self.model_index():
            if model.get("name") == name:
                return model.get("state")
        return None

    # -- internals -------------------------------------------------------------------

    def _argv(self, install: TritonInstall, backends: Path, ep: TritonEndpoints) -> list[str]:
        argv = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            "--model-control-mode=explicit",
            f"--http-address={ep.host}",
            f"--http-port={ep.http_port}",
            f"--grpc-address={ep.host}",
            f"--grpc-port={ep.grpc_port}",
            f"--metrics-address={ep.host}",
            f"--metrics-port={ep.metrics_port}",
            f"--exit-timeout-secs={max(1, int(self.stop_timeout_s))}",
            "--exit-on-error=true",
            f"--log-verbose={self.log_verbose}",
        ]
        if not gpu_present():
            argv.append("--allow-gpu-metrics=false")
        argv += [f"--load-model={name}" for name in self.load_models]
        return argv + list(self.extra_args)

    def _wait_ready(self, started: float) -> None:
        assert self._proc is not None
        deadline = started + self.startup_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise TritonStartError(
                    f"tritonserver exited with code {code} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.is_ready():
                return
            if hang := self._hang_in_log():
                raise TritonStartError(
                    f"tritonserver will never be ready: {hang}; log {self.log_path}"
                )
            if time.perf_counter() > deadline:
                raise TritonStartError(
                    f"tritonserver not ready within {self.startup_timeout_s:g} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _post_watching_log(self, path: str, timeout_s: float) -> tuple[int, str]:
        """POST, but give up as soon as the log shows a failure Triton never answers.

        The request runs in a daemon thread so the log can be watched meanwhile; a thread
        left waiting on a hung load ends with its own timeout or when the server stops.
        """
        offset = self._log_size()
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["answer"] = self._post(path, timeout_s)
            except BaseException as err:  # handed to the caller's thread below
                outcome["error"] = err

        thread = threading.Thread(target=call, name=f"triton-post {path}", daemon=True)
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
        except TritonError:
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

    def _get(self, path: str, timeout_s: float = 2.0) -> int:
        """The HTTP status of a GET, or 0 when nothing answers."""
        try:
            status, _ = _request("GET", self._url(path), timeout_s)
        except (OSError, TritonError):
            return 0
        return status

    def _post(self, path: str, timeout_s: float) -> tuple[int, str]:
        return _request("POST", self._url(path), timeout_s)

    def _url(self, path: str) -> str:
        return self.endpoints.http_url + path


def _request(method: str, url: str, timeout_s: float) -> tuple[int, str]:
    """(status, body) of one request; HTTP errors are answers, not exceptions, here."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            raise TimeoutError(str(err.reason)) from None
        raise


def _error_text(body: str) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.strip() or "(no reason given)"


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


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
_LIVE: set[LocalTriton] = set()


@atexit.register
def _stop_all() -> None:
    """Stop servers a caller forgot (or could not) stop before the interpreter exits."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()
