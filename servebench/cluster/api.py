"""The leader's REST API (aiohttp) and its Prometheus endpoint.

    POST   /jobs                  submit a scenario (the YAML text is the body); query:
                                  name (the file name errors cite), priority, gpus,
                                  label=k=v (repeatable); header X-Servebench-Submitter
    GET    /jobs[?state=S...]     the jobs, in submission order
    GET    /jobs/{id}             one job and its transitions (every job says `unschedulable`:
                                  why no follower can run it while it waits, else null)
    POST   /jobs/{id}/cancel      cancel it (DELETE /jobs/{id} does the same)
    GET    /jobs/{id}/results     its result directory as tar.gz
    GET    /followers             the followers, their labels, queues and running jobs
    GET    /metrics               Prometheus text: jobs per state, queue length, running,
                                  followers, job completion time and queueing delay

Errors are JSON `{"error": "...", "problems": [...]}` with 400 (a bad scenario: each
problem is the validator's `file:line field: ...` line), 401 (no or wrong token), 404
(unknown job) or 409 (no results yet).

The API listens on loopback unless told otherwise, and anywhere else only with a token
(`Authorization: Bearer TOKEN`, compared in constant time): a leader runs benchmarks,
and an open port that starts them is not something to get by accident.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from servebench.cluster import archive
from servebench.cluster.errors import ClusterError
from servebench.cluster.follower import parse_labels
from servebench.cluster.job import MAX_SCENARIO_BYTES, JobState, Needs
from servebench.cluster.leader import Leader

TOKEN_ENV = "SERVEBENCH_CLUSTER_TOKEN"
SUBMITTER_HEADER = "X-Servebench-Submitter"
DEFAULT_PORT = 8642
# Job completion times run from seconds (a smoke test) to hours (a search).
TIME_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
_LEADER = web.AppKey("leader", Leader)


class BindError(ClusterError, ValueError):
    """An address the API must not listen on as asked (off loopback without a token)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen off loopback without a token (BindError, one line)."""
    if not is_loopback(host) and not token:
        raise BindError(
            f"listening on {host} exposes the leader beyond this machine; give a token "
            f"(--token or {TOKEN_ENV}) or listen on 127.0.0.1"
        )


def make_app(leader: Leader, token: str | None = None) -> web.Application:
    """The API for `leader`; with `token`, every request must carry it."""
    middlewares = [_auth(token)] if token else []
    app = web.Application(middlewares=middlewares, client_max_size=MAX_SCENARIO_BYTES + 4096)
    app[_LEADER] = leader
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(leader))
    app.add_routes(
        [
            web.post("/jobs", _submit),
            web.get("/jobs", _list),
            web.get("/jobs/{id}", _show),
            web.post("/jobs/{id}/cancel", _cancel),
            web.delete("/jobs/{id}", _cancel),
            web.get("/jobs/{id}/results", _results),
            web.get("/followers", _followers),
            web.get("/metrics", _metrics(registry)),
        ]
    )
    return app


def _error(status: type[web.HTTPException], message: str, problems: list[str] | None = None):
    body = {"error": message, **({"problems": problems} if problems else {})}
    return status(text=web.json_response(body).text, content_type="application/json")


def _auth(token: str) -> Callable[..., Any]:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            error = _error(
                web.HTTPUnauthorized, "a valid token is required (Authorization: Bearer ...)"
            )
            error.headers["WWW-Authenticate"] = "Bearer"
            raise error
        return await handler(request)

    return check


def _job_json(leader: Leader, job_id: str, history: bool = False) -> dict[str, Any]:
    job = leader.store.get(job_id)
    data = job.as_dict()
    data["has_results"] = leader.result_dir(job_id) is not None
    data["unschedulable"] = leader.unschedulable(job)
    if history:
        data["history"] = [
            {
                "from": t.from_state and str(t.from_state),
                "to": str(t.to_state),
                "at": t.at,
                "reason": t.reason,
                "follower": t.follower,
            }
            for t in leader.store.history(job_id)
        ]
    return data


def _known(leader: Leader, job_id: str) -> None:
    try:
        leader.store.get(job_id)
    except KeyError:
        raise _error(web.HTTPNotFound, f"unknown job {job_id}") from None


async def _submit(request: web.Request) -> web.Response:
    from servebench.scenario.validate import ScenarioError

    leader = request.app[_LEADER]
    query = request.query
    priority = _int_param(query, "priority")
    gpus = _int_param(query, "gpus")
    try:
        labels = parse_labels(query.getall("label", []))
    except ValueError as err:
        raise _error(web.HTTPBadRequest, f"query label: {err}") from None
    if gpus is not None and gpus < 0:
        raise _error(web.HTTPBadRequest, f"query gpus: {gpus} — must be >= 0")
    needs = None
    if gpus is not None or labels:
        needs = Needs(gpus=gpus or 0, labels=labels)
    raw = await request.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _error(web.HTTPBadRequest, f"the scenario is not UTF-8 text ({err})") from None
    name = query.get("name") or "<submitted>"
    submitter = request.headers.get(SUBMITTER_HEADER) or request.remote or "unknown"
    try:
        job = await leader.submit(
            text, submitter=submitter, priority=priority or 0, source=name, needs=needs
        )
    except ScenarioError as err:
        raise _error(web.HTTPBadRequest, f"{name}: invalid scenario", err.problems) from None
    return web.json_response(_job_json(leader, job.id), status=201)


def _int_param(query: Any, name: str) -> int | None:
    if name not in query:
        return None
    try:
        return int(query[name])
    except ValueError:
        raise _error(
            web.HTTPBadRequest, f"query {name}: {query[name]!r} — must be an integer"
        ) from None


async def _list(request: web.Request) -> web.Response:
    leader = request.app[_LEADER]
    try:
        states = [JobState(s) for s in request.query.getall("state", [])] or None
    except ValueError as err:
        choices = ", ".join(JobState)
        raise _error(web.HTTPBadRequest, f"{err} (states: {choices})") from None
    jobs = leader.store.list(states)
    return web.json_response({"jobs": [_job_json(leader, job.id) for job in jobs]})


async def _show(request: web.Request) -> web.Response:
    leader = request.app[_LEADER]
    job_id = request.match_info["id"]
    _known(leader, job_id)
    return web.json_response(_job_json(leader, job_id, history=True))


async def _cancel(request: web.Request) -> web.Response:
    leader = request.app[_LEADER]
    job_id = request.match_info["id"]
    _known(leader, job_id)
    by = request.headers.get(SUBMITTER_HEADER) or request.remote or "a user"
    await leader.cancel(job_id, by=by)
    return web.json_response(_job_json(leader, job_id))


async def _results(request: web.Request) -> web.Response:
    leader = request.app[_LEADER]
    job_id = request.match_info["id"]
    _known(leader, job_id)
    path = leader.result_dir(job_id)
    if path is None:
        state = leader.store.get(job_id).state
        raise _error(web.HTTPConflict, f"job {job_id} has no results yet (it is {state})")
    data = await asyncio.to_thread(archive.pack, path, job_id)
    return web.Response(
        body=data,
        content_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{job_id}.tar.gz"'},
    )


async def _followers(request: web.Request) -> web.Response:
    return web.json_response({"followers": request.app[_LEADER].follower_rows()})


def _metrics(registry: CollectorRegistry) -> Callable[[web.Request], Any]:
    async def handler(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    return handler


class _Collector:
    """Reads the store at each scrape, so the figures survive a leader restart and never
    drift from what the store says."""

    def __init__(self, leader: Leader) -> None:
        self.leader = leader

    def collect(self) -> Iterator[Any]:
        store = self.leader.store
        counts = store.counts()
        jobs = GaugeMetricFamily("servebench_cluster_jobs", "Jobs in each state.", labels=["state"])
        for state, count in counts.items():
            jobs.add_metric([str(state)], count)
        yield jobs
        yield GaugeMetricFamily(
            "servebench_cluster_queue_length",
            "Jobs waiting to run (queued or placed on a follower's queue).",
            value=counts[JobState.QUEUED] + counts[JobState.PLACED],
        )
        yield GaugeMetricFamily(
            "servebench_cluster_running",
            "Jobs running on followers.",
            value=counts[JobState.RUNNING],
        )
        yield GaugeMetricFamily(
            "servebench_cluster_followers", "Followers connected.", value=len(self.leader.followers)
        )
        finished = store.list([JobState.DONE, JobState.FAILED])
        yield _histogram(
            "servebench_cluster_job_completion_seconds",
            "Job completion time (submission to end) of done and failed jobs.",
            [j.finished_at - j.submitted_at for j in finished if j.finished_at is not None],
        )
        started = [j for j in store.list() if j.started_at is not None]
        yield _histogram(
            "servebench_cluster_queueing_delay_seconds",
            "Time from submission to the start of the job's last attempt.",
            [j.started_at - j.submitted_at for j in started if j.started_at is not None],
        )


def _histogram(name: str, doc: str, values: list[float]) -> HistogramMetricFamily:
    buckets = [(str(float(b)), sum(1 for v in values if v <= b)) for b in TIME_BUCKETS]
    buckets.append(("+Inf", len(values)))
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=sum(values))
