"""The HTTP control plane of the two servers: health, model state, model load and unload.

Triton speaks the KServe v2 protocol (`/v2/health/ready`, `/v2/models/<m>/ready`, the
repository extension `/v2/repository/models/<m>/load`); TF Serving's REST API reports
model state at `/v1/models/<m>`. Every server kind (local, docker, remote) reaches the
same endpoints, so the calls live here once.

Each API's calls are gathered in one `ControlPlane` (`CONTROL_PLANES`, by API name), so
a server asks its plane instead of testing which API it speaks.

The standard library is used rather than tritonclient: these are a handful of small REST
calls, and tritonclient.http brings gevent into a process that may also run asyncio.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from servebench.common.serving_apis import TFS, TRITON, ServingApi
from servebench.servers.errors import ServerError

POLL_INTERVAL_S = 0.05


def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) of one request; HTTP error statuses are answers, not raises.

    Raises `OSError` (connection refused, reset, DNS) and `TimeoutError` when nothing
    answers, because "no answer" and "an error answer" mean different things to callers.
    """
    if method == "POST" and body is None:
        body = b""
    req = urllib.request.Request(url, method=method, data=body, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as response:
            return response.status, response.read(), dict(response.headers.items())
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers.items()) if err.headers else {}
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            raise TimeoutError(f"{url}: no answer within {timeout_s:g} s") from None
        if isinstance(err.reason, OSError):
            raise err.reason from None
        raise OSError(f"{url}: {err.reason}") from None


def status_of(url: str, timeout_s: float = 2.0) -> int:
    """The HTTP status of a GET, or 0 when nothing answers (refused, reset, timeout)."""
    try:
        status, _, _ = request("GET", url, timeout_s=timeout_s)
    except OSError:
        return 0
    return status


def quote(name: str) -> str:
    """`name` as one URL path segment (model names may hold `/`, spaces, `%`)."""
    return urllib.parse.quote(name, safe="")


def error_text(body: bytes) -> str:
    """The `error` field servers put in JSON error bodies, else the body itself."""
    text = body.decode(errors="replace")
    try:
        return str(json.loads(text)["error"])
    except (ValueError, KeyError, TypeError):
        return text.strip() or "(no reason given)"


# -- Triton (KServe v2) ------------------------------------------------------------------


def triton_model_ready(http_url: str, name: str) -> bool:
    return status_of(f"{http_url}/v2/models/{quote(name)}/ready") == 200


def triton_model_state(http_url: str, name: str, timeout_s: float = 10.0) -> str | None:
    """READY, LOADING, UNLOADING, UNAVAILABLE, or None if Triton has never seen `name`
    (from the repository index, which also lists models that are not loaded)."""
    status, body, _ = request(
        "POST", f"{http_url}/v2/repository/index", body=b"{}", timeout_s=timeout_s
    )
    if status != 200:
        raise ServerError(f"{http_url}: repository index failed with HTTP {status}: "
                          f"{error_text(body)}")  # fmt: skip
    for model in json.loads(body or b"[]"):
        if model.get("name") == name:
            return model.get("state")
    return None


def triton_load(http_url: str, name: str, timeout_s: float) -> tuple[int, str]:
    """Ask Triton to load `name`; (status, reason). Triton answers once the model is ready."""
    status, body, _ = request(
        "POST", f"{http_url}/v2/repository/models/{quote(name)}/load", timeout_s=timeout_s
    )
    return status, "" if status == 200 else error_text(body)


def triton_unload(http_url: str, name: str, timeout_s: float) -> tuple[int, str]:
    status, body, _ = request(
        "POST", f"{http_url}/v2/repository/models/{quote(name)}/unload", timeout_s=timeout_s
    )
    return status, "" if status == 200 else error_text(body)


def triton_wait_unloaded(http_url: str, name: str, timeout_s: float) -> str | None:
    """Wait until `name` is neither READY nor UNLOADING; return the state it stuck in or None.

    Triton answers an unload at once while the instances are still stopping; a measurement
    that starts then would run against a half-stopped server.
    """
    deadline = time.monotonic() + timeout_s
    while (state := triton_model_state(http_url, name)) in ("READY", "UNLOADING"):
        if time.monotonic() > deadline:
            return state
        time.sleep(POLL_INTERVAL_S)
    return None


# -- TF Serving (REST) -------------------------------------------------------------------


def tfs_model_states(rest_url: str, name: str, timeout_s: float = 2.0) -> dict[str, str] | None:
    """{version: state} for `name` (states START, LOADING, AVAILABLE, UNLOADING, END), or
    None when the server does not know the model or does not answer."""
    try:
        status, body, _ = request("GET", f"{rest_url}/v1/models/{quote(name)}", timeout_s=timeout_s)
    except OSError:
        return None
    if status != 200:
        return None
    versions = json.loads(body).get("model_version_status", [])
    return {str(v.get("version")): str(v.get("state")) for v in versions}


def tfs_model_available(rest_url: str, name: str) -> bool:
    states = tfs_model_states(rest_url, name)
    return bool(states) and "AVAILABLE" in states.values()


# -- one plane per API -------------------------------------------------------------------


@dataclass(frozen=True)
class ControlPlane:
    """How servebench asks a server of one API whether it is up and what its models do.

    `health_path` is the URL (under the HTTP/REST base) whose answer says the server is up,
    when its status is one of `up_statuses`. `loads_on_request`: models load and unload
    when asked (Triton's repository API, in explicit model-control mode); without it a
    server serves what its own configuration lists.
    """

    api: ServingApi
    health_path: str
    up_statuses: frozenset[int]
    model_ready: Callable[[str, str], bool]
    loads_on_request: bool

    def health_url(self, base_url: str) -> str:
        return base_url + self.health_path

    def ready(self, base_url: str) -> bool:
        return status_of(self.health_url(base_url)) in self.up_statuses


CONTROL_PLANES: dict[str, ControlPlane] = {
    plane.api.name: plane
    for plane in (
        ControlPlane(TRITON, "/v2/health/ready", frozenset({200}), triton_model_ready, True),
        # TF Serving has no health endpoint: a model that does not exist is answered with
        # 404 and a JSON error only once its HTTP server runs.
        ControlPlane(TFS, "/v1/models/servebench-health-probe", frozenset({200, 404}),
                     tfs_model_available, False),
    )
}  # fmt: skip


def control_plane(api: str) -> ControlPlane:
    """The plane of the API called `api` (a `ServerEndpoints.api`)."""
    try:
        return CONTROL_PLANES[api]
    except KeyError:
        raise ServerError(f"api: {api!r} is not one of {', '.join(CONTROL_PLANES)}") from None
