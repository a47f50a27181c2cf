"""Cold start: from "start the server" to its first answer, phase by phase, N times over.

One repeat is one start of the server: process start → server ready (what `Server.start`
returns; for a server in a container, split into the engine's create-and-start of the
container and the server's own start-up inside it), for each model its load request → model ready (`Server.load_model`), then the
first inference and the median of a few more (the warm latency). The first request after a
load pays for lazy initialisation (sessions, memory pools, kernels picked on first use);
first against warm says how much. With `repeats` > 1 the server is stopped and started
again before each further repeat, so the phases form a distribution (median, min, max).

This is the one measurement: the scenario runner writes its times to `cold_start.csv`, and
`benchmarks/cold_start.py` prints them. How a request is sent is the caller's `probe` (the
runner's uses the scenario's client protocol): servers sit below `clients` and do not know
how to encode a request.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servebench.results import COLD_START_PHASES
from servebench.servers.base import Server

# The names cold_start.csv's readers know.
CONTAINER, READY, LOAD, FIRST, WARM = COLD_START_PHASES
WARM_REQUESTS = 5

# (server, model, count) → the latency in seconds of each of `count` batch-1 inferences of
# `model`, sent one after another to the running server.
Probe = Callable[[Server, str, int], list[float]]


@dataclass(frozen=True)
class PhaseTime:
    """One phase of one repeat: a row of cold_start.csv without the server's coordinates.

    `model` is "" for `container_start` and `server_ready`, which belong to the server,
    not to a model."""

    repeat: int
    model: str
    phase: str
    seconds: float

    def row(self) -> dict[str, str | int | float]:
        """The cold_start.csv columns (`COLD_START_COLUMNS`) this time fills, in the file's
        order; the caller puts `server` and `setting` first."""
        return {"model": self.model, "phase": self.phase, "repeat": self.repeat,
                "seconds": self.seconds}  # fmt: skip


def measure_cold_start(
    server: Server,
    models: Sequence[str],
    probe: Probe,
    *,
    repeats: int = 1,
    warm_requests: int = WARM_REQUESTS,
    on_time: Callable[[PhaseTime], None] | None = None,
) -> list[PhaseTime]:
    """Time `repeats` cold starts of `server` serving `models`; return every phase time.

    The server is left running with the models loaded, ready for trials; the caller stops
    it. A server that loads its own models (`manages_models` False) has no `model_load`
    time: its start waits for them, so their load is part of `server_ready`. Each time goes to
    `on_time` as soon as it is measured, so a repeat that fails (its error propagates)
    keeps what was measured before it.
    """
    if not server.owns_process:
        raise ValueError(
            f"{server.describe()}: servebench did not start it, so it has no cold start to time"
        )
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    if warm_requests < 1:
        raise ValueError(f"warm_requests: must be >= 1, got {warm_requests}")
    times: list[PhaseTime] = []

    def record(repeat: int, model: str, phase: str, seconds: float) -> None:
        measured = PhaseTime(repeat, model, phase, seconds)
        times.append(measured)
        if on_time is not None:
            on_time(measured)

    for repeat in range(repeats):
        if repeat:
            server.stop()
        ready = server.start()
        if server.container_start_s is not None:
            record(repeat, "", CONTAINER, server.container_start_s)
            ready -= server.container_start_s
        record(repeat, "", READY, ready)
        for model in models:
            if server.manages_models:
                record(repeat, model, LOAD, server.load_model(model))
            first, *warm = probe(server, model, 1 + warm_requests)
            record(repeat, model, FIRST, first)
            record(repeat, model, WARM, statistics.median(warm))
    return times
