"""`triton-local`: the `Server` interface over `LocalTriton` (the pip-installed binary).

A thin adapter: `LocalTriton` already starts, times and stops the process and watches its
log for hangs; this only translates its errors and endpoints into the common ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servebench.servers.base import (
    Server,
    ServerEndpoints,
    ServerError,
    ServerModelError,
    ServerStartError,
)
from servebench.servers.triton_install import TritonNotInstalledError
from servebench.servers.triton_local import (
    LocalTriton,
    TritonError,
    TritonModelError,
)


class LocalTritonServer(Server):
    """tritonserver as a subprocess on loopback ports, explicit model-control mode."""

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
    ) -> None:
        super().__init__()
        self.triton = LocalTriton(
            Path(model_repository),
            run_dir=run_dir,
            load_models=load_models,
            startup_timeout_s=startup_timeout_s,
            stop_timeout_s=stop_timeout_s,
            log_verbose=log_verbose,
            extra_args=extra_args,
        )

    def start(self) -> float:
        try:
            self.startup_s = self.triton.start()
        except (TritonError, TritonNotInstalledError) as err:
            raise ServerStartError(f"{self.kind}: {err}") from err
        return self.startup_s

    def stop(self) -> None:
        self.triton.stop()

    @property
    def endpoints(self) -> ServerEndpoints:
        try:
            ep = self.triton.endpoints
        except TritonError as err:
            raise ServerError(f"{self.kind}: {err}") from None
        return ServerEndpoints("triton", ep.http_url, ep.grpc_address, ep.metrics_url)

    @property
    def pid(self) -> int | None:
        return self.triton.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            return self.triton.log_tail(lines)
        except TritonError:  # never started: no log yet
            return ""

    def load_model(self, name: str, timeout_s: float = 300.0) -> float:
        # LocalTriton's own load watches the server log for failures Triton never reports.
        try:
            elapsed = self.triton.load_model(name, timeout_s=timeout_s)
        except TritonModelError as err:
            raise ServerModelError(f"{self.kind}: {err}") from err
        self.load_s[name] = elapsed
        return elapsed

    def unload_model(self, name: str, timeout_s: float = 60.0) -> None:
        try:
            self.triton.unload_model(name, timeout_s=timeout_s)
        except TritonModelError as err:
            raise ServerModelError(f"{self.kind}: {err}") from err
