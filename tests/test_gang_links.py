"""A gang through an emulated link (issue 24, item 6): each generator runs its own link
emulator of the trial's profile, in its own process, in front of the server's real
address (`scenario.linked`), for every protocol.

On a real Dask LocalCluster of 2 and a real Triton. What is checked: every record crossed a
link (its latency is at least the link's round trip, less what the emulator may deliver
early: `link_checks.rtt_floor_s`), the planned count, both generators' records, the gang
summary's `link` block, and that the emulators ran as children of the two generators'
processes, none in the coordinator's, and are gone afterwards. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest
from link_checks import rtt_floor_s
from scenario_checks import tiny_scenario, write

from servebench.clients.base import InferenceError
from servebench.common.background import BackgroundThread
from servebench.load import LoadPlan, LoadSettings, constant, read_records, run
from servebench.load.plan import UNNAMED
from servebench.netem import LinkProfile
from servebench.results import LinkRecord, read_gang
from servebench.scenario.deploy import client_target
from servebench.scenario.linked import ClientRecipe, TrialClients, generator_seed
from servebench.scenario.runner import ScenarioRunner

# A fixed 20 ms round trip, no jitter: every request through it takes 20 ms at least.
LINK = LinkProfile(name="flat20", rtt_s=0.020)
LINK_FILE = "name: flat20\nrtt_s: 0.02\n"
# 20 req/s (Poisson, seeded) until 40 measured requests: about 2 s of load, 20 a generator.
WORKLOAD = {
    "rates": [20],
    "requests": 40,
    "duration_s": 0.5,
    "warmup_s": 0.2,
    "timeout_s": 5,
    "generators": {"count": 2},
}
EMULATOR = "servebench.netem.worker"


class EmulatorWatch(BackgroundThread):
    """Every link emulator process under this one, and its parent, seen while it ran (a
    look every 50 ms from a thread; an emulator lives from its generator's connect to its
    close, seconds here)."""

    def __init__(self) -> None:
        super().__init__("emulator-watch")
        self.seen: dict[int, int] = {}  # emulator pid -> its parent's pid

    def run(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(0.05):
            for process in me.children(recursive=True):
                if _is_emulator(process):
                    with contextlib.suppress(psutil.Error):
                        self.seen.setdefault(process.pid, process.ppid())


def _is_emulator(process: psutil.Process) -> bool:
    try:
        return EMULATOR in " ".join(process.cmdline())
    except psutil.Error:  # gone meanwhile
        return False


def _check_own_emulators(watch: EmulatorWatch) -> None:
    """Two emulators, each the child of its own generator's process, none of this one (the
    coordinator); none left running."""
    assert len(watch.seen) == 2, watch.seen
    parents = set(watch.seen.values())
    assert len(parents) == 2 and os.getpid() not in parents, watch.seen
    left = [p for p in psutil.Process().children(recursive=True) if p.pid in watch.seen]
    _, alive = psutil.wait_procs(left, timeout=10)
    assert alive == [], f"emulators left running: {[p.pid for p in alive]}"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_scenario_gang_through_a_link_has_an_emulator_per_generator(
    tmp_path: Path, triton_install, protocol: str
):
    """Triton's HTTP and gRPC (the lean transports a scenario uses), 2 generators through
    a 20 ms link."""
    (tmp_path / "links").mkdir()
    write(tmp_path / "links", LINK_FILE, "flat20.yaml")
    text = tiny_scenario(
        "gang-link",
        server={"protocol": protocol},
        workload=WORKLOAD,
        links=["links/flat20.yaml"],
    )
    with EmulatorWatch() as watch:
        outcome = ScenarioRunner(write(tmp_path, text), output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    run_dir = outcome.directory.path
    (row,) = pd.read_csv(run_dir / "trials.csv").itertuples()
    assert row.status == "ok" and row.generators == 2 and row.protocol == protocol
    assert row.link == "flat20"
    records = pq.read_table(run_dir / "records.parquet").to_pandas()
    assert len(records) == row.count == 40 and records.ok.all()
    assert set(records.generator) == {0, 1}
    assert records.latency.min() >= rtt_floor_s(LINK)
    gang = read_gang(row.gang_json)
    assert gang is not None and gang.partial is False
    assert gang.link == LinkRecord(profile="flat20", per_generator=True, links=2)
    _check_own_emulators(watch)


@pytest.mark.parametrize(
    ("protocol", "transport", "client_transport"),
    [("triton-http", "http", "aiohttp"), ("triton-grpc", "grpc", "grpcio")],
)
def test_a_gang_through_linked_clients_of_aiohttp_and_grpcio(
    triton_dense_model, tmp_path: Path, protocol: str, transport: str, client_transport: str
):
    """The same factory on the clients a scenario does not pick (aiohttp, grpcio)."""
    target, _ = client_target(triton_dense_model.server, transport)
    recipe = ClientRecipe(
        protocol, triton_dense_model.name, 5.0, (("transport", client_transport),)
    )
    source = TrialClients(((UNNAMED, recipe),), transport, "", target, seed=3, link=LINK)
    path = tmp_path / "records.parquet"
    settings = LoadSettings(arrivals=constant(20), count=20, warmup=0.1, generators=2)
    with EmulatorWatch() as watch:
        summary = run(LoadPlan(settings, source), records=path, handle_signals=False)
    assert summary.count == 20 and summary.errors == 0, summary.errors_by_kind
    table = read_records(path)
    assert set(table["generator"].to_pylist()) == {0, 1}
    assert table["latency"].to_numpy().min() >= rtt_floor_s(LINK)
    _check_own_emulators(watch)


def _source(recipe: ClientRecipe, target: str, seed: int) -> TrialClients:
    """A trial's client source of one model over HTTP through `LINK`."""
    return TrialClients(((UNNAMED, recipe),), "http", "", target, seed, link=LINK)


def test_each_generator_link_is_seeded_apart_and_the_same_every_run():
    source = _source(ClientRecipe("triton-http", "m", 1.0), "h:1", 7)
    seeds = [source.for_part(i, [UNNAMED])[0].link.emulator.seed for i in range(4)]
    assert len(set(seeds)) == 4
    assert seeds == [generator_seed(7, i) for i in range(4)]
    assert seeds != [generator_seed(8, i) for i in range(4)]


def test_a_client_that_cannot_connect_stops_its_emulator(closed_port: str):
    """The gang closes only a client that connected: the emulator must stop by itself."""
    source = _source(ClientRecipe("triton-http", "m", 1.0), closed_port, 1)
    (client,) = source.for_part(0, [UNNAMED])
    with pytest.raises(InferenceError):
        asyncio.run(client.connect())
    emulator = client.link.emulator
    assert emulator.address is not None  # it started
    assert emulator.final_stats is not None  # and was stopped
    assert not [p for p in psutil.Process().children(recursive=True) if _is_emulator(p)]
