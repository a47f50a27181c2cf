"""A gang's live figures (its generators' merged latency sketches) and its graceful stop
(issue 24), on a real Dask LocalCluster against real HTTP servers in other processes.

What is checked: the sketch merge is the sketch of all samples; the live callback comes
during the run with growing counts; the last figures hold every record and their
percentiles are within the sketch's relative accuracy of the records' own (plus one rank:
the sketch ranks q(n-1), the records' nearest rank is ceil(qn)); a stop from a caller, or
SIGINT at the terminal (to the whole process group, as Ctrl-C is), keeps every record
measured, and the summary says the run stopped early. No timing is asserted.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

import loads
import numpy as np
import pytest
from conftest import until
from server_checks import StubHandler, http_stub
from test_load_http import factory, server  # noqa: F401  (server is a fixture)

from servebench.load import LoadControl, LoadSettings, Progress, constant, read_records
from servebench.load.live import (
    RELATIVE_ACCURACY,
    LiveRate,
    MergedCounts,
    PartCounts,
    decode,
    new_sketch,
)
from servebench.load.stats import Columns

BODY = b'{"outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[0.5,0.25]}]}'


def _columns(latency: np.ndarray, ok: np.ndarray) -> Columns:
    zeros = np.zeros(latency.size, np.float32)
    code = np.where(ok, 0, 1).astype(np.int8)
    return Columns(latency.astype(np.float32), zeros, zeros, zeros, code, zeros.astype(np.int32))


def test_merged_part_counts_are_the_sketch_of_all_samples():
    """Two parts' counts (each fed by batches, through its protobuf encoding) merged give
    the very bins, so the very quantiles, of one sketch fed every sample singly."""
    rng = np.random.default_rng(3)
    latency = rng.lognormal(-6, 1.5, 20_000).astype(np.float32)
    ok = rng.random(latency.size) > 0.05
    whole = new_sketch()
    for value in latency[ok].astype(np.float64).tolist():
        whole.add(value)
    snapshots = []
    for index, part in enumerate((slice(0, 12_345), slice(12_345, None))):
        counts = PartCounts()
        for chunk in np.array_split(np.arange(latency.size)[part], 7):
            counts.add(_columns(latency[chunk], ok[chunk]))
        snapshot = counts.snapshot(in_flight=index, watermark=1.0)
        assert decode(snapshot["sketch"]).count == ok[part].sum()
        snapshots.append(snapshot)
    live = LiveRate()
    figures = live.figures(MergedCounts(snapshots, [False, False]), elapsed=2.0)
    assert figures.completed == latency.size and figures.errors == (~ok).sum()
    assert figures.sent == latency.size + 1
    assert figures.by_generator == (12_345, latency.size - 12_345)
    assert figures.rate == 0.0  # no earlier figures to take a rate from
    for q, value in ((0.5, figures.p50), (0.9, figures.p90), (0.99, figures.p99)):
        assert value == whole.get_quantile_value(q)
        exact = np.quantile(latency[ok], q, method="lower")
        assert abs(value - exact) <= RELATIVE_ACCURACY * exact
    merged = MergedCounts(snapshots, [False, False])
    assert live.figures(merged, elapsed=4.0).rate == 0.0  # nothing more completed


def test_live_figures_come_during_the_run_and_a_stop_keeps_every_record(server, tmp_path):  # noqa: F811
    """A gang with `on_progress`, stopped (as the scenario runner's Ctrl-C does, through
    its `LoadControl`) from a subscriber once it has shown requests: the figures grew during
    the run, the last ones hold every record, and nothing measured is lost."""
    path = tmp_path / "records.parquet"
    figures = []
    control = LoadControl()

    def on_progress(event):
        if not isinstance(event, Progress):
            return
        figures.append(event.figures)
        if sum(1 for g in figures if g.completed) == 3:
            threading.Thread(target=control.stop, args=("stopped by the test",)).start()

    settings = LoadSettings(arrivals=constant(100), duration=120.0, generators=2)
    s = loads.load(
        factory(f"{server}/work"),
        settings,
        records=path,
        control=control,
        subscribers=(on_progress,),
        live=True,
    )
    table = read_records(path)
    assert 0 < s.count == table.num_rows < 100 * 120
    assert s.verdict == "INVALID" and "stopped_early" in s.reason_codes
    assert "stopped early: stopped by the test" in s.reasons
    completed = [f.completed for f in figures]
    assert completed == sorted(completed) and len(set(completed)) >= 3
    last = figures[-1]
    assert last.completed == s.count and last.errors == s.errors == 0
    assert sum(last.by_generator) == s.count and all(last.by_generator)
    generator = table["generator"].to_numpy()
    assert list(last.by_generator) == [int((generator == g).sum()) for g in (0, 1)]
    latency = np.sort(table["latency"].to_numpy())
    n = latency.size
    for q, value in ((0.5, last.p50), (0.99, last.p99)):
        lo, hi = sorted((math.floor(q * (n - 1)), math.ceil(q * n) - 1))
        assert latency[lo] * (1 - RELATIVE_ACCURACY) <= value
        assert value <= latency[hi] * (1 + RELATIVE_ACCURACY)


class _Counting(StubHandler):
    """Answers every POST as a model would (keep-alive, as the load's clients expect), and
    GET with how many POSTs it has answered."""

    protocol_version = "HTTP/1.1"
    served = 0

    def do_POST(self) -> None:
        self.read_body()
        type(self).served += 1
        self.reply(200, BODY, "application/json")

    def do_GET(self) -> None:
        self.reply(200, str(type(self).served).encode())

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # a generator's reset at its end
            super().handle()


@pytest.fixture
def counting_server():
    _Counting.served = 0
    with http_stub(_Counting) as url:
        yield url


def _served(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as answer:
        return int(answer.read())


def _running(proc: subprocess.Popen, output: Callable[[], str]) -> bool:
    assert proc.poll() is None, f"the command exited ({proc.returncode}):\n{output()}"
    return True


@pytest.mark.parametrize(
    ("stop", "generators"),
    [(signal.SIGINT, 2), (signal.SIGTERM, 2), (signal.SIGINT, 1)],
    ids=["SIGINT-gang", "SIGTERM-gang", "SIGINT-one-process"],
)
def test_a_signal_stops_a_cli_load_and_keeps_what_it_measured(
    counting_server, tmp_path, stop, generators
):
    """SIGINT or SIGTERM to the process group of `servebench load --generators 2` (what
    Ctrl-C at a terminal sends, and systemd's stop: the gang's worker processes included;
    SIGTERM killed them, and their records, before they ignored it) once requests flow,
    and the same to one process (one signal policy for both executors): the exit status
    and verdict of an interrupted run, every request measured in records.parquet and the
    summary, and none of Dask's own messages."""
    records, summary = tmp_path / "records.parquet", tmp_path / "summary.json"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "servebench.cli", "load", "--url", f"{counting_server}/work",
            "--rate", "50", "--duration", "120", "--generators", str(generators),
            "--metrics-url", "", "--records", str(records), "--json", str(summary),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        until(
            lambda: _running(proc, proc.stdout.read) and _served(counting_server) >= 100,
            120,
            "requests",
        )
        os.killpg(proc.pid, stop)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 3, output
    document = json.loads(summary.read_text())
    assert document["verdict"] == "INVALID" and "stopped_early" in document["reason_codes"]
    assert f"stopped early: interrupted by {stop.name}" in document["reasons"]
    table = read_records(records)
    assert 0 < table.num_rows == document["count"] < 50 * 120
    if generators > 1:
        assert document["gang"]["partial"] is False  # no generator was killed with it
        assert set(table["generator"].to_pylist()) == {0, 1}
    assert f"interrupted by {stop.name}" in output
    assert "distributed." not in output and "Traceback" not in output


def test_a_terminal_shows_the_gang_live_then_the_summary(counting_server, tmp_path):
    """On a terminal (a pty here) `servebench load --generators 2` shows the live line,
    with the sketch's accuracy, while requests flow; after a Ctrl-C the table of the
    records follows, and says the run was interrupted."""
    records = tmp_path / "records.parquet"
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "servebench.cli", "load", "--url", f"{counting_server}/work",
            "--rate", "50", "--duration", "120", "--generators", "2", "--metrics-url", "",
            "--records", str(records),
        ],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "200"},
        start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    chunks: list[bytes] = []

    def shown() -> str:  # the text, without the terminal's colours and cursor moves
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))

    def read() -> None:  # drain the terminal, or the command blocks on it
        with contextlib.suppress(OSError):  # EIO once the command has closed it
            while data := os.read(leader, 65536):
                chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        flowing = r"[1-9][\d,]* requests, 0 failures"
        until(lambda: _running(proc, shown) and re.search(flowing, shown()), 120, "a live line")
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=10)
        os.close(leader)
    output = shown()
    assert proc.returncode == 3, output
    assert re.search(r"live, ±1 %: \d+ s, [\d,]+ requests, 0 failures, .* by generator", output)
    count = int(re.search(r"requests \(ok / errors\)\D+(\d+) \(", output).group(1))
    assert 0 < count == read_records(records).num_rows
    assert "stopped early: interrupted by SIGINT" in output
