"""A small client of the leader's REST API (`api.py`), for the `cluster` commands and
scripts: one method per route, errors as `ApiError` carrying the API's own message.

Plain `urllib`: each command makes one or a few requests, so an event loop or a session
pool would add nothing.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from servebench.cluster.api import DEFAULT_PORT, SUBMITTER_HEADER, TOKEN_ENV
from servebench.cluster.errors import ClusterError

URL_ENV = "SERVEBENCH_CLUSTER_URL"
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
# A request's query: (name, value) pairs, in order, a name as often as it is given.
Query = Sequence[tuple[str, str]]


class ApiError(ClusterError):
    """A request the leader refused (`status` its HTTP status, 0 when it could not be
    reached) with its message and, for a bad scenario, the validator's problems."""

    def __init__(self, status: int, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []


def submitter_name() -> str:
    """Who submits, as the jobs list shows it: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class LeaderApi:
    def __init__(
        self, url: str | None = None, token: str | None = None, timeout_s: float = 60.0
    ) -> None:
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.timeout_s = timeout_s

    def submit(
        self,
        scenario_text: str,
        *,
        name: str,
        priority: int = 0,
        gpus: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        query: list[tuple[str, str]] = [("name", name), ("priority", str(priority))]
        if gpus is not None:
            query.append(("gpus", str(gpus)))
        query += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        return self._json("POST", "/jobs", query, scenario_text.encode("utf-8"))

    def jobs(self, states: Iterable[str] = ()) -> list[dict[str, Any]]:
        return self._json("GET", "/jobs", [("state", s) for s in states])["jobs"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/jobs/{_quote(job_id)}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/jobs/{_quote(job_id)}/cancel")

    def results(self, job_id: str) -> bytes:
        return self._request("GET", f"/jobs/{_quote(job_id)}/results")

    def followers(self) -> list[dict[str, Any]]:
        return self._json("GET", "/followers")["followers"]

    def _json(self, method: str, path: str, query: Query = (), body: bytes | None = None) -> Any:
        return json.loads(self._request(method, path, query, body))

    def _request(
        self, method: str, path: str, query: Query = (), body: bytes | None = None
    ) -> bytes:
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {SUBMITTER_HEADER: submitter_name()}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as err:
            raise _api_error(err) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ApiError(0, f"cannot reach the leader at {self.url}: {reason}") from None


def _quote(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")


def _api_error(err: urllib.error.HTTPError) -> ApiError:
    raw = err.read()
    try:
        body = json.loads(raw)
        return ApiError(err.code, str(body.get("error")), body.get("problems"))
    except (ValueError, AttributeError):
        text = raw.decode("utf-8", "replace").strip() or err.reason
        return ApiError(err.code, f"HTTP {err.code}: {text}")
