"""Cold start, measured per server and model, N times over, reported as a distribution.

One repeat is one fresh server: process start → server ready (what `Server.start`
returns), model load request → model ready (`Server.load_model`), then the first inference
and `warm_requests` more whose median is the warm latency. The first request after a load
pays for lazy initialisation (sessions, memory pools, kernels picked on first use); the
ratio first / warm says how much.

A repeat that fails ends the measurement, and the result keeps the repeats measured
before it together with the reason.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from servebench.servers.base import Server, ServerError
from servebench.servers.probe import InferenceProbe

LoadMode = Literal["request", "at_start"]
METRICS = (
    "server_start_s", "model_load_s", "first_infer_s", "warm_median_s", "first_over_warm",
    "to_first_answer_s",
)  # fmt: skip


@dataclass(frozen=True)
class ColdStartSample:
    """One repeat. `server_start_s` is None for attached (remote) servers, whose start is
    not a process start; `model_load_s` is None when the model loaded as part of start."""

    repeat: int
    server_start_s: float | None
    model_load_s: float | None
    first_infer_s: float
    warm_median_s: float

    @property
    def first_over_warm(self) -> float:
        return self.first_infer_s / self.warm_median_s if self.warm_median_s > 0 else float("nan")

    @property
    def to_first_answer_s(self) -> float:
        """What a user waits from starting the server to the first answer."""
        return (self.server_start_s or 0.0) + (self.model_load_s or 0.0) + self.first_infer_s


@dataclass
class ColdStartResult:
    """All repeats of one server kind and model, and why it stopped early, if it did."""

    server: str
    model: str
    samples: list[ColdStartSample] = field(default_factory=list)
    error: str | None = None

    def values(self, metric: str) -> list[float]:
        if metric not in METRICS:
            raise ValueError(f"metric: unknown {metric!r}; expected one of {', '.join(METRICS)}")
        found = (getattr(s, metric) for s in self.samples)
        return [float(v) for v in found if v is not None]

    def distribution(self) -> dict[str, dict[str, float]]:
        """metric → {n, min, median, mean, p90, max} over the repeats that have it."""
        return {m: describe(self.values(m)) for m in METRICS if self.values(m)}

    def rows(self) -> list[dict]:
        """One flat dict per repeat, for CSV/Parquet."""
        return [
            {"server": self.server, "model": self.model, **asdict(s),
             "first_over_warm": s.first_over_warm, "to_first_answer_s": s.to_first_answer_s}
            for s in self.samples
        ]  # fmt: skip


def describe(values: Sequence[float]) -> dict[str, float]:
    data = np.asarray(values, dtype=float)
    return {
        "n": float(len(data)),
        "min": float(data.min()),
        "median": float(np.median(data)),
        "mean": float(data.mean()),
        "p90": float(np.percentile(data, 90)),
        "max": float(data.max()),
    }


def measure_cold_start(
    make_server: Callable[[], Server],
    model: str,
    *,
    repeats: int = 5,
    warm_requests: int = 10,
    load: LoadMode = "request",
    load_timeout_s: float = 300.0,
    on_sample: Callable[[ColdStartSample], None] | None = None,
) -> ColdStartResult:
    """Measure `repeats` cold starts of `model`, each on a server from `make_server()`.

    With `load="at_start"` the factory's server loads the model during start (TF Serving
    started with the model in its config), so the start time includes the load.
    """
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    if warm_requests < 1:
        raise ValueError(f"warm_requests: must be >= 1, got {warm_requests}")
    if load not in ("request", "at_start"):
        raise ValueError(f"load: must be 'request' or 'at_start', got {load!r}")
    result: ColdStartResult | None = None
    for repeat in range(repeats):
        server = make_server()
        if result is None:
            result = ColdStartResult(server=server.kind, model=model)
        try:
            sample = _one_repeat(server, model, repeat, warm_requests, load, load_timeout_s)
        except ServerError as err:
            result.error = f"repeat {repeat}: {err}"
            break
        finally:
            server.stop()
        result.samples.append(sample)
        if on_sample is not None:
            on_sample(sample)
    assert result is not None
    return result


def _one_repeat(
    server: Server, model: str, repeat: int, warm_requests: int, load: LoadMode, timeout_s: float
) -> ColdStartSample:
    start_s = server.start()
    load_s = None
    if load == "request":
        if not server.owns_process and server.is_model_ready(model):
            server.unload_model(model)  # an attached server may still hold it from before
        load_s = server.load_model(model, timeout_s=timeout_s)
    else:
        server.wait_model_ready(model, timeout_s)
    probe = InferenceProbe.for_server(server, model, seed=repeat)
    first = probe.send()
    warm = [probe.send() for _ in range(warm_requests)]
    return ColdStartSample(
        repeat=repeat,
        server_start_s=start_s if server.owns_process else None,
        model_load_s=load_s,
        first_infer_s=first,
        warm_median_s=statistics.median(warm),
    )
