"""A gang of load generators on a real Dask LocalCluster (issue 24), against the aiohttp
test server of test_load_http.py (its own process).

What is checked is exact: record counts, sequence numbers, the schedule's intended offsets
(each generator stamps the shared start plus the schedule's offset on its own clock, and
the coordinator takes the measured clock offset off again, so the merged intended times are
the single-process schedule's to float rounding), which generator a record came from, and
what a lost generator does to the verdict. No timing is asserted.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import warnings
from pathlib import Path

import loads
import numpy as np
import pytest
from test_load_http import factory, server  # noqa: F401  (server is a fixture)

from servebench.common.dask_cluster import local_cluster
from servebench.load import LoadSettings, constant, per_generator, poisson, read_records, run

# Seconds: rounding of epoch float64 times (2.4e-7 s) through a few sums.
EPS = 1e-5


def test_two_generators_send_exactly_the_one_schedule(server, tmp_path):  # noqa: F811
    """Open loop, count-bounded: the union of the parts is the planned Poisson schedule."""
    arrivals = poisson(400, seed=7)
    path = tmp_path / "records.parquet"
    settings = LoadSettings(arrivals=arrivals, count=500, generators=2)
    s = loads.load(factory(f"{server}/work"), settings, records=path)
    table = read_records(path)
    generator = table["generator"].to_numpy()
    parts = [int((generator == g).sum()) for g in (0, 1)]
    assert s.count == table.num_rows == sum(parts) == 500 and parts == [250, 250]
    seq = table["seq"].to_numpy()
    assert sorted(seq.tolist()) == list(range(500))
    assert (seq % 2 == generator).all()  # every other arrival, by sequence number
    # The intended times interleave as the single-process schedule's: the same offsets
    # from the common start, in sequence order.
    order = np.argsort(seq)
    intended = table["intended_time"].to_numpy()[order]
    planned = np.fromiter(arrivals.offsets(), float, count=500)
    assert np.allclose(intended - intended[0], planned - planned[0], rtol=0, atol=EPS)
    gang = s.gang
    assert gang is not None and gang.partial is False and gang.scheduler == "local"
    assert [g.count for g in gang.generators] == parts
    for g in gang.generators:
        assert g.clock_uncertainty_s > 0 and g.lost is None
        assert g.worker.startswith("tcp://127.0.0.1:")


def test_closed_loop_splits_concurrency_and_count_and_skew_is_judged(server):  # noqa: F811
    """A start skew bound no clock exchange can meet (1 ns) makes the run INVALID with
    start_skew; the load itself is whole."""
    s = loads.load(
        factory(f"{server}/work"),
        LoadSettings(concurrency=3, count=120, generators=2, start_skew_limit=1e-9),
    )
    assert s.count == 120 and s.concurrency == 3
    assert [g.count for g in s.gang.generators] == [60, 60]
    assert s.verdict == "INVALID" and s.reason_codes == ["start_skew"]
    assert s.gang.start_skew_s >= max(g.clock_uncertainty_s for g in s.gang.generators)


def test_a_client_pool_given_for_the_load_is_shared_out_rounded_up():
    """`servebench load --connections` is the gang's total: each generator gets its share,
    rounded up, so the gang never has fewer connections than asked and each has one."""
    assert [per_generator(64, n) for n in (1, 2, 3, 64, 100)] == [64, 32, 22, 1, 1]


def test_a_killed_generator_leaves_a_partial_run_with_the_others_records(
    server,  # noqa: F811
    tmp_path,
    caplog,
):
    """One generator's worker process is killed mid-run: the other's records are all there,
    the run is partial, INVALID with generator_lost naming the killed worker. Dask's own
    warning about it (its nanny restarts the worker) is in the gang's log file, which a
    warning names, not on the terminal."""
    from conftest import until
    from distributed import Client, Event, Variable

    from servebench.common.dask_cluster import local_cluster
    from servebench.load import LoadPlan, OneClient, PartLost, Started

    path = tmp_path / "records.parquet"
    with local_cluster(2) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        victim = sorted(pids)[1]
        settings = LoadSettings(
            arrivals=constant(200), duration=3.0, generators=2, scheduler=cluster.scheduler_address
        )
        result = {}
        started: list[Started] = []
        lost_events: list[PartLost] = []

        def on_event(event) -> None:
            if isinstance(event, Started):
                started.append(event)
            elif isinstance(event, PartLost):
                lost_events.append(event)

        def load() -> None:
            result["summary"] = run(
                LoadPlan(settings, OneClient(factory(f"{server}/work"))),
                records=path,
                subscribers=(on_event,),
                handle_signals=False,
            )

        thread = threading.Thread(target=load)
        thread.start()
        # Kill one second after the shared start (the gang's `Started` event).
        until(lambda: started, timeout_s=60, what="the gang's start")
        time.sleep(max(0.0, started[0].start_at + 1.0 - time.time()))
        os.kill(pids[victim], signal.SIGKILL)
        thread.join(timeout=60)
        assert not thread.is_alive()
        # The run leaves nothing on the scheduler (a long-lived one serves many runs): its
        # start variable has no value, its events are clear (Dask's public API).
        name = started[0].name
        with pytest.raises(TimeoutError):
            Variable(f"{name}-start", client=client).get(timeout=0.5)
        assert not any(
            Event(f"{name}-{e}", client=client).is_set() for e in ("go", "stop", "ready-0")
        )
    s = result["summary"]
    assert s.verdict == "INVALID" and "generator_lost" in s.reason_codes
    assert s.gang.partial is True
    lost = [g for g in s.gang.generators if g.lost]
    assert [g.worker for g in lost] == [victim]
    assert [e.index for e in lost_events] == [lost[0].index]
    kept = next(g for g in s.gang.generators if not g.lost)
    table = read_records(path)
    # 3 s at 200 req/s is 600 arrivals; the survivor sends every other one: all 300 kept.
    assert table.num_rows == s.count == kept.count == 300
    assert set(table["generator"].to_pylist()) == {kept.index}
    assert sorted(table["seq"].to_pylist()) == list(range(kept.index, 600, 2))
    (named,) = [r.args[0] for r in caplog.records if r.msg.startswith("Dask's own warnings")]
    dask_log = Path(named)
    try:
        assert "distributed.nanny WARNING: Restarting worker" in dask_log.read_text()
    finally:
        dask_log.unlink()
    # Not passed on to the root logger's handlers either (here pytest's, a terminal's else).
    assert not [r for r in caplog.records if "Restarting worker" in r.getMessage()]


def test_cli_scheduler_that_does_not_answer_is_one_line_exit_2(server, tmp_path):  # noqa: F811
    from typer.testing import CliRunner

    from servebench.cli import app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nobody listens there
    records = tmp_path / "r.parquet"
    result = CliRunner().invoke(
        app,
        [
            "load", "--url", f"{server}/work", "--rate", "10", "--count", "5",
            "--generators", "2", "--scheduler", f"tcp://127.0.0.1:{port}",
            "--records", str(records),
        ],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f":{port}" in lines[0]
    assert not records.exists()


if __name__ == "__main__":
    pytest.main([__file__])


GANG_SCENARIO = """\
name: gang
seed: 3
models:
  specs:
    - {layer_type: dense, depth: 1, width: 8, input_shape: [4], num_outputs: 3}
servers:
  - {name: triton, api: triton}
workload:
  rates: [150]
  requests: 300
  duration_s: 0.5
  warmup_s: 0.2
  generators: {count: 2}
"""


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_scenario_trial_runs_its_load_from_a_gang(tmp_path, triton_install, protocol):
    """`workload.generators` in a scenario, over Triton's HTTP and gRPC: the trial's
    records are the gang's union."""

    import pandas as pd
    import pyarrow.parquet as pq
    from scenario_checks import write

    from servebench.results import read_gang
    from servebench.scenario.runner import ScenarioRunner

    text = GANG_SCENARIO.replace("api: triton}", f"api: triton, protocol: {protocol}}}")
    outcome = ScenarioRunner(write(tmp_path, text), output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    run_dir = outcome.directory.path
    (row,) = pd.read_csv(run_dir / "trials.csv").itertuples()
    assert row.status == "ok" and row.generators == 2 and row.protocol == protocol
    records = pq.read_table(run_dir / "records.parquet").to_pandas()
    assert len(records) == row.count >= 300 and records.ok.all()
    assert sorted(records.seq) == sorted(set(records.seq))
    assert set(records.generator) == {0, 1}
    gang = read_gang(row.gang_json)  # the typed record, through its one reader
    assert gang is not None and gang.partial is False
    assert [g.count for g in gang.generators] == [
        int((records.generator == g).sum()) for g in (0, 1)
    ]


def test_ctrl_c_stops_a_scenario_gang_trial_with_its_records(tmp_path, triton_install):
    """SIGINT to `servebench scenario run` (its whole session, as a terminal's Ctrl-C)
    while a `workload.generators` trial of 120 s runs: the scenario runner stops the gang
    as it stops one engine, so the run ends `interrupted` at once (exit 130) and the
    trial keeps what both generators measured."""
    import json

    import pandas as pd
    import pyarrow.parquet as pq
    from scenario_checks import interrupted_run, write
    from server_checks import metrics_url, tritonservers, wait_for_measured_answers

    text = GANG_SCENARIO.replace("  requests: 300\n  duration_s: 0.5\n", "  duration_s: 120\n")
    results = tmp_path / "results"

    def measuring(run) -> None:
        (triton,) = tritonservers(tmp_path)
        wait_for_measured_answers(metrics_url(triton), warmup_requests=30)  # 0.2 s at 150/s

    process, output = interrupted_run(write(tmp_path, text), results, measuring)
    assert process.returncode == 130, output
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "interrupted" and "SIGINT" in meta["reason"]
    (row,) = pd.read_csv(run_dir / "trials.csv").itertuples()
    assert row.status == "interrupted" and row.verdict == "INVALID"
    assert "stopped_early" in row.verdict_reason_codes
    assert "stopped early: stopped by SIGINT" in row.verdict_reasons
    records = pq.read_table(run_dir / "records.parquet").to_pandas()
    assert 0 < len(records) == row.count < 150 * 120
    assert set(records.generator) == {0, 1}


def test_a_gang_cluster_serves_its_pages_on_a_free_loopback_port_not_8787():
    """Without a dashboard Dask's scheduler still serves health pages, by default on 8787:
    with that port taken (here by this test, in the suite by whatever holds it) every gang
    warned "Port 8787 is already in use". It must take a free loopback port instead."""
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", 8787))
            taken.listen()
        except OSError:  # already held by another process: taken all the same
            pass
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with local_cluster(1) as cluster:
                address, port = (
                    cluster.scheduler.http_server.address,
                    cluster.scheduler.http_server.port,
                )
    assert address == "127.0.0.1" and port != 8787
    assert not [w for w in caught if "8787" in str(w.message)]
