"""Dask set up once (issue 36 item 6): a gang generator takes a worker's slot as a cluster
job does, so on a shared scheduler it never runs beside a job (or another generator) that
is measuring; a scheduler whose workers offer no slot is refused in one line. On real
Dask LocalClusters against the aiohttp test server."""

from __future__ import annotations

import threading

import loads
import pytest
from test_load_http import factory, server  # noqa: F401  (server is a fixture)

from servebench.common.dask_cluster import (
    SLOT,
    SchedulerUnreachable,
    free_slot_workers,
    local_cluster,
)
from servebench.load import LoadSettings


def test_free_slot_workers_are_those_with_a_slot_and_nothing_running():
    identity = {
        "workers": {
            "tcp://a": {"resources": {SLOT: 1, "GPU": 0}},
            "tcp://b": {"resources": {SLOT: 1}},
            "tcp://c": {"resources": {}},  # a plain `dask worker`
            "tcp://d": {},
        }
    }
    assert free_slot_workers(identity, {"tcp://a": [], "tcp://b": ["job"]}) == ["tcp://a"]
    assert free_slot_workers({"workers": {}}, {}) == []


def test_a_gang_takes_the_worker_whose_slot_is_free(server):  # noqa: F811
    """One of two workers runs a job holding its slot: the one generator goes to the
    other worker, and the job's slot is never shared."""
    from distributed import Client, Event

    with local_cluster(2) as cluster, Client(cluster) as client:
        busy = sorted(client.scheduler_info()["workers"])[0]
        release = Event("release-the-slot", client=client)

        def hold(name: str) -> str:
            Event(name).wait(60)
            return "done"

        job = client.submit(hold, "release-the-slot", workers=[busy], resources={SLOT: 1})
        client.wait_for_workers(2)
        while not client.processing().get(busy):  # the job is running
            threading.Event().wait(0.05)
        try:
            settings = LoadSettings(
                concurrency=1, count=20, generators=1, scheduler=cluster.scheduler_address
            )
            summary = loads.load(factory(f"{server}/work"), settings)
        finally:
            release.set()
        assert job.result(timeout=30) == "done"
    (generator,) = summary.gang.generators
    assert summary.count == 20 and generator.worker != busy


def test_a_scheduler_whose_workers_offer_no_slot_is_refused_in_one_line(server):  # noqa: F811
    """Workers started without `--resources slot=1` (a plain LocalCluster here): the gang
    says what it needs instead of waiting for a slot that never comes."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        settings = LoadSettings(
            concurrency=1, count=5, generators=1, scheduler=cluster.scheduler_address
        )
        with pytest.raises(SchedulerUnreachable) as caught:
            loads.load(factory(f"{server}/work"), settings)
    message = str(caught.value)
    assert "\n" not in message
    assert "free slot" in message and "0 of 1" in message and "--resources slot=1" in message
