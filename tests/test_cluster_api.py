"""The leader's REST API on a real leader (a Dask scheduler without followers, so jobs
wait in the queue): token rules, 400 with the validator's `file:line field` lines for a
bad scenario, 404 for an unknown job, 409 before results exist, the Prometheus figures,
and the CLI's refusal to listen off loopback without a token."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cli_checks import assert_one_line_error
from scenario_checks import tiny_scenario
from typer.testing import CliRunner

from servebench.cli import app as cli
from servebench.cluster.api import make_app
from servebench.cluster.job import FollowerInfo, Needs, why_unschedulable
from servebench.cluster.leader import Leader
from servebench.cluster.policy import make_policy
from servebench.cluster.store import JobStore
from servebench.common.dask_cluster import worker_resources

GOOD = tiny_scenario(
    "api-test", settings=None, workload={"rates": [10], "batch_sizes": [1], "duration_s": 1}
)
BAD = GOOD.replace("duration_s: 1", "duration_s: -1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def api(
    tmp_path: Path, *, host: str = "127.0.0.1", token: str | None = None, follower: bool = False
) -> AsyncIterator[str]:
    """A leader with its API listening on `host`; yields the URL to reach it on loopback.
    `follower`: one follower without GPUs joins first (a Dask worker in this process; the
    jobs it is handed are not the tests' concern)."""
    from distributed import Client, Scheduler, Worker

    async with (
        Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as scheduler,
        Client(scheduler.address, asynchronous=True) as client,
        contextlib.AsyncExitStack() as workers,
    ):
        if follower:
            await workers.enter_async_context(
                Worker(
                    scheduler.address, nthreads=1, resources=worker_resources(0), name="cpu-only"
                )
            )
        store = JobStore(tmp_path / "jobs.sqlite")
        leader = Leader(store, make_policy("two-tier"), client, tmp_path / "results")
        await leader.start()
        assert len(leader.followers) == int(follower)
        runner = web.AppRunner(make_app(leader, token))
        await runner.setup()
        port = _free_port()
        await web.TCPSite(runner, host, port).start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await leader.close()
            await runner.cleanup()
            store.close()


async def test_off_loopback_needs_the_token(tmp_path: Path):
    async with (
        api(tmp_path, host="0.0.0.0", token="s3cret") as url,
        aiohttp.ClientSession() as http,
    ):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            async with http.get(f"{url}/jobs", headers=headers) as response:
                assert response.status == 401, headers
                assert "token" in (await response.json())["error"]
            async with http.post(f"{url}/jobs", data=GOOD, headers=headers) as response:
                assert response.status == 401
        async with http.get(f"{url}/metrics") as response:
            assert response.status == 401
        ok = {"Authorization": "Bearer s3cret"}
        async with http.get(f"{url}/jobs", headers=ok) as response:
            assert response.status == 200
            assert (await response.json()) == {"jobs": []}


def test_cli_refuses_off_loopback_without_a_token(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SERVEBENCH_CLUSTER_TOKEN", raising=False)
    for command in (["up"], ["leader", "--scheduler", "tcp://127.0.0.1:1"]):
        result = CliRunner().invoke(cli, ["cluster", *command, "--host", "0.0.0.0"])
        assert_one_line_error(result, "0.0.0.0", "token")


async def test_bad_scenario_is_400_naming_file_line_and_field(tmp_path: Path):
    async with api(tmp_path) as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}/jobs", params={"name": "bad.yaml"}, data=BAD) as response:
            assert response.status == 400
            body = await response.json()
        assert any(p.startswith("bad.yaml:11 workload.duration_s") for p in body["problems"]), body
        async with http.post(f"{url}/jobs", data="name: [unclosed") as response:
            assert response.status == 400
        async with http.post(f"{url}/jobs", params={"priority": "high"}, data=GOOD) as response:
            assert response.status == 400
            assert "priority" in (await response.json())["error"]
        async with http.get(f"{url}/jobs") as response:
            assert (await response.json()) == {"jobs": []}  # nothing was queued


async def test_unknown_job_is_404(tmp_path: Path):
    async with api(tmp_path) as url, aiohttp.ClientSession() as http:
        for method, path in (
            ("GET", "/jobs/j000000000000"),
            ("POST", "/jobs/j000000000000/cancel"),
            ("DELETE", "/jobs/j000000000000"),
            ("GET", "/jobs/j000000000000/results"),
        ):
            async with http.request(method, f"{url}{path}") as response:
                assert response.status == 404, path
                assert "unknown job j000000000000" in (await response.json())["error"]


async def test_submit_list_cancel_and_metrics(tmp_path: Path):
    async with api(tmp_path) as url, aiohttp.ClientSession() as http:
        headers = {"X-Servebench-Submitter": "ada@lab"}
        async with http.post(
            f"{url}/jobs", params={"name": "good.yaml", "priority": "3", "label": "zone=a"},
            data=GOOD, headers=headers,
        ) as response:  # fmt: skip
            assert response.status == 201
            job = await response.json()
        assert job["state"] == "queued" and job["submitter"] == "ada@lab"
        assert job["priority"] == 3 and job["needs"] == {"gpus": 0, "labels": {"zone": "a"}}
        assert job["estimate_s"] > 1
        async with http.get(f"{url}/jobs/{job['id']}/results") as response:
            assert response.status == 409  # no follower: it waits, no results yet
        metrics = await _metrics(http, url)
        assert metrics['servebench_cluster_jobs{state="queued"}'] == 1
        assert metrics["servebench_cluster_queue_length"] == 1
        assert metrics["servebench_cluster_running"] == 0
        assert metrics["servebench_cluster_followers"] == 0
        async with http.post(f"{url}/jobs/{job['id']}/cancel") as response:
            assert (await response.json())["state"] == "cancelled"
        async with http.get(f"{url}/jobs/{job['id']}") as response:
            shown = await response.json()
        assert [t["to"] for t in shown["history"]] == ["queued", "cancelled"]
        async with http.get(f"{url}/jobs", params={"state": "cancelled"}) as response:
            assert [j["id"] for j in (await response.json())["jobs"]] == [job["id"]]
        metrics = await _metrics(http, url)
        assert metrics['servebench_cluster_jobs{state="cancelled"}'] == 1
        assert metrics["servebench_cluster_queue_length"] == 0
        assert metrics["servebench_cluster_job_completion_seconds_count"] == 0  # not finished


async def _metrics(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(f"{url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in pairs}


async def test_the_commands_talk_to_the_leader(tmp_path: Path):
    scenario = tmp_path / "good.yaml"
    scenario.write_text(GOOD)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    async with api(tmp_path) as url:

        def run(*args: str):  # the commands block on HTTP: run them off the serving loop
            return asyncio.to_thread(
                CliRunner().invoke, cli, ["cluster", *args, "--leader-url", url]
            )

        submitted = await run("submit", str(scenario))
        assert submitted.exit_code == 0, submitted.output
        job_id = submitted.output.split()[0]
        rejected = await run("submit", str(bad))
        assert rejected.exit_code == 2
        assert f"{bad}:11 workload.duration_s" in rejected.output
        status = await run("status", "--once")
        assert status.exit_code == 0 and job_id in status.output and "queued" in status.output
        early = await run("results", job_id, "--out", str(tmp_path / "fetched"))
        assert_one_line_error(early, job_id, "no results yet")
        cancelled = await run("cancel", job_id)
        assert cancelled.exit_code == 0 and "cancelled" in cancelled.output
        assert_one_line_error(await run("cancel", "j000000000000"), "unknown job")


def test_an_unreachable_leader_is_one_line(closed_port: str):
    result = CliRunner().invoke(
        cli, ["cluster", "status", "--once", "--leader-url", f"http://{closed_port}"]
    )
    assert_one_line_error(result, "cannot reach the leader", closed_port)


@pytest.mark.parametrize("url", ["127.0.0.1:8642", "http://", "ftp://127.0.0.1:8642"])
def test_a_leader_url_without_a_scheme_or_host_is_one_line(
    url: str, monkeypatch: pytest.MonkeyPatch
):
    """As --leader-url (checked where it is parsed) and as $SERVEBENCH_CLUSTER_URL; before,
    urllib's "unknown url type" came out as a traceback."""
    result = CliRunner().invoke(cli, ["cluster", "status", "--once", "--leader-url", url])
    assert_one_line_error(result, f"--leader-url {url}")
    monkeypatch.setenv("SERVEBENCH_CLUSTER_URL", url)
    result = CliRunner().invoke(cli, ["cluster", "cancel", "j1"])
    assert_one_line_error(result, f"$SERVEBENCH_CLUSTER_URL {url}")


def test_a_second_leader_on_one_state_dir_is_refused(tmp_path: Path):
    from servebench.cluster.leader import StateLock

    lock = StateLock(tmp_path / "state")
    lock.acquire()
    try:
        result = CliRunner().invoke(cli, ["cluster", "up", "--state-dir", str(tmp_path / "state")])
        assert_one_line_error(result, "in use by a running leader", f"pid {os.getpid()}")
    finally:
        lock.release()


def test_why_no_follower_can_run_a_job():
    cpu = FollowerInfo("cpu", gpus=0, labels={"zone": "a"})
    gpu = FollowerInfo("gpu", gpus=1, labels={"zone": "b"})
    assert why_unschedulable(Needs(gpus=2), [cpu, gpu]) == (
        "unschedulable: needs GPU=2, followers have at most 1"
    )
    assert why_unschedulable(Needs(labels={"zone": "c"}), [cpu, gpu]) == (
        "unschedulable: needs zone=c, followers have zone=a, b"
    )
    assert why_unschedulable(Needs(gpus=1, labels={"zone": "a"}), [cpu, gpu]) == (
        "unschedulable: needs GPU=1, zone=a on one follower; none has them all"
    )
    assert why_unschedulable(Needs(gpus=1), [cpu, gpu]) is None  # gpu fits
    assert why_unschedulable(Needs(gpus=8), []) is None  # one that fits may still join


async def test_a_job_no_follower_can_run_is_queued_and_says_why(tmp_path: Path):
    """Before, a job asking for GPUs that no follower has was accepted and waited forever
    with nothing said; now the submitter is told, and `status` shows why it waits."""
    scenario = tmp_path / "good.yaml"
    scenario.write_text(GOOD)
    why = "unschedulable: needs GPU=2, followers have at most 0"
    async with api(tmp_path, follower=True) as url:

        def run(*args: str):
            return asyncio.to_thread(
                CliRunner().invoke, cli, ["cluster", *args, "--leader-url", url]
            )

        submitted = await run("submit", str(scenario), "--gpus", "2")
        assert submitted.exit_code == 0, submitted.output
        job_id = submitted.output.split()[0]
        assert f"warning: {job_id}: {why}" in submitted.output
        async with aiohttp.ClientSession() as http, http.get(f"{url}/jobs/{job_id}") as response:
            job = await response.json()
        assert job["state"] == "queued" and job["unschedulable"] == why and job["reason"] == why
        status = await run("status", "--once")
        assert why[:50] in status.output
