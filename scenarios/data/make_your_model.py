"""Write the small ONNX model and input samples `scenarios/your_model.yaml` ships with.

A stand-in for the user's own model: a two-layer perceptron (16 features -> 32 -> 4
scores) exported from torch with a dynamic batch axis, a few KB, and 64 input samples in
an .npz keyed by its input name (first axis = samples), as `workload.inputs` reads them.
Seeded, so running it again writes the same numbers:

    python scenarios/data/make_your_model.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
MODEL = HERE / "your_model.onnx"
INPUTS = HERE / "your_model_inputs.npz"
FEATURES, HIDDEN, SCORES, SAMPLES = 16, 32, 4, 64


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, SCORES)
    ).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter's notice
        torch.onnx.export(
            model,
            (torch.randn(2, FEATURES),),
            str(MODEL),
            input_names=["features"],
            output_names=["scores"],
            dynamic_axes={"features": {0: "batch"}, "scores": {0: "batch"}},
            dynamo=False,
        )
    rng = np.random.default_rng(0)
    np.savez(INPUTS, features=rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32))
    print(f"wrote {MODEL} ({MODEL.stat().st_size:,} bytes) and {INPUTS}")


if __name__ == "__main__":
    main()
