"""LoadGen's Server scenario beside `servebench load --poisson`, on the same local Triton model.

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_reference.py
        [--rates 200 500] [--duration 25] [--repeats 3] [--slo-ms 20] [--untraced]
        [--loop uvloop|asyncio] [--out DIR]

One small dense model is exported and served by the local tritonserver (as
benchmarks/clients_cpu.py does); then, at each Poisson rate, the same load is issued by two
engines, alternating which goes first over the repeats:

- LoadGen (mlcommons-loadgen, its C++ engine) in its Server scenario, performance mode: its
  issue thread schedules Poisson arrivals at `server_target_qps` for `min_duration_ms`
  and calls our SUT's `issue_queries`, which hands each query to an event loop (uvloop,
  as `servebench load` runs on) in a second thread where servebench's own client (clients.factory.create_client, the
  triton-http client `servebench load` uses) sends it; each answer calls
  `QuerySamplesComplete`. The QSL is 1,024 random samples (each a payload the client
  encoded once). LoadGen's p50/p90/p99, rates, early-stopping verdict and VALID/INVALID are
  read from its mlperf_log_summary.txt; its per-sample latencies and issue delays from its
  trace (mlperf_log_trace.json), so that its percentiles get the same confidence bounds
  as servebench's and its latency can be split into its parts.
- `servebench load --poisson --rate R --duration D --json --records` (the CLI, its own
  process), whose records give servebench's percentiles, their bounds
  (common.quantiles.percentile_bounds) and its decision at the same latency target
  (common.quantiles.decides), at servebench's default two-sided 95 % and at LoadGen's
  one-sided 99 % (two-sided 98 %), so that the two verdicts can be compared on one level.

Figures are medians over the repeats. Where a percentile's intervals from the two tools
do not overlap in a repeat, the table counts it ("disjoint"); the split of LoadGen's
latency per sample (its issue delay, pybind11 taking the GIL into our callback and out of
QuerySamplesComplete, our callback → coroutine hand-off, the request) and of
servebench's (schedule lag, send → answer) says where the difference comes from. Each side's CPU is sampled twice a second (loadgen_peers.run_tool's
method: cores used between 40 % and 90 % of the run): the servebench process, LoadGen's
process split into the client's loop thread and LoadGen's own threads, and the server.
`--untraced` adds a LoadGen run without its trace (LoadGen's default) to each repeat, to
show what the trace costs; its figures are LoadGen's printed ones, without bounds. The
machine's load average is printed as it goes. Nothing here is an MLPerf result: no
accuracy run, no audit, no submission rules.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlperf_loadgen as lg
import numpy as np
import psutil
import pyarrow.parquet as pq
import uvloop
from loadgen_peers import LAST_CPU_SHARE, LAST_SERVER_SHARE, SERVER_PID, cpu_share, run_tool

from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.clients.base import InferenceError, Payload
from servebench.clients.factory import create_client
from servebench.clients.payloads import random_payload
from servebench.common.background import BackgroundThread
from servebench.common.quantiles import decides, percentile, percentile_bounds
from servebench.servers.kinds import create_server

PROTOCOL = "triton-http"
SAMPLES = 1024  # the QSL: random payloads, each encoded once
QUANTILES = (50.0, 90.0, 99.0)
SLO_PERCENTILE = 99.0
LEVEL = 0.95  # servebench's default two-sided level
# LoadGen's early stopping: one-sided 99 % (early_stopping.cc, confidence 0.99), which is
# the upper side of a two-sided 98 % interval.
LOADGEN_LEVEL = 0.98
TIMEOUT_S = 10.0


@dataclass
class Measured:
    """One tool's figures for one run at one rate."""

    tool: str
    latencies: np.ndarray  # seconds, one per answered request
    sent_rate: float  # requests issued per second
    done_rate: float  # answers per second
    verdict: str  # the tool's own VALID/INVALID
    early_stop: str  # LoadGen: its early-stopping line; servebench: decides' answer
    parts: dict[str, np.ndarray] = field(default_factory=dict)  # latency split, seconds
    cpu: dict[str, float] = field(default_factory=dict)  # cores used, steady middle of the run
    errors: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


# -- LoadGen as the issuing engine -----------------------------------------------------


class LoopSut:
    """A LoadGen SUT that sends each query with servebench's client on an asyncio loop in
    its own thread; LoadGen's issue thread only hands the queries over."""

    def __init__(self, url: str, model: str, seed: int, loop: str) -> None:
        # uvloop is what `servebench load` runs on (load.in_process picks it when installed);
        # `--loop asyncio` shows what the plain asyncio loop changes.
        self.loop = uvloop.new_event_loop() if loop == "uvloop" else asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        # The client's own timeout (one asyncio.timeout inside the call): no extra task per
        # request, as `servebench load`'s engine adds none (asyncio.wait_for would, and
        # costs its loop hops in every latency).
        self.client = create_client(PROTOCOL, url, model, transport="auto", timeout=TIMEOUT_S)
        self.payloads: list[Payload] = self._run(self._connect(seed))
        # per answered query: LoadGen's sample sequence number, its QSL index, then
        # callback entry, coroutine start, answer (then QuerySamplesComplete), the return
        # from QuerySamplesComplete (ns)
        self.times: list[tuple[int, ...]] = []
        self.issued = 0  # samples handed over so far: the next one's sample_seq
        self.errors = 0
        self.tasks: set[asyncio.Task] = set()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def _connect(self, seed: int) -> list[Payload]:
        await self.client.connect()
        signature = await self.client.signature()
        return [
            random_payload(self.client.encode, signature, 1, seed * SAMPLES + i)
            for i in range(SAMPLES)
        ]

    def issue_queries(self, samples: list[Any]) -> None:
        """LoadGen's callback (its issue thread, holding the GIL): hand over, return."""
        entered = time.perf_counter_ns()
        queries = [(self.issued + i, s.id, s.index) for i, s in enumerate(samples)]
        self.issued += len(samples)
        self.loop.call_soon_threadsafe(self._start, queries, entered)

    def _start(self, queries: list[tuple[int, int, int]], entered: int) -> None:
        for seq, query_id, index in queries:
            task = self.loop.create_task(self._send(seq, query_id, index, entered))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _send(self, seq: int, query_id: int, index: int, entered: int) -> None:
        started = time.perf_counter_ns()
        try:
            await self.client.infer(self.payloads[index])
        except InferenceError:
            self.errors += 1  # LoadGen has no failed answer: it still needs the completion
        answered = time.perf_counter_ns()
        lg.QuerySamplesComplete([lg.QuerySampleResponse(query_id, 0, 0)])
        self.times.append((seq, index, entered, started, answered, time.perf_counter_ns()))

    def flush_queries(self) -> None:
        """Nothing is batched on our side, so there is nothing to flush."""

    def close(self) -> None:
        self._run(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class CpuSampler(BackgroundThread):
    """This process's CPU time twice a second, split into the client's loop thread and
    every other thread (LoadGen's issue, response and logging threads, the main thread
    in StartTest), and the server's; `shares()` gives each as cores used between 40 %
    and 90 % of the run (loadgen_peers.cpu_share, as the servebench run is measured)."""

    def __init__(self, loop_thread: int) -> None:
        super().__init__("cpu-sampler")
        self.loop_thread = loop_thread
        self.samples: dict[str, list[tuple[float, float]]] = {
            "client loop thread": [], "LoadGen's threads": [], "server": []
        }  # fmt: skip

    def run(self) -> None:
        me = psutil.Process()
        server = psutil.Process(SERVER_PID[0])
        sampler = threading.get_native_id()
        while not self.stop.wait(0.5):
            now = time.perf_counter()
            threads = {t.id: t.user_time + t.system_time for t in me.threads()}
            loop = threads.pop(self.loop_thread, 0.0)
            threads.pop(sampler, None)
            self.samples["client loop thread"].append((now, loop))
            self.samples["LoadGen's threads"].append((now, sum(threads.values())))
            tree = [server, *server.children()]
            self.samples["server"].append((now, sum(sum(p.cpu_times()[:2]) for p in tree)))

    def shares(self) -> dict[str, float]:
        return {name: cpu_share(samples) for name, samples in self.samples.items()}


def run_loadgen(
    url: str,
    model: str,
    rate: float,
    duration: float,
    slo_s: float,
    seed: int,
    out: Path,
    *,
    trace: bool = True,
    loop: str = "uvloop",
) -> Measured:
    """One LoadGen Server-scenario run; its logs go to `out`. Without `trace` (LoadGen's
    default) there are no per-sample figures, only its summary's."""
    out.mkdir(parents=True, exist_ok=True)
    sut_impl = LoopSut(url, model, seed, loop)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = rate
    settings.server_target_latency_ns = round(slo_s * 1e9)
    settings.server_target_latency_percentile = SLO_PERCENTILE / 100
    settings.min_duration_ms = round(duration * 1000)
    settings.min_query_count = 100  # the duration is what ends the run at these rates
    settings.schedule_rng_seed = seed + 1
    settings.sample_index_rng_seed = seed + 2
    settings.qsl_rng_seed = seed + 3
    log = lg.LogSettings()
    log.log_output.outdir = str(out)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = trace  # per-sample latencies and issue delays
    sut = lg.ConstructSUT(sut_impl.issue_queries, sut_impl.flush_queries)
    qsl = lg.ConstructQSL(SAMPLES, SAMPLES, lambda _: None, lambda _: None)
    try:
        with CpuSampler(sut_impl.thread.native_id) as cpu:
            lg.StartTestWithLogSettings(sut, qsl, settings, log)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        sut_impl.close()
    summary = parse_summary((out / "mlperf_log_summary.txt").read_text())
    printed = {k.split()[0]: int(v) / 1e9 for k, v in summary.items() if "percentile latency" in k}
    if not trace:
        return Measured(
            tool="LoadGen untraced",
            latencies=np.array([]),
            sent_rate=float(summary["Scheduled samples per second"]),
            done_rate=float(summary["Completed samples per second"]),
            verdict=_loadgen_verdict(summary),
            early_stop=_early_stop(summary["early_stopping"]),
            cpu=cpu.shares(),
            errors=sut_impl.errors,
            extra={"printed": printed},
        )
    trace = trace_samples(out / "mlperf_log_trace.json")
    ours = np.asarray(sut_impl.times, dtype=np.int64).reshape(-1, 6)
    ours = ours[np.argsort(ours[:, 0])]
    # Our per-sample times line up with LoadGen's by sample_seq (one issue thread hands
    # samples over in sequence order); the QSL index of each confirms the match.
    if len(ours) != len(trace) or not np.array_equal(ours[:, :2], trace[:, :2]):
        raise SystemExit(f"{out}: LoadGen's trace and the SUT's samples do not line up")
    latency, issue = trace[:, 3], trace[:, 2]
    entered, started, answered, completed = ours[:, 2:6].T
    return Measured(
        tool="LoadGen",
        latencies=latency / 1e9,
        sent_rate=float(summary["Scheduled samples per second"]),
        done_rate=float(summary["Completed samples per second"]),
        verdict=_loadgen_verdict(summary),
        early_stop=_early_stop(summary["early_stopping"]),
        parts={
            "issue delay": issue / 1e9,
            # IssueQuery → our callback's first line, plus QuerySamplesComplete's entry
            # until LoadGen stamps the completion: pybind11 taking the GIL and converting
            "GIL + pybind11": ((latency - issue) - (answered - entered)) / 1e9,
            "hand-off to loop": (started - entered) / 1e9,
            "request": (answered - started) / 1e9,
            # not in this sample's latency, but the loop thread is held for it
            "(complete call)": (completed - answered) / 1e9,
        },
        cpu=cpu.shares(),
        errors=sut_impl.errors,
        extra={"printed": printed},
    )


_CONSTRAINTS = (
    "Performance constraints satisfied",
    "Min duration satisfied",
    "Min queries satisfied",
    "Early stopping satisfied",
)


def _loadgen_verdict(summary: dict[str, str]) -> str:
    """LoadGen's VALID/INVALID with the constraints it found unmet."""
    unmet = [c.removesuffix(" satisfied") for c in _CONSTRAINTS if summary.get(c) == "NO"]
    return summary["Result is"] + (f" ({', '.join(unmet)} not met)" if unmet else "")


def _early_stop(result: str) -> str:
    """LoadGen's early-stopping paragraph in a few words."""
    more = re.search(r"at least (\d+) more", result)
    if more:
        return f"unsuccessful: {more.group(1)} more queries needed"
    return "successful" if "Run successful" in result else result


_LINE = re.compile(r"^\s*([^:*][^:]*?)\s*:\s*(.+?)\s*$")


def parse_summary(text: str) -> dict[str, str]:
    """mlperf_log_summary.txt's `key : value` lines, and the early-stopping result (the
    `* ...` lines under "Early Stopping Result:") as `early_stopping`."""
    fields: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Early Stopping Result:":
            result = []
            for following in lines[i + 1 :]:
                if not following.strip() or following.startswith("="):
                    break
                result.append(following.strip().lstrip("* ").strip())
            fields["early_stopping"] = " ".join(result)
            continue
        match = _LINE.match(line)
        if match:
            fields.setdefault(match.group(1), match.group(2))
    return fields


_SAMPLE = re.compile(
    r'"sample_seq"\s*:\s*(\d+).*?"sample_idx"\s*:\s*(\d+).*?'
    r'"issue_start_ns"\s*:\s*(\d+).*?"complete_ns"\s*:\s*(\d+)'
)


def trace_samples(path: Path) -> np.ndarray:
    """Each sample's (sample_seq, QSL index, issue delay ns, latency ns) from LoadGen's
    trace, in sequence order: the "Sample" events' `issue_start_ns` (scheduled time → the
    SUT's IssueQuery call) and `complete_ns` (scheduled time → QuerySamplesComplete,
    LoadGen's latency)."""
    rows = []
    for line in path.read_text().splitlines():
        if '"Sample"' in line:
            match = _SAMPLE.search(line)
            if match:
                rows.append([int(g) for g in match.groups()])
    table = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    return table[np.argsort(table[:, 0])]


# -- servebench load -------------------------------------------------------------------


def run_servebench(
    url: str, model: str, rate: float, duration: float, slo_s: float, seed: int, out: Path
) -> Measured:
    """One `servebench load --poisson` run (the CLI, in its own process)."""
    out.mkdir(parents=True, exist_ok=True)
    summary_path, records_path = out / "summary.json", out / "records.parquet"
    command = [
        sys.executable, "-m", "servebench.cli", "load", "--url", url, "--model", model,
        "--protocol", PROTOCOL, "--rate", str(rate), "--poisson", "--seed", str(seed),
        "--duration", str(duration), "--metrics-url", "",
        "--json", str(summary_path), "--records", str(records_path),
    ]  # fmt: skip
    run_tool(command, timeout=4 * duration + 120)  # samples its CPU and the server's
    summary = json.loads(summary_path.read_text())
    records = pq.read_table(records_path).to_pandas()
    answered = records[records["ok"]]
    latencies = answered["latency"].to_numpy()
    under = int((latencies <= slo_s).sum())
    decision = decides(len(latencies), under, SLO_PERCENTILE, LEVEL) or "undecided"
    strict = decides(len(latencies), under, SLO_PERCENTILE, LOADGEN_LEVEL) or "undecided"
    return Measured(
        tool="servebench",
        latencies=latencies,
        sent_rate=float(summary["achieved_rate"]),
        done_rate=float(summary["throughput_rps"]),
        verdict=summary["verdict"] + "".join(f" ({r})" for r in summary.get("reasons", [])),
        early_stop=f"{decision} at 95 %, {strict} at one-sided 99 %",
        parts={
            "schedule lag": (answered["send_time"] - answered["intended_time"]).to_numpy(),
            "send to answer": (answered["completion_time"] - answered["send_time"]).to_numpy(),
        },
        cpu={"generator process": LAST_CPU_SHARE[0], "server": LAST_SERVER_SHARE[0]},
        errors=int((~records["ok"]).sum()),
    )


# -- the comparison --------------------------------------------------------------------


def _ms(seconds: float) -> str:
    """Milliseconds; "n/a" for a bound too few requests give (NaN)."""
    return "   n/a" if np.isnan(seconds) else f"{seconds * 1e3:6.2f}"


def _bounded(values: np.ndarray, q: float) -> tuple[float, float, float]:
    low, high = percentile_bounds(values, q, LEVEL)
    return percentile(values, q), float(low), float(high)


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def report(rate: float, runs: list[Measured], slo_s: float) -> None:
    """Medians over the repeats per tool, the disjoint intervals, the latency split and
    the CPU each side used."""
    print(f"\n== {rate:g} req/s Poisson, SLO p{SLO_PERCENTILE:g} <= {slo_s * 1e3:g} ms ==")
    head = "  ".join(f"{f'p{q:g} ms (95 % CI)':>22}" for q in QUANTILES)
    print(f"{'tool':16} {'sent/s':>7} {'done/s':>7}  {head}  {'errors':>6}")
    tools = sorted({r.tool for r in runs})
    for tool in tools:
        mine = [r for r in runs if r.tool == tool]
        cells = []
        for q in QUANTILES:
            if mine[0].latencies.size:
                figures = np.array([_bounded(r.latencies, q) for r in mine])
                mid, low, high = np.median(figures, axis=0)
                cells.append(f"{_ms(mid)} ({_ms(low).strip()}-{_ms(high).strip()})".rjust(22))
            else:  # untraced: LoadGen's printed figure, no per-sample latencies to bound it
                mid = statistics.median(r.extra["printed"][f"{q:.2f}"] for r in mine)
                cells.append(f"{_ms(mid)} (no CI)".rjust(22))
        sent = statistics.median(r.sent_rate for r in mine)
        done = statistics.median(r.done_rate for r in mine)
        errors = sum(r.errors for r in mine)
        print(f"{tool:16} {sent:7.1f} {done:7.1f}  {'  '.join(cells)}  {errors:6d}")
    print(f"  verdicts; early stopping (LoadGen) or decision (servebench) at p{SLO_PERCENTILE:g}:")
    for r in runs:
        print(f"    repeat {r.extra['repeat']} {r.tool:16} {r.verdict}; {r.early_stop}")
    by_repeat: dict[int, dict[str, Measured]] = {}
    for r in runs:
        by_repeat.setdefault(r.extra["repeat"], {})[r.tool] = r
    for q in QUANTILES:
        disjoint = 0
        for pair in by_repeat.values():
            (_, a_low, a_high), (_, b_low, b_high) = (
                _bounded(pair[tool].latencies, q) for tool in ("LoadGen", "servebench")
            )
            disjoint += bool(a_high < b_low or b_high < a_low)
        print(f"  p{q:g}: LoadGen's and servebench's intervals disjoint in {disjoint} of "
              f"{len(by_repeat)} repeats")  # fmt: skip
    print("  latency split, ms (median over repeats of each part's p50 / p99):")
    for tool in tools:
        mine = [r for r in runs if r.tool == tool]
        for part in mine[0].parts:
            p50 = statistics.median(percentile(r.parts[part], 50) for r in mine)
            p99 = statistics.median(percentile(r.parts[part], 99) for r in mine)
            print(f"    {tool:16} {part:20} {_ms(p50)} / {_ms(p99)}")
    print("  CPU, cores (median over repeats, steady middle of each run):")
    for tool in tools:
        mine = [r for r in runs if r.tool == tool]
        shares = ", ".join(
            f"{name} {statistics.median(r.cpu[name] for r in mine):.2f}" for name in mine[0].cpu
        )
        print(f"    {tool:16} {shares}")
    for r in runs:
        if r.tool.startswith("LoadGen"):
            printed = ", ".join(f"p{k}: {v * 1e3:.2f}" for k, v in r.extra["printed"].items())
            print(f"    {r.tool}'s own summary, repeat {r.extra['repeat']} (ms): {printed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[200.0, 500.0])
    parser.add_argument("--duration", type=float, default=25.0, help="seconds per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slo-ms", type=float, default=20.0, help="latency target at p99")
    parser.add_argument(
        "--untraced",
        action="store_true",
        help="also run LoadGen without its trace (its default) each repeat: what the trace costs",
    )
    parser.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="the LoadGen SUT's event loop (servebench load runs on uvloop)",
    )
    parser.add_argument("--out", type=Path, help="work folder (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servebench-loadgen-"))
    slo_s = args.slo_ms / 1e3

    spec = ModelSpec(layer_type="dense", depth=2, width=64, input_shape=(128,), num_outputs=10)
    export = export_triton(build_torch(spec, seed=0), spec, out, TritonSettings(max_batch_size=8))
    print(f"load average before: {_loadavg()} ({os.cpu_count()} cores)", flush=True)
    served = create_server(
        "triton-local", model_repository=out / PYTHON_REPOSITORY, load_models=[export.name]
    )
    traced = functools.partial(run_loadgen, loop=args.loop)
    untraced = functools.partial(run_loadgen, trace=False, loop=args.loop)
    with served as server:
        SERVER_PID[:] = [server.pid]
        url = server.endpoints.http_url
        run_servebench(url, export.name, args.rates[0], 3.0, slo_s, 0, out / "warmup")
        for rate in args.rates:
            runs: list[Measured] = []
            for repeat in range(args.repeats):
                tools = [traced, run_servebench, *([untraced] if args.untraced else [])]
                if repeat % 2:
                    tools.reverse()
                for number, tool in enumerate(tools):
                    where = out / f"r{rate:g}" / f"{repeat}-{number}"
                    measured = tool(url, export.name, rate, args.duration, slo_s, repeat, where)
                    measured.extra["repeat"] = repeat
                    runs.append(measured)
                    print(
                        f"  {rate:g} req/s repeat {repeat} {measured.tool}: "
                        f"{measured.done_rate:.1f} answers/s; load {_loadavg()}",
                        flush=True,
                    )
            report(rate, runs, slo_s)
    print(f"\nload average after: {_loadavg()}; logs and records under {out}")


if __name__ == "__main__":
    main()
