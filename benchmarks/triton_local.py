"""Cold-start figures of the local Triton: process start → ready, model load → ready,
first inference after a load, unload, stop.

Usage: .venv/bin/python benchmarks/triton_local.py [--repeats 5] [--no-resnet50]

Exports a small dense model and (unless told not to) the reference ResNet-50 into a temp
folder, then starts, loads, infers, unloads and stops the real tritonserver `repeats` times
and prints medians (seconds). Loopback only; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.http as triton_http

from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec, resnet50_spec
from model_zoo.torch_builder import build_torch
from servebench.servers import LocalTriton


def _first_and_warm_infer(server: LocalTriton, name: str, spec: ModelSpec) -> tuple[float, float]:
    """Seconds of the first inference after a load, and the median of the next five."""
    client = triton_http.InferenceServerClient(server.endpoints.http_address)
    x = np.random.default_rng(0).standard_normal((1, *spec.served_input_shape))
    tensor = triton_http.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x.astype(np.float32))
    times = []
    for _ in range(6):
        started = time.perf_counter()
        client.infer(name, [tensor])
        times.append(time.perf_counter() - started)
    client.close()
    return times[0], statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-resnet50", action="store_true")
    args = parser.parse_args()

    specs = [ModelSpec(layer_type="dense", depth=3, width=64, input_shape=(32,))]
    if not args.no_resnet50:
        specs.append(resnet50_spec())
    settings = TritonSettings(max_batch_size=8, instance_count=1)
    with tempfile.TemporaryDirectory(prefix="bench-triton-") as tmp:
        out = Path(tmp)
        for spec in specs:
            started = time.perf_counter()
            export_triton(build_torch(spec), spec, out, settings)
            print(f"exported {spec.id} in {time.perf_counter() - started:.1f} s", flush=True)

        rows: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            server = LocalTriton(out / PYTHON_REPOSITORY, run_dir=out / "run")
            rows.setdefault("process start -> ready", []).append(server.start())
            for spec in specs:
                rows.setdefault(f"{spec.id}: load -> ready", []).append(server.load_model(spec.id))
                first, warm = _first_and_warm_infer(server, spec.id, spec)
                rows.setdefault(f"{spec.id}: first inference (batch 1)", []).append(first)
                rows.setdefault(f"{spec.id}: warm inference (batch 1)", []).append(warm)
                started = time.perf_counter()
                server.unload_model(spec.id)
                rows.setdefault(f"{spec.id}: unload -> gone", []).append(
                    time.perf_counter() - started
                )
            server.load_model(specs[0].id)  # stop a server that still has a model loaded
            started = time.perf_counter()
            server.stop()
            rows.setdefault("stop (one model loaded)", []).append(time.perf_counter() - started)

    width = max(map(len, rows))
    print(
        f"\n{'measure':<{width}}  {'median s':>9}  {'min s':>7}  {'max s':>7}  (n={args.repeats})"
    )
    for label, values in rows.items():
        print(
            f"{label:<{width}}  {statistics.median(values):9.3f}  {min(values):7.3f}"
            f"  {max(values):7.3f}"
        )


if __name__ == "__main__":
    main()
