"""Cold start on the local Triton: ResNet-50 (224x224) and two small variants, N times each.

Run: .venv/bin/python benchmarks/cold_start.py [--repeats 5] [--warm 10] [--out DIR]

The same measurement a scenario's `cold_start: {repeats: N}` runs
(`servebench.servers.cold_start.measure_cold_start` with the runner's triton-http probe):
each model is exported once (ONNX + the python-backend repository the local binary serves),
then timed `--repeats` times, each on a fresh tritonserver process: process start → server
ready (explicit model-control mode, so no model loads at start), model load request → model
ready, the first inference (batch 1) and the median of `--warm` more. Prints median, min and
max per phase (the numbers the report's cold-start figure draws) and writes every repeat to
`<out>/cold_start.csv` in a run's columns. The InferBench paper reports ResNet-50 cold start
over 10 s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from model_zoo.counting import count
from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
from model_zoo.spec import ModelSpec, resnet50_spec
from model_zoo.torch_builder import build_torch
from servebench.analysis.summary import cold_start_stats
from servebench.clients.base import InferenceError
from servebench.scenario.runner import client_probe
from servebench.servers.base import Server, ServerError
from servebench.servers.cold_start import PhaseTime, Probe, measure_cold_start
from servebench.servers.kinds import create_server

MODELS = [
    resnet50_spec(224),
    ModelSpec(layer_type="conv", depth=3, width=32, input_shape=(32, 32, 3), num_outputs=10),
    ModelSpec(layer_type="dense", depth=2, width=64, input_shape=(128,), num_outputs=10),
]


def _fmt(seconds: float) -> str:
    return f"{seconds:7.2f} s" if seconds >= 1 else f"{seconds * 1000:6.1f} ms"


def _print(name: str, rows: list[dict], spec: ModelSpec, onnx_mb: float) -> None:
    """Median, min and max per phase, then what a user waits for the first answer (ready +
    load + first inference, per repeat) and how much slower the first request is."""
    cost = count(spec)
    cold = pd.DataFrame(rows)
    print(
        f"\n{name}: {cost.params / 1e6:.2f} M params, "
        f"{cost.gflops:.3f} GFLOP/sample, ONNX {onnx_mb:.1f} MB, {cold.repeat.nunique()} repeats"
    )
    print(f"  {'phase':17} {'min':>10} {'median':>10} {'max':>10}")
    for r in cold_start_stats(cold).itertuples():
        print(f"  {r.phase:17} {_fmt(r.min):>10} {_fmt(r.median):>10} {_fmt(r.max):>10}")
    by_repeat = cold.pivot_table(index="repeat", columns="phase", values="seconds")
    if {"first_inference", "warm_median"} <= set(by_repeat.columns):
        total = by_repeat[["server_ready", "model_load", "first_inference"]].sum(axis=1)
        print(f"  {'to first answer':17} {_fmt(total.min()):>10} {_fmt(total.median()):>10} "
              f"{_fmt(total.max()):>10}")  # fmt: skip
        ratio = by_repeat["first_inference"] / by_repeat["warm_median"]
        print(f"  first / warm      median {ratio.median():.1f}x (min {ratio.min():.1f}x)")


def _measure(server: Server, model: str, probe: Probe, repeats: int, warm: int) -> list[dict]:
    """Every phase time as a cold_start.csv row; a failure ends the repeats early and
    keeps the times measured before it."""
    measured: list[PhaseTime] = []
    try:
        measure_cold_start(
            server, [model], probe, repeats=repeats, warm_requests=warm, on_time=measured.append
        )
    except (ServerError, InferenceError) as err:
        print(f"  stopped early: {err}")
    finally:
        server.stop()
    return [{"server": server.kind, "setting": server.kind, **t.row()} for t in measured]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm", type=int, default=10, help="warm requests per repeat")
    parser.add_argument("--out", type=Path, help="work folder (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servebench-cold-start-"))
    out.mkdir(parents=True, exist_ok=True)
    probe = client_probe("triton", "http", timeout_s=120.0)

    rows: list[dict] = []
    for spec in MODELS:
        started = time.perf_counter()
        export = export_triton(
            build_torch(spec, seed=0), spec, out, TritonSettings(max_batch_size=8), force=True
        )
        onnx_mb = sum(f.stat().st_size for f in export.onnx_path.parent.iterdir()) / 1e6
        print(f"exported {export.name} in {time.perf_counter() - started:.1f} s", flush=True)

        server = create_server(
            "triton-local",
            model_repository=out / PYTHON_REPOSITORY,
            run_dir=out / "runs" / export.name,
        )
        measured = _measure(server, export.name, probe, args.repeats, args.warm)
        if measured:
            _print(export.name, measured, spec, onnx_mb)
        rows += measured

    path = out / "cold_start.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    print(f"\nevery repeat: {path}")


if __name__ == "__main__":
    main()
