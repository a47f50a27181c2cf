"""Client CPU per request: servebench's Triton clients vs tritonclient's own `infer()`.

Usage: .venv/bin/python benchmarks/clients_cpu.py [--requests 2000] [--repeats 3]

The servebench clients encode each request once (before the run) and decode answers
themselves; tritonclient's aio clients re-encode on every call. This measures what that
is worth: a small dense model on the local Triton (python backend), a closed loop of 8
concurrent requests per client, and the client process's own CPU time (getrusage; the
server is another process) divided by the requests. Medians of `repeats` runs. Loopback
only; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from collections.abc import Awaitable, Callable

import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
import tritonclient.http as triton_http
import tritonclient.http.aio as triton_http_aio
from dense_triton import served_dense_model

from servebench.clients.payloads import random_payload
from servebench.clients.triton_grpc import TritonGrpcClient
from servebench.clients.triton_http import TritonHttpClient

CONCURRENCY = 8


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _closed_loop(send: Callable[[], Awaitable[object]], requests: int) -> tuple[float, float]:
    """(client CPU seconds per request, requests per second) over `requests` sends."""
    for _ in range(50):  # warm connections and caches
        await send()

    async def worker(count: int) -> None:
        for _ in range(count):
            await send()

    cpu, wall = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker(requests // CONCURRENCY) for _ in range(CONCURRENCY)))
    done = requests // CONCURRENCY * CONCURRENCY
    return (_cpu() - cpu) / done, done / (time.perf_counter() - wall)


async def _servebench(client, batch: int, requests: int) -> tuple[float, float]:
    await client.connect()
    try:
        payload = random_payload(client.encode, await client.signature(), batch)
        return await _closed_loop(lambda: client.infer(payload), requests)
    finally:
        await client.close()


async def _tritonclient(
    protocol: str, address: str, model: str, batch: int, requests: int
) -> tuple[float, float]:
    """tritonclient's own aio client of `protocol` ("http", binary tensors, or "grpc")."""
    if protocol == "http":
        api, client = (
            triton_http,
            triton_http_aio.InferenceServerClient(address, conn_limit=CONCURRENCY),
        )
        binary = {"binary_data": True}
    else:
        api, client = triton_grpc, triton_grpc_aio.InferenceServerClient(address)
        binary = {}
    x = np.random.default_rng(0).standard_normal((batch, 8)).astype(np.float32)
    tensor = api.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, **binary)
    outputs = [api.InferRequestedOutput("output", **binary)]

    async def send():
        return (await client.infer(model, [tensor], outputs=outputs)).as_numpy("output")

    try:
        return await _closed_loop(send, requests)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the median is shown")
    args = parser.parse_args()

    with served_dense_model() as (server, name):
        http, grpc = server.endpoints.http_address, server.endpoints.grpc_address
        n = args.requests
        cases = {
            "servebench triton-http (binary)": lambda b: _servebench(
                TritonHttpClient(http, name, connections=CONCURRENCY), b, n
            ),
            "servebench triton-http (json)": lambda b: _servebench(
                TritonHttpClient(http, name, binary_data=False, connections=CONCURRENCY), b, n
            ),
            "tritonclient.http.aio infer (binary)": lambda b: _tritonclient(
                "http", http, name, b, n
            ),
            "servebench triton-grpc": lambda b: _servebench(TritonGrpcClient(grpc, name), b, n),
            "tritonclient.grpc.aio infer": lambda b: _tritonclient("grpc", grpc, name, b, n),
        }
        print(
            f"{'client':40} {'batch':>5} {'CPU us/req':>11} {'req/s':>7}  (median of {args.repeats})"
        )
        for batch in (1, 16):
            for label, run in cases.items():
                runs = [asyncio.run(run(batch)) for _ in range(args.repeats)]
                cpu = statistics.median(r[0] for r in runs) * 1e6
                rate = statistics.median(r[1] for r in runs)
                print(f"{label:40} {batch:>5} {cpu:>11.0f} {rate:>7.0f}", flush=True)


if __name__ == "__main__":
    main()
