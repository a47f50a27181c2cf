"""Seconds per exported variant, both formats, for a 12-variant grid.

Run: .venv/bin/python benchmarks/export.py [--out DIR]

Exports dense/conv/lstm/attention x widths 32/64/128 (depth 3) to a Triton repository
(ONNX + python-backend twin) and a TF Serving SavedModel, with the parity check on, and
prints per-variant timings and the medians. The first variant of a process pays one-time
import and tracing warm-up; the median is the figure to quote.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from model_zoo.export.family import export_family
from model_zoo.mutate import grid

STEPS = ("build", "triton", "tfs", "check")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="export folder (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servebench-export-bench-"))
    specs = grid(["dense", "conv", "lstm", "attention"], [3], [32, 64, 128])
    assert len(specs) == 12

    started = time.perf_counter()
    models = export_family(specs, out, force=True)
    wall = time.perf_counter() - started

    print(f"{'variant':28} " + " ".join(f"{s:>8}" for s in STEPS) + f" {'total':>8}")
    totals = []
    for model in models:
        total = sum(model.seconds.values())
        totals.append(total)
        cells = " ".join(f"{model.seconds.get(s, 0.0):8.2f}" for s in STEPS)
        print(f"{model.spec_id:28} {cells} {total:8.2f}")
    medians = {s: statistics.median(m.seconds[s] for m in models) for s in STEPS}
    print(
        "median s/variant: "
        + ", ".join(f"{s} {v:.2f}" for s, v in medians.items())
        + f", total {statistics.median(totals):.2f}"
    )
    print(
        f"wall clock for 12 variants, both formats + parity: {wall:.1f} s ({wall / 12:.2f} s/variant)"
    )


if __name__ == "__main__":
    main()
