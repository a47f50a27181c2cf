"""One interface for every way a server can exist: started here, in a container, or remote.

A benchmark needs the same few things from each: bring it up (or attach), know when it is
ready, load and unload a model and time it, know where to send requests and scrape
metrics, know which process to watch, and stop it. `Server` is that contract; the kinds
(`servers.kinds`: triton-local, triton-docker, tfs-docker, triton-remote, tfs-remote)
differ only in how they start.

Model control and readiness go through the server's own HTTP API, asked through the
control plane of the API it speaks (`control.control_plane`), so the default
implementations here serve every kind; a kind overrides only what its server does
differently (TF Serving loads models by reloading its config).
Every failure is a `ServerError` (defined in `errors`, imported from here by callers).
"""

from __future__ import annotations

import time
import urllib.parse
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar

from servebench.servers import control
from servebench.servers.errors import ServerError, ServerModelError, ServerStartError


@dataclass(frozen=True)
class ServerEndpoints:
    """Where a server answers. `api` is the name of the API it speaks
    (`common.serving_apis`); `http_url` is Triton's HTTP or TF Serving's REST base URL;
    `grpc_address` is `host:port`; `metrics_url` is the Prometheus page, if any."""

    api: str
    http_url: str
    grpc_address: str | None = None
    metrics_url: str | None = None

    @property
    def http_address(self) -> str:
        """`host:port` of `http_url`, the form tritonclient.http takes."""
        return urllib.parse.urlsplit(self.http_url).netloc


class Server(ABC):
    """A model server a benchmark talks to. Use as a context manager or start()/stop()."""

    kind: ClassVar[str]
    # False for servers servebench only attaches to: it never starts or stops them, and
    # their "start" time is an attach time, not a cold start.
    owns_process: ClassVar[bool] = True
    # Whether servebench loads and unloads this server's models; False where the server
    # serves what its own configuration says and servebench only checks a model is ready.
    manages_models: bool = True

    def __init__(self) -> None:
        self.startup_s: float | None = None
        self.load_s: dict[str, float] = {}
        # Seconds of `startup_s` the engine took to create and start a container, for the
        # kinds that run one; the rest is the server's own start-up inside it (cold start
        # keeps them apart). None where nothing runs in a container.
        self.container_start_s: float | None = None

    # -- lifecycle (per kind) ---------------------------------------------------------

    @abstractmethod
    def start(self) -> float:
        """Start (or attach) and wait until ready; return seconds from start to ready."""

    @abstractmethod
    def stop(self) -> None:
        """Stop what `start` started and clean up after it; safe to call twice."""

    @property
    @abstractmethod
    def endpoints(self) -> ServerEndpoints:
        """Where the running server answers; raises `ServerError` before `start`."""

    @property
    def pid(self) -> int | None:
        """Host pid of the server's main process (for process-tree telemetry), if known."""
        return None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's own log, for a failure message; "" where servebench
        cannot see it (a server it did not start)."""
        return ""

    def describe(self) -> str:
        """A short name for messages: kind and address."""
        try:
            return f"{self.kind} at {self.endpoints.http_url}"
        except ServerError:
            return f"{self.kind} (not running)"

    # -- readiness --------------------------------------------------------------------

    @property
    def api(self) -> str:
        return self.endpoints.api

    @property
    def control(self) -> control.ControlPlane:
        """How this server's API is asked about readiness and models."""
        return control.control_plane(self.endpoints.api)

    def is_ready(self) -> bool:
        """Whether the server says it is ready (Triton's health endpoint; for TF Serving,
        which has none, the REST API answering)."""
        return self.control.ready(self.endpoints.http_url)

    def is_model_ready(self, name: str) -> bool:
        return self.control.model_ready(self.endpoints.http_url, name)

    def wait_ready(self, timeout_s: float) -> float:
        """Poll readiness until true; return the seconds waited or raise `ServerStartError`."""
        started = time.perf_counter()
        while not self.is_ready():
            if time.perf_counter() - started > timeout_s:
                raise ServerStartError(f"{self.describe()}: not ready within {timeout_s:g} s")
            time.sleep(control.POLL_INTERVAL_S)
        return time.perf_counter() - started

    def wait_model_ready(self, name: str, timeout_s: float) -> float:
        """Poll until `name` is ready to serve; return the seconds waited."""
        started = time.perf_counter()
        while not self.is_model_ready(name):
            if time.perf_counter() - started > timeout_s:
                raise ServerModelError(
                    f"{self.describe()}: model {name!r} not ready within {timeout_s:g} s"
                )
            time.sleep(control.POLL_INTERVAL_S)
        return time.perf_counter() - started

    # -- models -----------------------------------------------------------------------

    def load_model(self, name: str, timeout_s: float = 300.0) -> float:
        """Load (or reload) `name`; return seconds from the load request to model ready.

        This default uses Triton's repository API, which needs the server in explicit
        model-control mode; kinds whose server loads models otherwise override it.
        """
        ep = self._loading_endpoints("load a model through the repository API")
        started = time.perf_counter()
        try:
            status, reason = self._send_load(ep.http_url, name, timeout_s)
        except OSError as err:  # TimeoutError included
            message = f"{self.describe()}: model {name!r}: load request got no answer ({err})"
            raise ServerModelError(self._with_log(message)) from None
        if status != 200:
            raise ServerModelError(f"{self.describe()}: model {name!r}: load failed: {reason}")
        if not self.is_model_ready(name):
            raise ServerModelError(
                self._with_log(f"{self.describe()}: model {name!r}: loaded but not ready")
            )
        elapsed = time.perf_counter() - started
        self.load_s[name] = elapsed
        return elapsed

    def _send_load(self, http_url: str, name: str, timeout_s: float) -> tuple[int, str]:
        """The load request, (status, reason); a kind that can see more of a failure than
        Triton's answer (its log) watches while it waits."""
        return control.triton_load(http_url, name, timeout_s)

    def _with_log(self, message: str) -> str:
        """`message` and the end of the server's log, where servebench can read it: a load
        that hangs or half-fails says why only there."""
        tail = self.log_tail()
        return f"{message}; the end of its log:\n{tail}" if tail else message

    def unload_model(self, name: str, timeout_s: float = 60.0) -> None:
        """Unload `name` and wait until its instances are gone."""
        ep = self._loading_endpoints("unload a model through the repository API")
        status, reason = control.triton_unload(ep.http_url, name, timeout_s)
        if status != 200:
            raise ServerModelError(f"{self.describe()}: model {name!r}: unload failed: {reason}")
        stuck = control.triton_wait_unloaded(ep.http_url, name, timeout_s)
        if stuck is not None:
            raise ServerModelError(
                f"{self.describe()}: model {name!r}: still {stuck} {timeout_s:g} s after unload"
            )

    def _loading_endpoints(self, what: str) -> ServerEndpoints:
        """The endpoints, for a server whose API loads models on request; else the error."""
        if not self.control.loads_on_request:
            raise ServerModelError(
                f"{self.describe()}: cannot {what} on a {self.control.api.title} server"
            )
        return self.endpoints

    # -- context manager --------------------------------------------------------------

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
