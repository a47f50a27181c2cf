"""`remote`: attach to a Triton or TF Serving someone else runs, at URLs the user gives.

servebench never starts or stops such a server; `start` only waits for its health endpoint
(and, by default, for every listed model to be ready) and `stop` only forgets it. Servers
people already run serve what their own configuration says (Triton's official containers
and docker/compose.yaml run model control `none` or `poll`; TF Serving reads its model
config), so servebench never loads or unloads their models unless told the server is in
Triton's explicit model-control mode (`model_control="explicit"`).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Sequence

from servebench.servers import control
from servebench.servers.base import (
    Server,
    ServerEndpoints,
    ServerModelError,
    ServerStartError,
)


def check_http_url(value: str, field: str) -> str:
    """`value` as an http(s) base URL without a trailing slash, or a ValueError naming `field`."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{field}: expected http://host:port, got {value!r}")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number or out of range)
    except ValueError:
        raise ValueError(f"{field}: bad port in {value!r}") from None
    if parts.query or parts.fragment:
        raise ValueError(f"{field}: a base URL has no query or fragment, got {value!r}")
    return value.rstrip("/")


def check_grpc_address(value: str, field: str) -> str:
    """`value` as `host:port`, or a ValueError naming `field`."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{field}: expected host:port, got {value!r}")
    return value


# How a remote server's models get loaded: by the server itself, or by servebench through
# Triton's repository API.
MODEL_CONTROL_MODES = ("none", "explicit")


class RemoteServer(Server):
    """A server at user-given URLs; `api` names the API it speaks (`CONTROL_PLANES`)."""

    kind = "remote"
    owns_process = False

    def __init__(
        self,
        api: str,
        http_url: str,
        *,
        grpc_address: str | None = None,
        metrics_url: str | None = None,
        models: Sequence[str] = (),
        ready_timeout_s: float = 30.0,
        model_control: str = "none",
    ) -> None:
        super().__init__()
        if api not in control.CONTROL_PLANES:
            raise ValueError(
                f"api: must be one of {', '.join(control.CONTROL_PLANES)}, got {api!r}"
            )
        if model_control not in MODEL_CONTROL_MODES:
            raise ValueError(
                f"model_control: must be one of {', '.join(MODEL_CONTROL_MODES)}, "
                f"got {model_control!r}"
            )
        plane = control.CONTROL_PLANES[api]
        if model_control == "explicit" and not plane.loads_on_request:
            raise ValueError(
                f"model_control: explicit is Triton's mode; {plane.api.title} has none"
            )
        self.manages_models = model_control == "explicit"
        self._endpoints = ServerEndpoints(
            api=api,
            http_url=check_http_url(http_url, "http_url"),
            grpc_address=check_grpc_address(grpc_address, "grpc_address") if grpc_address else None,
            metrics_url=check_http_url(metrics_url, "metrics_url") if metrics_url else None,
        )
        self.models = tuple(models)
        self.ready_timeout_s = ready_timeout_s

    def start(self) -> float:
        """Wait until the server (and every listed model) is ready; return seconds waited."""
        started = time.perf_counter()
        try:
            self.wait_ready(self.ready_timeout_s)
        except ServerStartError:
            raise ServerStartError(
                f"remote {self._endpoints.api} at {self._endpoints.http_url} is not ready "
                f"after {self.ready_timeout_s:g} s ({self._why_not_ready()})"
            ) from None
        remaining = max(0.0, self.ready_timeout_s - (time.perf_counter() - started))
        for name in () if self.manages_models else self.models:
            try:
                self.wait_model_ready(name, remaining)
            except ServerModelError as err:
                raise ServerStartError(
                    f"{err} (servebench does not load models on a remote server; load it "
                    f"there, or set model_control: explicit for a Triton in explicit mode)"
                ) from None
        self.startup_s = time.perf_counter() - started
        return self.startup_s

    def stop(self) -> None:
        """Nothing to do: the server keeps running (servebench did not start it)."""

    @property
    def endpoints(self) -> ServerEndpoints:
        return self._endpoints

    def load_model(self, name: str, timeout_s: float = 300.0) -> float:
        if not self.control.loads_on_request:
            raise ServerModelError(
                f"{self.describe()}: a remote {self.control.api.title} loads models from its "
                f"own config; servebench can only wait until {name!r} is available "
                f"(wait_model_ready)"
            )
        return super().load_model(name, timeout_s)

    def unload_model(self, name: str, timeout_s: float = 60.0) -> None:
        if not self.control.loads_on_request:
            raise ServerModelError(
                f"{self.describe()}: a remote {self.control.api.title} unloads models only "
                f"through its own config; servebench does not change it"
            )
        super().unload_model(name, timeout_s)

    def describe(self) -> str:
        return f"remote {self._endpoints.api} at {self._endpoints.http_url}"

    def _why_not_ready(self) -> str:
        ep = self._endpoints
        probe = self.control.health_url(ep.http_url)
        try:
            status, body, _ = control.request("GET", probe, timeout_s=2.0)
        except OSError as err:
            return f"{probe}: {err}"
        return f"{probe} answered HTTP {status}: {control.error_text(body)[:200]}"
