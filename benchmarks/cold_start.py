"""Cold start on the local Triton: ResNet-50 (224x224) and two small variants, N times each.

Run: .venv/bin/python benchmarks/cold_start.py [--repeats 5] [--warm 10] [--out DIR]

Each model is exported once (ONNX + the python-backend repository the local binary
serves), then measured `--repeats` times, each time on a fresh tritonserver: process start
→ server ready (explicit model-control mode, so no model loads at start), model load
request → model ready, the first inference (batch 1) and the median of `--warm` more.
Prints the distribution per model and metric and writes every repeat to
`<out>/cold_start.csv`. The InferBench paper reports ResNet-50 cold start over 10 s.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

from model_zoo.counting import count
from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec, resnet50_spec
from model_zoo.torch_builder import build_torch
from servebench.servers.cold_start import ColdStartResult, measure_cold_start
from servebench.servers.local import LocalTritonServer

MODELS = [
    resnet50_spec(224),
    ModelSpec(layer_type="conv", depth=3, width=32, input_shape=(32, 32, 3), num_outputs=10),
    ModelSpec(layer_type="dense", depth=2, width=64, input_shape=(128,), num_outputs=10),
]
COLUMNS = ("server_start_s", "model_load_s", "first_infer_s", "warm_median_s", "to_first_answer_s")


def _fmt(seconds: float) -> str:
    return f"{seconds:7.2f} s" if seconds >= 1 else f"{seconds * 1000:6.1f} ms"


def _print(result: ColdStartResult, spec: ModelSpec, onnx_mb: float) -> None:
    cost = count(spec)
    print(
        f"\n{result.model}: {cost.params / 1e6:.2f} M params, {cost.gflops:.3f} GFLOP/sample, "
        f"ONNX {onnx_mb:.1f} MB, {len(result.samples)} repeats"
    )
    dist = result.distribution()
    print(f"  {'metric':17} {'min':>10} {'median':>10} {'p90':>10} {'max':>10}")
    for metric in COLUMNS:
        if metric in dist:
            d = dist[metric]
            print(
                f"  {metric:17} {_fmt(d['min']):>10} {_fmt(d['median']):>10} "
                f"{_fmt(d['p90']):>10} {_fmt(d['max']):>10}"
            )
    ratio = dist.get("first_over_warm")
    if ratio:
        print(f"  first / warm      median {ratio['median']:.1f}x (min {ratio['min']:.1f}x)")
    if result.error:
        print(f"  stopped early: {result.error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm", type=int, default=10, help="warm requests per repeat")
    parser.add_argument("--out", type=Path, help="work folder (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servebench-cold-start-"))
    out.mkdir(parents=True, exist_ok=True)

    rows = []
    for spec in MODELS:
        started = time.perf_counter()
        export = export_triton(
            build_torch(spec, seed=0), spec, out, TritonSettings(max_batch_size=8), force=True
        )
        onnx_mb = sum(f.stat().st_size for f in export.onnx_path.parent.iterdir()) / 1e6
        print(f"exported {export.name} in {time.perf_counter() - started:.1f} s", flush=True)

        def make(name: str = export.name) -> LocalTritonServer:
            return LocalTritonServer(out / PYTHON_REPOSITORY, run_dir=out / "runs" / name)

        result = measure_cold_start(
            make, export.name, repeats=args.repeats, warm_requests=args.warm
        )
        _print(result, spec, onnx_mb)
        rows += result.rows()

    path = out / "cold_start.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nevery repeat: {path}")


if __name__ == "__main__":
    main()
