"""How fast is servebench's load generator next to Locust, hey and wrk? (issue 3)

Starts nginx (Debian package) on a free loopback port serving a fixed JSON answer, pinned
with taskset to one core; then runs each load tool pinned to another core, one after the
other, each with 64 keep-alive connections POSTing the same 100-byte JSON body for the same
time, and reports the sustained request rate of each (closed loop: as fast as the answers
come back), plus servebench's ratios to the others. Also runs servebench open loop at
2,000 req/s and reports its schedule lag (goal: p99 < 1 ms).

    .venv/bin/python benchmarks/loadgen_peers.py [--seconds 10] [--repeat 3] [--json out.json]

Tools that are missing are reported and skipped. A "bare aiohttp + uvloop" row (64 tasks
in a tight request loop, no scheduling, no records) shows what the HTTP library alone
allows, so the engine's own cost can be read off.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BODY = (
    b'{"inputs":[{"name":"input","shape":[1,4],"datatype":"FP32",'
    b'"data":[0.125,0.25,0.5,0.75]}],"id":"b1"}'
)
ANSWER = '{"outputs":[{"name":"output","shape":[1,2],"datatype":"FP32","data":[0.5,0.25]}]}'
CONNECTIONS = 64

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      default_type application/json;
      return 200 '{answer}';
    }}
  }}
}}
"""

LOCUSTFILE = """
from locust import FastHttpUser, constant, task

BODY = {body!r}


class Peer(FastHttpUser):
    wait_time = constant(0)

    @task
    def post(self):
        self.client.post("/", data=BODY, headers={{"Content-Type": "application/json"}})
"""

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def pinned(core: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv]


def run_tool(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if proc.returncode not in (0, 3):  # servebench exits 3 on an INVALID verdict
        raise RuntimeError(f"{argv[3]} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return proc.stdout


def requests_per_second(output: str) -> float:
    """hey and wrk both print a 'Requests/sec:' line."""
    for line in output.splitlines():
        if line.strip().startswith("Requests/sec:"):
            return float(line.split(":")[1])
    raise RuntimeError(f"no Requests/sec in output:\n{output[-800:]}")


def bench_wrk(url: str, core: int, seconds: int, tmp: Path) -> float:
    script = tmp / "post.lua"
    script.write_text(WRK_SCRIPT.format(body=json.dumps(BODY.decode())))
    out = run_tool(
        pinned(core, ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "-s", str(script), url]),
        seconds + 30,
    )
    return requests_per_second(out)


def bench_hey(url: str, core: int, seconds: int, tmp: Path) -> float:
    body = tmp / "body.json"
    body.write_bytes(BODY)
    argv = ["hey", "-z", f"{seconds}s", "-c", str(CONNECTIONS), "-cpus", "1", "-m", "POST"]
    argv += ["-T", "application/json", "-D", str(body), url]
    return requests_per_second(run_tool(pinned(core, argv), seconds + 30, {"GOMAXPROCS": "1"}))


def bench_locust(url: str, core: int, seconds: int, tmp: Path) -> float:
    locustfile = tmp / "locustfile.py"
    locustfile.write_text(LOCUSTFILE.format(body=BODY))
    prefix = tmp / "locust"
    port = str(free_port())  # a private master port: another Locust may run on this host
    argv = [
        str(Path(sys.executable).with_name("locust")),
        "-f",
        str(locustfile),
        "--headless",
        "--processes",
        "1",
        "-u",
        str(CONNECTIONS),
        "-r",
        "1000",
        "-t",
        f"{seconds + 1}s",
        "--host",
        url.rstrip("/"),
        "--csv",
        str(prefix),
        "--only-summary",
        "--reset-stats",
        "--loglevel",
        "WARNING",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        port,
        "--master-port",
        port,
    ]
    run_tool(pinned(core, argv), seconds + 60)
    with open(f"{prefix}_stats.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                if int(row["Failure Count"]):
                    raise RuntimeError(f"locust saw {row['Failure Count']} failures")
                return float(row["Requests/s"])
    raise RuntimeError("locust wrote no Aggregated row")


def servebench_load(
    url: str, core: int, args: list[str], seconds: float, tmp: Path, realtime: bool = False
) -> dict:
    body = tmp / "body.json"
    body.write_bytes(BODY)
    out = tmp / "summary.json"
    argv = [
        sys.executable,
        "-c",
        "from servebench.cli import main; main()",
        "load",
        "--url",
        url,
        "--body-file",
        str(body),
        "--connections",
        str(CONNECTIONS),
        "--json",
        str(out),
        *args,
    ]
    # SCHED_FIFO priority 1 shields the generator from other processes' time slices (the
    # kernel still reserves 5 % of each second for normal tasks), as on a dedicated host.
    realtime_prefix = ["chrt", "-f", "1"] if realtime else []
    run_tool([*realtime_prefix, *pinned(core, argv)], seconds + 60)
    return json.loads(out.read_text())


def bench_servebench(url: str, core: int, seconds: int, tmp: Path) -> float:
    args = ["--concurrency", str(CONNECTIONS), "--duration", str(seconds), "--warmup", "1"]
    summary = servebench_load(url, core, args, seconds + 1, tmp)
    if summary["errors"]:
        raise RuntimeError(f"servebench saw errors: {summary['errors_by_kind']}")
    return float(summary["throughput_rps"])


def bench_bare(url: str, core: int, seconds: int, tmp: Path) -> float:
    out = run_tool(
        pinned(core, [sys.executable, __file__, "--bare", url, str(seconds)]), seconds + 30
    )
    return float(out.strip().splitlines()[-1])


def bare_aiohttp(url: str, seconds: float) -> None:
    """64 tasks POSTing in a tight loop with aiohttp on uvloop: the library's own ceiling."""
    import asyncio

    import aiohttp
    import uvloop
    from aiohttp.payload import BytesPayload
    from yarl import URL

    async def main() -> None:
        target = URL(url)
        body = BytesPayload(BODY, content_type="application/json")
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=CONNECTIONS),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        ) as session:
            done = 0
            start = time.perf_counter()
            end = start + seconds

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    response = await session.request("POST", target, data=body)
                    await response.read()
                    done += 1

            await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
            print(done / (time.perf_counter() - start))

    uvloop.run(main())


def engine_alone() -> None:
    """The engine with a client that answers at once: its own ceiling, and its memory.

    Prints one JSON line: closed-loop requests/s and CPU per request next to a bare asyncio
    loop doing the same awaits; the open-loop rate it holds; RSS while it streams records.
    """
    import asyncio
    import resource

    import psutil

    from servebench.clients.base import InferResult, ModelSignature, Payload
    from servebench.load import LoadSettings, ParquetRecordWriter, constant, run_in_loop, run_load

    class Instant:
        async def connect(self) -> None:
            pass

        async def signature(self) -> ModelSignature:
            return ModelSignature("instant", (), ())

        def make_payload(self, batch_size: int, seed: int = 0) -> Payload:
            return Payload(batch_size, {}, b"x", 1)

        async def infer(self, payload: Payload) -> InferResult:
            await asyncio.sleep(0)  # one trip through the loop, like a real answer
            return InferResult(request_bytes=1, response_bytes=1)

        async def close(self) -> None:
            pass

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    async def bare(n: int) -> None:
        client, done = Instant(), 0
        payload = client.make_payload(1)

        async def worker() -> None:
            nonlocal done
            while done < n:
                done += 1
                await client.infer(payload)

        await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))

    out: dict[str, float] = {}
    n = 200_000
    c0, t0 = cpu(), time.perf_counter()
    run_in_loop(bare(n))
    out["bare_us"], out["bare_rps"] = (cpu() - c0) / n * 1e6, n / (time.perf_counter() - t0)
    c0, t0 = cpu(), time.perf_counter()
    s = run_in_loop(run_load(Instant(), LoadSettings(concurrency=CONNECTIONS, count=n)))
    out["closed_us"], out["closed_rps"] = (cpu() - c0) / n * 1e6, s.throughput_rps
    s = run_in_loop(run_load(Instant(), LoadSettings(arrivals=constant(20_000), duration=3)))
    out["open_rate"], out["open_late"] = s.achieved_rate, s.late_share
    out["open_lag_p99"] = s.schedule_lag_p99
    with tempfile.TemporaryDirectory() as tmp:
        writer = ParquetRecordWriter(Path(tmp) / "records.parquet")
        rss: list[float] = []

        async def sampled() -> None:
            async def sample() -> None:
                while True:
                    rss.append(psutil.Process().memory_info().rss / 2**20)
                    await asyncio.sleep(1.0)

            task = asyncio.create_task(sample())
            await run_load(
                Instant(), LoadSettings(arrivals=constant(20_000), duration=10), sink=writer
            )
            task.cancel()

        run_in_loop(sampled())
        writer.close()
        out["records"] = writer.rows
    out["rss_first"], out["rss_max"], out["rss_last"] = rss[1], max(rss[1:]), rss[-1]
    print(json.dumps(out))


def bench_engine(core: int) -> dict:
    argv = pinned(core, [sys.executable, __file__, "--engine"])
    return json.loads(run_tool(argv, 300).strip().splitlines()[-1])


TOOLS = {
    "servebench": bench_servebench,
    "bare aiohttp+uvloop": bench_bare,
    "Locust FastHttpUser": bench_locust,
    "hey": bench_hey,
    "wrk": bench_wrk,
}
NEEDS = {"Locust FastHttpUser": "locust", "hey": "hey", "wrk": "wrk"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="length of each run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tool (median reported)")
    parser.add_argument("--lag-rate", type=float, default=2000.0, help="open-loop rate for lag")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    for tool in ("nginx", "taskset"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            sys.exit(f"{tool} is missing: apt-get install nginx util-linux")
    cores = sorted(os.sched_getaffinity(0))
    server_core, client_core = (cores[0], cores[1]) if len(cores) > 1 else (cores[0], cores[0])
    available = {}
    for name, fn in TOOLS.items():
        need = NEEDS.get(name)
        exe = (
            Path(sys.executable).with_name("locust")
            if need == "locust"
            else shutil.which(need or "")
        )
        if need and not (exe and Path(exe).exists()):
            print(f"skipping {name}: {need} not installed")
            continue
        available[name] = fn

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    with tempfile.TemporaryDirectory(prefix="loadgen-peers-") as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=tmp, port=port, answer=ANSWER))
        server = subprocess.Popen(
            pinned(server_core, [nginx, "-c", str(conf), "-p", str(tmp)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for_port(port)
            url = f"http://127.0.0.1:{port}/"
            print(
                f"nginx on core {server_core}, clients on core {client_core}, "
                f"{CONNECTIONS} connections, {len(BODY)}-byte JSON POST, {args.seconds} s runs, "
                f"load average before: {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            rates: dict[str, list[float]] = {name: [] for name in available}
            lags: dict[str, list[dict]] = {"normal priority": []}
            if shutil.which("chrt") and os.geteuid() == 0:
                lags["real-time priority"] = []
            lag_args = ["--rate", f"{args.lag_rate:g}", "--duration", str(args.seconds)]
            for _ in range(args.repeat):
                for name, fn in available.items():  # round robin spreads machine noise
                    rate = fn(url, client_core, args.seconds, tmp)
                    rates[name].append(rate)
                    print(
                        f"  {name:<22} {rate:>10,.0f} req/s   (load {load_average()})", flush=True
                    )
                for priority, runs in lags.items():
                    lag = servebench_load(
                        url,
                        client_core,
                        [*lag_args, "--warmup", "1"],
                        args.seconds,
                        tmp,
                        realtime=priority != "normal priority",
                    )
                    runs.append(lag)
                    print(f"  open loop, {priority:<19} {describe_lag(lag)}", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=10)
    engine = bench_engine(client_core)
    report(rates, lags, engine, args)


def load_average() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def describe_lag(lag: dict) -> str:
    return (
        f"lag p99 {lag['schedule_lag_p99'] * 1e3:.3f} ms, {lag['late_share']:.2%} > 1 ms late, "
        f"achieved {lag['achieved_rate']:.1f} req/s, latency p50 {lag['latency_p50'] * 1e3:.3f} "
        f"p99 {lag['latency_p99'] * 1e3:.3f} ms   (load {load_average()})"
    )


def report(
    rates: dict[str, list[float]],
    lags: dict[str, list[dict]],
    engine: dict,
    args: argparse.Namespace,
) -> None:
    """Medians (what a typical run gives) and bests (noise only ever slows a tool down)."""
    median = {name: statistics.median(values) for name, values in rates.items() if values}
    best = {name: max(values) for name, values in rates.items() if values}
    print()
    print(f"{'tool':<24}{'median req/s':>14}{'best req/s':>12}{'servebench / tool':>28}")
    for name in median:
        ratio = ""
        if name != "servebench" and "servebench" in median:
            ratio = (
                f"{median['servebench'] / median[name]:.2f}x median, "
                f"{best['servebench'] / best[name]:.2f}x best"
            )
        print(f"{name:<24}{median[name]:>14,.0f}{best[name]:>12,.0f}{ratio:>28}")
    print()
    for priority, runs in lags.items():
        by_lag = sorted(runs, key=lambda lag: lag["schedule_lag_p99"])
        print(f"servebench open loop at {args.lag_rate:g} req/s, {priority}, {len(runs)} runs:")
        print(f"  median run: {describe_lag(by_lag[len(by_lag) // 2])}")
        print(f"  best run:   {describe_lag(by_lag[0])}")
    print("engine alone (a client that answers at once, no HTTP):")
    print(
        f"  closed loop, {CONNECTIONS} workers: {engine['closed_rps']:,.0f} req/s, "
        f"{engine['closed_us']:.2f} us CPU per request (a bare asyncio loop doing the same "
        f"awaits: {engine['bare_us']:.2f} us, {engine['bare_rps']:,.0f} req/s)"
    )
    print(
        f"  open loop at 20,000 req/s: achieved {engine['open_rate']:,.0f} req/s, "
        f"{engine['open_late']:.2%} > 1 ms late, lag p99 {engine['open_lag_p99'] * 1e3:.3f} ms"
    )
    print(
        f"  RSS while streaming {engine['records']:,} records to Parquet (20,000 req/s, 10 s): "
        f"{engine['rss_first']:.0f} MiB after 1 s, max {engine['rss_max']:.0f}, "
        f"last {engine['rss_last']:.0f}"
    )
    print(f"load average at the end: {load_average()}")
    if args.json:
        results = {"rates": rates, "median": median, "best": best, "lag": lags, "engine": engine}
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--bare":
        bare_aiohttp(sys.argv[2], float(sys.argv[3]))
    elif sys.argv[1:] == ["--engine"]:
        engine_alone()
    else:
        main()
