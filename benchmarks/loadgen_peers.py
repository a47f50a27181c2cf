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
allows, so the engine's own cost can be read off; "servebench (aiohttp)" is servebench
before issue 16 (`--transport aiohttp`), "servebench" its default lean transport.

Issue 16 adds rows per inference protocol: nginx also answers as a Triton model (v2
metadata, config, ready, and an infer answer in the binary tensor extension: a JSON header
and a raw FP32 tensor) and as a TF Serving model (status, metadata, a predict answer), so
`servebench load --protocol triton-http|tfs-rest` runs its real codec (request encoded
once, every answer decoded and its shape and dtype checked) against a server that costs
almost nothing; hey POSTs the same request bytes to the same path. And a gang row:
`--generators 2` (issue 24: a Dask LocalCluster of two generator processes, the 64
connections split between them), both on the client core (two cores cannot show scale-out).

And gRPC rows: the same nginx answers Triton's and TF Serving's gRPC methods over HTTP/2
(`grpc_answers.py`: each answer serialized once, behind the `grpc-status` trailer), so
`--protocol triton-grpc|tfs-grpc` runs its real codec (on the lean HTTP/2 transport, and
on grpcio with `--transport grpcio`) against a server that costs little; h2load (nghttp2,
C) sends the same framed request bytes on one connection with 64 streams, and the "bare"
rows are 64 coroutines calling one connection with those bytes in a tight loop (no
engine, no records, answers parsed but not checked): each library's own ceiling (lean,
grpc.aio, and the h2 library's state machine). The server's CPU is sampled during every
row and reported.

Each tool's CPU time is sampled while it runs (the process and its children); "per core"
divides its rate by the share of a core it used in the steady middle of its run, which
keeps ratios meaningful on a machine that other work shares (it also reports `uptime`).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import functools
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc_answers

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
{locations}
  }}
{grpc_server}
}}
"""

# The model the protocol rows serve: one FP32 input of 4 and one FP32 output of 4 per row.
MODEL = "m"
# The answer tensor's 16 raw bytes: printable ASCII, so that nginx's `return` can hold
# them, and still a valid FP32 tensor of 4 values (about 12.1, 13.2, 14.3, 15.4 ... no
# NaN or Inf): Triton's binary answer is a JSON header followed by exactly such bytes.
TENSOR = b"ABCDEFGHIJKLMNOP"
TRITON_HEADER = json.dumps(
    {
        "model_name": MODEL,
        "model_version": "1",
        "outputs": [
            {
                "name": "output",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {"binary_data_size": len(TENSOR)},
            }
        ],
    },
    separators=(",", ":"),
)
TRITON_TENSOR = [{"name": n, "datatype": "FP32", "shape": [-1, 4]} for n in ("input", "output")]
TRITON_DOCUMENTS = {
    f"/v2/models/{MODEL}": {
        "name": MODEL,
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": TRITON_TENSOR[:1],
        "outputs": TRITON_TENSOR[1:],
    },
    f"/v2/models/{MODEL}/config": {"name": MODEL, "max_batch_size": 8},
    f"/v2/models/{MODEL}/ready": {},
}
TFS_TENSOR = {"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": "-1"}, {"size": "4"}]}}
TFS_DOCUMENTS = {
    f"/v1/models/{MODEL}": {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK"}}
        ]
    },
    f"/v1/models/{MODEL}/metadata": {
        "model_spec": {"name": MODEL, "version": "1"},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": {"input": TFS_TENSOR},
                        "outputs": {"output": TFS_TENSOR},
                        "method_name": "tensorflow/serving/predict",
                    }
                }
            }
        },
    },
    f"/v1/models/{MODEL}:predict": {"predictions": [[0.5, 0.25, 0.125, 0.0625]]},
}


def protocol_locations() -> str:
    """nginx locations answering each protocol's real answer bytes for model `m`."""
    blocks = []
    for path, document in {**TRITON_DOCUMENTS, **TFS_DOCUMENTS}.items():
        text = json.dumps(document, separators=(",", ":"))
        blocks.append(
            f"    location = \"{path}\" {{ default_type application/json; return 200 '{text}'; }}"
        )
    blocks.append(
        f'    location = "/v2/models/{MODEL}/infer" {{ default_type application/octet-stream; '
        f"add_header Inference-Header-Content-Length {len(TRITON_HEADER)}; "
        f"return 200 '{TRITON_HEADER}{TENSOR.decode()}'; }}"
    )
    return "\n".join(blocks)


def protocol_request(protocol: str) -> tuple[str, bytes, dict[str, str]]:
    """Path, body and headers servebench's codec sends for one row (hey sends the same)."""
    from servebench.clients.registry import protocol as find

    codec_class = find(protocol).codec_class()
    codec = codec_class("http://127.0.0.1:1", MODEL)
    documents = TRITON_DOCUMENTS if protocol == "triton-http" else TFS_DOCUMENTS
    from servebench.clients.triton_signature import triton_signature

    if protocol == "triton-http":
        meta = documents[f"/v2/models/{MODEL}"]
        signature = triton_signature(meta, documents[f"/v2/models/{MODEL}/config"])
    else:
        from servebench.clients.tfs_rest import signature_from_metadata

        meta = documents[f"/v1/models/{MODEL}/metadata"]
        signature = signature_from_metadata(meta, MODEL, "serving_default", "1", "")
    from servebench.clients.base import random_inputs

    payload = codec.encode(signature, 1, random_inputs(signature.inputs, 1))
    return codec.infer_url.raw_path, payload.encoded.data, dict(payload.encoded.headers)


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


# The share of a core each tool used in the middle of its last run (see `run_tool`), and
# the server's (nginx's worker) in the same interval.
LAST_CPU_SHARE: list[float] = []
LAST_SERVER_SHARE: list[float] = []
# nginx's master process (its worker is a child), set by `main`.
SERVER_PID: list[int] = []
# The gRPC rows' target (host:port of nginx's HTTP/2 server), set by `main`.
GRPC_TARGET: list[str] = []


def run_tool(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """Run a tool, sampling its CPU time (with children's) twice a second.

    The share of a core it used is taken between 40 % and 90 % of its life: past start-up
    (imports, connecting) and before the summary, where the load runs steadily.
    """
    import psutil

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, text=True, env={**os.environ, **(env or {})}
        )
        samples: list[tuple[float, float]] = []
        server_samples: list[tuple[float, float]] = []
        server = psutil.Process(SERVER_PID[0]) if SERVER_PID else None
        started = time.perf_counter()
        try:
            handle = psutil.Process(proc.pid)
            while proc.poll() is None:
                if time.perf_counter() - started > timeout:
                    proc.kill()
                    raise RuntimeError(f"{argv[3]} ran past {timeout} s")
                try:
                    cpu = sum(
                        sum(p.cpu_times()[:2]) for p in [handle, *handle.children(recursive=True)]
                    )
                    samples.append((time.perf_counter(), cpu))
                    if server is not None:
                        cpu = sum(sum(p.cpu_times()[:2]) for p in [server, *server.children()])
                        server_samples.append((samples[-1][0], cpu))
                except psutil.Error:
                    pass
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in (0, 3):  # servebench exits 3 on an INVALID verdict
        raise RuntimeError(f"{argv[3]} failed ({proc.returncode}): {stderr[-800:]}")
    LAST_CPU_SHARE[:] = [cpu_share(samples)]
    LAST_SERVER_SHARE[:] = [cpu_share(server_samples)]
    return stdout


def cpu_share(samples: list[tuple[float, float]]) -> float:
    """Cores used between 40 % and 90 % of the sampled life; NaN with too few samples."""
    if len(samples) < 4:
        return float("nan")
    t0, t1 = samples[0][0], samples[-1][0]
    middle = [s for s in samples if t0 + 0.4 * (t1 - t0) <= s[0] <= t0 + 0.9 * (t1 - t0)]
    if len(middle) < 2 or middle[-1][0] <= middle[0][0]:
        return float("nan")
    return (middle[-1][1] - middle[0][1]) / (middle[-1][0] - middle[0][0])


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


def bench_hey(
    url: str,
    core: int,
    seconds: int,
    tmp: Path,
    body: bytes = BODY,
    headers: dict[str, str] | None = None,
) -> float:
    headers = dict(headers or {"Content-Type": "application/json"})
    body_file = tmp / "hey-body"
    body_file.write_bytes(body)
    argv = ["hey", "-z", f"{seconds}s", "-c", str(CONNECTIONS), "-cpus", "1", "-m", "POST"]
    argv += ["-T", headers.pop("Content-Type", "application/octet-stream")]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    argv += ["-D", str(body_file), url]
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
    url: str,
    core: int,
    args: list[str],
    seconds: float,
    tmp: Path,
    realtime: bool = False,
    protocol: str = "http",
    tree: Path | None = None,
) -> dict:
    """One `servebench load` pinned to `core`; `tree`: the servebench checkout to run (its
    folder first on the path: an older commit's, for a before/after comparison), else the
    installed one."""
    out = tmp / "summary.json"
    argv = [
        sys.executable,
        "-c",
        "from servebench.cli import main; main()",
        "load",
        "--url",
        url,
        "--connections",
        str(CONNECTIONS),
        "--json",
        str(out),
        *args,
    ]
    if protocol == "http":
        body = tmp / "body.json"
        body.write_bytes(BODY)
        argv += ["--body-file", str(body)]
    else:
        argv += ["--protocol", protocol, "--model", MODEL, "--metrics-url", ""]
    # SCHED_FIFO priority 1 shields the generator from other processes' time slices (the
    # kernel still reserves 5 % of each second for normal tasks), as on a dedicated host.
    realtime_prefix = ["chrt", "-f", "1"] if realtime else []
    env = {"PYTHONPATH": str(tree)} if tree is not None else None
    run_tool([*realtime_prefix, *pinned(core, argv)], seconds + 60, env)
    return json.loads(out.read_text())


def bench_servebench(
    url: str,
    core: int,
    seconds: int,
    tmp: Path,
    extra: tuple[str, ...] = (),
    protocol="http",
    tree: Path | None = None,
) -> float:
    args = ["--concurrency", str(CONNECTIONS), "--duration", str(seconds), "--warmup", "1"]
    summary = servebench_load(
        url, core, [*args, *extra], seconds + 1, tmp, protocol=protocol, tree=tree
    )
    if summary["errors"]:
        raise RuntimeError(f"servebench saw errors: {summary['errors_by_kind']}")
    if not summary["count"]:
        raise RuntimeError(f"servebench measured nothing: {summary['reasons']}")
    return float(summary["throughput_rps"])


def bench_servebench_aiohttp(url: str, core: int, seconds: int, tmp: Path) -> float:
    return bench_servebench(url, core, seconds, tmp, ("--transport", "aiohttp"))


def bench_servebench_generators(url: str, core: int, seconds: int, tmp: Path) -> float:
    return bench_servebench(url, core, seconds, tmp, ("--generators", "2"))


def protocol_rows(protocol: str) -> dict:
    """servebench and hey rows for one inference protocol against nginx's fixed answers."""

    def servebench_row(url: str, core: int, seconds: int, tmp: Path) -> float:
        return bench_servebench(url.rstrip("/"), core, seconds, tmp, protocol=protocol)

    def hey_row(url: str, core: int, seconds: int, tmp: Path) -> float:
        path, body, headers = protocol_request(protocol)
        return bench_hey(url.rstrip("/") + path, core, seconds, tmp, body, headers)

    return {f"{protocol}: servebench": servebench_row, f"{protocol}: hey": hey_row}


def grpc_rows(protocol: str, options: bool = False) -> dict:
    """servebench (lean and grpcio), h2load and bare lean / grpc.aio rows for one gRPC
    protocol against nginx.

    `options` adds the other ways that were measured before choosing: servebench on 4
    connections, a bare loop on the h2 library, and bare loops on grpcio's sync stub (64
    threads blocking, or `.future()` with a done-callback that sends the next request).
    """

    def servebench_row(url: str, core: int, seconds: int, tmp: Path, extra=()) -> float:
        return bench_servebench(GRPC_TARGET[0], core, seconds, tmp, extra, protocol=protocol)

    def channels_row(url: str, core: int, seconds: int, tmp: Path) -> float:
        return servebench_row(url, core, seconds, tmp, ("--option", "channels=4"))

    def h2load_row(url: str, core: int, seconds: int, tmp: Path) -> float:
        path, body = grpc_answers.infer_request(protocol)
        body_file = tmp / "grpc-body"
        body_file.write_bytes(body)
        argv = ["h2load", "-D", str(seconds), "-c", "1", "-m", str(CONNECTIONS), "-t", "1"]
        argv += ["-d", str(body_file), "-H", "content-type: application/grpc"]
        argv += ["-H", "te: trailers", f"http://{GRPC_TARGET[0]}{path}"]
        out = run_tool(pinned(core, argv), seconds + 30)
        for line in out.splitlines():  # "finished in 10.00s, 30316.33 req/s, 6.10MB/s"
            if line.startswith("finished in"):
                return float(line.split(",")[1].split()[0])
        raise RuntimeError(f"no rate in h2load's output:\n{out[-800:]}")

    def bare(variant: str) -> Callable[[str, int, int, Path], float]:
        def row(url: str, core: int, seconds: int, tmp: Path) -> float:
            target = GRPC_TARGET[0]
            argv = [sys.executable, __file__, "--bare-grpc", variant, protocol, target]
            out = run_tool(pinned(core, [*argv, str(seconds)]), seconds + 30)
            return float(out.strip().splitlines()[-1])

        return row

    def grpcio_row(url: str, core: int, seconds: int, tmp: Path) -> float:
        return servebench_row(url, core, seconds, tmp, ("--transport", "grpcio"))

    rows = {
        f"{protocol}: servebench": servebench_row,
        f"{protocol}: servebench (grpcio)": grpcio_row,
        f"{protocol}: h2load": h2load_row,
        f"{protocol}: bare lean": bare("lean"),
        f"{protocol}: bare grpc.aio": bare("aio"),
    }
    if options:
        rows[f"{protocol}: servebench, 4 connections"] = channels_row
        rows[f"{protocol}: bare h2 library"] = bare("h2")
        rows[f"{protocol}: bare sync, 64 threads"] = bare("threads")
        rows[f"{protocol}: bare sync .future()"] = bare("future")
    return rows


def bare_grpc(variant: str, protocol: str, target: str, seconds: float) -> None:
    """64 requests in flight on one connection in a tight loop: a library's own ceiling.

    `aio`: 64 coroutines on a grpc.aio channel (uvloop); `threads`: 64 threads blocking on
    the sync stub; `future`: the sync stub's `.future()`, each answer's callback (on
    grpcio's thread) sending the next; `lean`: 64 coroutines on servebench's lean HTTP/2
    transport; `h2`: 64 coroutines on the h2 library's `H2Connection` (the option measured
    before writing the lean transport). Prints requests per second.
    """
    import threading

    import grpc
    import uvloop

    from servebench.clients.registry import protocol as find

    path, framed = grpc_answers.infer_request(protocol)
    request = framed[5:]
    parse = find(protocol).codec_class()(target, grpc_answers.MODEL, version=None).infer_response
    if variant in ("lean", "h2"):
        uvloop.run(_bare_http2(variant, target, path, request, parse.FromString, seconds))
        return
    if variant != "aio":
        channel = grpc.insecure_channel(target)
        call = channel.unary_unary(
            path, request_serializer=None, response_deserializer=parse.FromString
        )
        done, lock, finished = [0], threading.Lock(), threading.Semaphore(0)
        start = time.perf_counter()
        end = start + seconds

        def blocking() -> None:
            n = 0
            while time.perf_counter() < end:
                call(request)
                n += 1
            with lock:
                done[0] += n
            finished.release()

        def answered(future: grpc.Future) -> None:
            future.result()
            with lock:
                done[0] += 1
            if time.perf_counter() < end:
                call.future(request).add_done_callback(answered)
            else:
                finished.release()

        for _ in range(CONNECTIONS):
            if variant == "threads":
                threading.Thread(target=blocking).start()
            else:
                call.future(request).add_done_callback(answered)
        for _ in range(CONNECTIONS):
            finished.acquire()
        print(done[0] / (time.perf_counter() - start))
        channel.close()
        return

    async def main() -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary(path, request_serializer=None)
            await _tight_loop(lambda: call(request), parse.FromString, seconds)

    uvloop.run(main())


async def _tight_loop(call: Callable, parse: Callable, seconds: float) -> None:
    """`CONNECTIONS` coroutines calling and parsing answers for `seconds`; prints calls/s."""
    done = 0
    start = time.perf_counter()
    end = start + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < end:
            parse(await call())
            done += 1

    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    print(done / (time.perf_counter() - start))


async def _bare_http2(
    variant: str, target: str, path: str, request: bytes, parse: Callable, seconds: float
) -> None:
    """The `lean` and `h2` variants of `bare_grpc`: answers parsed, their status checked."""
    host, _, port = target.rpartition(":")
    if variant == "lean":
        from servebench.clients.lean_grpc import LeanGrpcPool

        pool = LeanGrpcPool(host, int(port))
        headers = pool.headers(path, None)

        async def call() -> bytes:
            return (await pool.call(headers, request, target))[0]

    else:
        protocol = await _H2Client.open(host, int(port), path, request)
        call = protocol.call
    await _tight_loop(call, parse, seconds)


class _H2Client:
    """gRPC unary calls on the h2 library's connection state machine (`bare_grpc` `h2`)."""

    @classmethod
    async def open(cls, host: str, port: int, path: str, request: bytes) -> _H2Client:
        client = cls(host, port, path, request)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: client.protocol, host, port)
        await asyncio.sleep(0.1)  # the server's SETTINGS
        return client

    def __init__(self, host: str, port: int, path: str, request: bytes) -> None:
        import h2.config
        import h2.connection
        import h2.events

        self.events = h2.events
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", f"{host}:{port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        self.framed = grpc_answers.frame(request)
        self.waiters: dict[int, asyncio.Future[bytes]] = {}
        self.bodies: dict[int, list[bytes]] = {}
        client = self

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                client.transport = transport
                client.conn.initiate_connection()
                client.conn.increment_flow_control_window(2**30)
                transport.write(client.conn.data_to_send())

            def data_received(self, data: bytes) -> None:
                client.received(data)

        self.protocol = Protocol()

    def call(self):
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, self.headers)
        self.conn.send_data(stream, self.framed, end_stream=True)
        self.transport.write(self.conn.data_to_send())
        waiter = self.waiters[stream] = asyncio.get_running_loop().create_future()
        self.bodies[stream] = []
        return waiter

    def received(self, data: bytes) -> None:
        events = self.events
        for event in self.conn.receive_data(data):
            if isinstance(event, events.DataReceived):
                self.bodies[event.stream_id].append(event.data)
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, events.TrailersReceived):
                if dict(event.headers).get(b"grpc-status") != b"0":
                    raise RuntimeError(f"grpc-status: {event.headers}")
            elif isinstance(event, events.StreamEnded):
                body = b"".join(self.bodies.pop(event.stream_id))
                self.waiters.pop(event.stream_id).set_result(body[5:])
        out = self.conn.data_to_send()
        if out:
            self.transport.write(out)


def bench_bare(url: str, core: int, seconds: int, tmp: Path) -> float:
    out = run_tool(
        pinned(core, [sys.executable, __file__, "--bare", url, str(seconds)]), seconds + 30
    )
    return float(out.strip().splitlines()[-1])


def bare_aiohttp(url: str, seconds: float) -> None:
    """64 tasks POSTing in a tight loop with aiohttp on uvloop: the library's own ceiling."""
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

            async def post() -> bytes:
                response = await session.request("POST", target, data=body)
                return await response.read()

            await _tight_loop(post, len, seconds)

    uvloop.run(main())


def engine_alone() -> None:
    """The engine with a client that answers at once: its own ceiling, and its memory.

    Prints one JSON line: closed-loop requests/s and CPU per request next to a bare asyncio
    loop doing the same awaits, and for a 3:1 mix of two such clients (`load.mix`: the seeded
    pick of each request's model); the open-loop rate it holds; RSS while it streams records.
    """
    import resource

    import psutil

    from servebench.clients.base import InferResult, ModelSignature, Payload
    from servebench.load import (
        LoadPlan,
        LoadSettings,
        ParquetRecordWriter,
        Target,
        constant,
        run,
        run_in_loop,
    )

    class Instants:
        """A client source: a fresh `Instant` per model."""

        def for_part(self, index: int, models: list[str]) -> list[Instant]:
            return [Instant() for _ in models]

    def load(settings: LoadSettings, targets: tuple[Target, ...] | None = None, **options):
        plan = LoadPlan(settings, Instants(), targets or (Target(),))
        return run(plan, handle_signals=False, **options)

    class Instant:
        async def connect(self) -> None:
            pass

        async def signature(self) -> ModelSignature:
            return ModelSignature("instant", (), ())

        def encode(self, batch_size: int, inputs: Mapping[str, object]) -> Payload:
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
        payload = client.encode(1, {})

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
    s = load(LoadSettings(concurrency=CONNECTIONS, count=n))
    out["closed_us"], out["closed_rps"] = (cpu() - c0) / n * 1e6, s.throughput_rps
    c0 = cpu()
    s = load(LoadSettings(concurrency=CONNECTIONS, count=n), (Target("a", 3), Target("b", 1)))
    out["closed_mix_us"], out["closed_mix_rps"] = (cpu() - c0) / n * 1e6, s.throughput_rps
    s = load(LoadSettings(arrivals=constant(20_000), duration=3))
    out["open_rate"], out["open_late"] = s.achieved_rate, s.late_share
    out["open_lag_p99"] = s.schedule_lag_p99
    with tempfile.TemporaryDirectory() as tmp:
        writer = ParquetRecordWriter(Path(tmp) / "records.parquet")
        rss: list[float] = []

        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0 if rss else 0.0):
                rss.append(psutil.Process().memory_info().rss / 2**20)

        sampler = threading.Thread(target=sample)
        sampler.start()
        load(LoadSettings(arrivals=constant(20_000), duration=10), records=writer)
        done.set()
        sampler.join()
        writer.close()
        out["records"] = writer.rows
    out["rss_first"], out["rss_max"], out["rss_last"] = rss[1], max(rss[1:]), rss[-1]
    print(json.dumps(out))


def bench_engine(core: int) -> dict:
    argv = pinned(core, [sys.executable, __file__, "--engine"])
    return json.loads(run_tool(argv, 300).strip().splitlines()[-1])


TOOLS = {
    "servebench": bench_servebench,
    "servebench (aiohttp)": bench_servebench_aiohttp,
    "servebench --generators 2": bench_servebench_generators,
    "bare aiohttp+uvloop": bench_bare,
    "Locust FastHttpUser": bench_locust,
    "hey": bench_hey,
    "wrk": bench_wrk,
    **protocol_rows("triton-http"),
    **protocol_rows("tfs-rest"),
    **grpc_rows("triton-grpc", options=True),
    **grpc_rows("tfs-grpc"),
}
NEEDS = {
    "Locust FastHttpUser": "locust",
    "hey": "hey",
    "wrk": "wrk",
    "triton-http: hey": "hey",
    "tfs-rest: hey": "hey",
    "triton-grpc: h2load": "h2load",
    "tfs-grpc: h2load": "h2load",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="length of each run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tool (median reported)")
    parser.add_argument("--lag-rate", type=float, default=2000.0, help="open-loop rate for lag")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--only", action="append", choices=list(TOOLS), help="run only these rows (repeatable)"
    )
    parser.add_argument("--no-engine", action="store_true", help="skip the engine-alone part")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of an older servebench (git worktree add DIR COMMIT): adds its "
        "'servebench (baseline)' row and open-loop lag, alternated with today's (A B B A)",
    )
    args = parser.parse_args()

    for tool in ("nginx", "taskset"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            sys.exit(f"{tool} is missing: apt-get install nginx util-linux")
    cores = sorted(os.sched_getaffinity(0))
    server_core, client_core = (cores[0], cores[1]) if len(cores) > 1 else (cores[0], cores[0])
    available = {}
    for name, fn in TOOLS.items():
        if args.only and name not in args.only:
            continue
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
    if args.baseline is not None:
        baseline = args.baseline.resolve()
        available["servebench (baseline)"] = functools.partial(bench_servebench, tree=baseline)

    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    with tempfile.TemporaryDirectory(prefix="loadgen-peers-") as tmpdir:
        tmp = Path(tmpdir)
        port, grpc_port = free_port(), free_port()
        tmp.chmod(0o755)  # nginx's worker (not root) reads the gRPC answers from here
        grpc_answers.write_answers(tmp / "grpc")
        GRPC_TARGET[:] = [f"127.0.0.1:{grpc_port}"]
        conf = tmp / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                dir=tmp,
                port=port,
                answer=ANSWER,
                locations=protocol_locations(),
                grpc_server=grpc_answers.nginx_server(grpc_port, tmp / "grpc"),
            )
        )
        server = subprocess.Popen(
            pinned(server_core, [nginx, "-c", str(conf), "-p", str(tmp)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        SERVER_PID[:] = [server.pid]
        try:
            wait_for_port(port)
            wait_for_port(grpc_port)
            url = f"http://127.0.0.1:{port}/"
            print(
                f"nginx on core {server_core}, clients on core {client_core}, "
                f"{CONNECTIONS} connections, {len(BODY)}-byte JSON POST, {args.seconds} s runs, "
                f"load average before: {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            rates: dict[str, list[float]] = {name: [] for name in available}
            shares: dict[str, list[float]] = {name: [] for name in available}
            server_shares: dict[str, list[float]] = {name: [] for name in available}
            lags: dict[str, list[dict]] = {"normal priority": []}
            if shutil.which("chrt") and os.geteuid() == 0:
                lags["real-time priority"] = []
            trees: dict[str, Path | None] = dict.fromkeys(lags)
            if args.baseline is not None:
                for priority in list(lags):
                    lags[f"{priority}, baseline"] = []
                    trees[f"{priority}, baseline"] = args.baseline.resolve()
            lag_args = ["--rate", f"{args.lag_rate:g}", "--duration", str(args.seconds)]
            for repeat in range(args.repeat):
                # Round robin spreads machine noise; every other round backwards (A B B A).
                order = list(available.items())
                for name, fn in order if repeat % 2 == 0 else order[::-1]:
                    rate = fn(url, client_core, args.seconds, tmp)
                    rates[name].append(rate)
                    shares[name].append(LAST_CPU_SHARE[0])
                    server_shares[name].append(LAST_SERVER_SHARE[0])
                    print(
                        f"  {name:<26} {rate:>10,.0f} req/s, {LAST_CPU_SHARE[0]:.2f} of a core, "
                        f"server {LAST_SERVER_SHARE[0]:.2f}   (load {load_average()})",
                        flush=True,
                    )
                lag_order = list(lags.items())
                for priority, runs in lag_order if repeat % 2 == 0 else lag_order[::-1]:
                    lag = servebench_load(
                        url,
                        client_core,
                        [*lag_args, "--warmup", "1"],
                        args.seconds,
                        tmp,
                        realtime=not priority.startswith("normal priority"),
                        tree=trees[priority],
                    )
                    runs.append(lag)
                    print(f"  open loop, {priority:<19} {describe_lag(lag)}", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=10)
            SERVER_PID.clear()  # the engine-alone part runs without it
    engine = None if args.no_engine else bench_engine(client_core)
    report(rates, shares, server_shares, lags, engine, args)


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
    shares: dict[str, list[float]],
    server_shares: dict[str, list[float]],
    lags: dict[str, list[dict]],
    engine: dict | None,
    args: argparse.Namespace,
) -> None:
    """Medians (what a typical run gives) and bests (noise only ever slows a tool down).

    "Per core" is each run's rate over the share of a core it used, then the median; the
    ratio columns compare servebench with each peer (a protocol row with hey or h2load on
    the same requests) by median wall rate and by median per-core rate; "server" is the
    median share of a core nginx used meanwhile (near 1.0, the server was the limit).
    """
    median = {name: statistics.median(values) for name, values in rates.items() if values}
    best = {name: max(values) for name, values in rates.items() if values}
    per_core = {
        name: statistics.median(
            r / c if c > 0 else math.nan for r, c in zip(values, shares[name], strict=True)
        )
        for name, values in rates.items()
        if values
    }
    print()
    print(
        f"{'tool':<28}{'median req/s':>13}{'best req/s':>12}{'per core':>10}{'server':>8}"
        f"{'  servebench / tool (median; per core)':<40}"
    )
    for name in median:
        # A protocol's rows ("triton-grpc: h2load") are compared with its servebench row.
        ours = f"{name.split(': ')[0]}: servebench" if ": " in name else "servebench"
        ratio = ""
        if name != ours and ours in median:
            ratio = (
                f"  {median[ours] / median[name]:.2f}x; {per_core[ours] / per_core[name]:.2f}x"
                f"  ({ours})"
            )
        server = statistics.median(server_shares[name])
        print(
            f"{name:<28}{median[name]:>13,.0f}{best[name]:>12,.0f}{per_core[name]:>10,.0f}"
            f"{server:>8.2f}{ratio}"
        )
    if rates.get("servebench") and rates.get("servebench (baseline)"):
        pairs = zip(rates["servebench"], rates["servebench (baseline)"], strict=True)
        # Each round ran both, next to each other (A B B A): the ratio round by round.
        ratios = sorted(new / old for new, old in pairs)
        print(
            f"servebench / baseline, round by round ({len(ratios)} rounds): median "
            f"{statistics.median(ratios):.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}"
        )
    print()
    for priority, runs in lags.items():
        by_lag = sorted(runs, key=lambda lag: lag["schedule_lag_p99"])
        print(f"servebench open loop at {args.lag_rate:g} req/s, {priority}, {len(runs)} runs:")
        print(f"  median run: {describe_lag(by_lag[len(by_lag) // 2])}")
        print(f"  best run:   {describe_lag(by_lag[0])}")
    if engine is not None:
        print("engine alone (a client that answers at once, no HTTP):")
        print(
            f"  closed loop, {CONNECTIONS} workers: {engine['closed_rps']:,.0f} req/s, "
            f"{engine['closed_us']:.2f} us CPU per request (a bare asyncio loop doing the "
            f"same awaits: {engine['bare_us']:.2f} us, {engine['bare_rps']:,.0f} req/s)"
        )
        print(
            f"  the same, a 3:1 mix of two such clients: {engine['closed_mix_rps']:,.0f} req/s, "
            f"{engine['closed_mix_us']:.2f} us CPU per request"
        )
        print(
            f"  open loop at 20,000 req/s: achieved {engine['open_rate']:,.0f} req/s, "
            f"{engine['open_late']:.2%} > 1 ms late, "
            f"lag p99 {engine['open_lag_p99'] * 1e3:.3f} ms"
        )
        print(
            f"  RSS while streaming {engine['records']:,} records to Parquet (20,000 req/s, "
            f"10 s): {engine['rss_first']:.0f} MiB after 1 s, max {engine['rss_max']:.0f}, "
            f"last {engine['rss_last']:.0f}"
        )
    print(f"load average at the end: {load_average()}")
    if args.json:
        results = {
            "rates": rates,
            "core_shares": shares,
            "server_core_shares": server_shares,
            "median": median,
            "best": best,
            "per_core": per_core,
            "lag": lags,
            "engine": engine,
            "load_average": os.getloadavg(),
        }
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--bare":
        bare_aiohttp(sys.argv[2], float(sys.argv[3]))
    elif len(sys.argv) == 6 and sys.argv[1] == "--bare-grpc":
        bare_grpc(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif sys.argv[1:] == ["--engine"]:
        engine_alone()
    else:
        main()
