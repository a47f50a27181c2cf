"""End-to-end serving, host vs container: the same short scenario against Triton started
on the host (`triton-local`) and Triton in a container of the local Triton CPU image
(`triton-docker`), through the scenario runner — so the load, the clients, the records
and the cold start are measured exactly as in any scenario run.

Unlike the other probes this one runs at the orchestrator's level: the server is what
sits in the container, the load generator stays on the host for both sides. Each
repetition is one scenario run (start, cold start, load, stop) kept under
`<run>/serving/`, whose trial row and cold-start rows become measurements (the
container's create and start counted in its start, as a user waits for it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from servebench.common.wellknown import TRITON_CPU_IMAGE
from servebench.overhead.measure import Better, Measurement, Side
from servebench.overhead.probes import ProbeUnavailable
from servebench.overhead.sides import ProbeFailed, container_problem
from servebench.results import TrialRow
from servebench.servers.kinds import server_kind

SERVING_PROBE = "serving"
SERVING_DIR = "serving"
CONCURRENCY = 4
# The server kind each side runs: the same Triton, started on the host or in a container.
SIDE_KINDS: dict[Side, str] = {"host": "triton-local", "container": "triton-docker"}

# Trial-row column → (metric, unit, which direction is better).
_ROW_METRICS: dict[str, tuple[str, str, Better]] = {
    "latency_p50": ("latency_p50", "s", "lower"),
    "latency_p99": ("latency_p99", "s", "lower"),
    "throughput_rps": ("throughput", "req/s", "higher"),
    "server_cpu_mean": ("server_cpu", "cores", "lower"),
}


def serving_scenario(side: Side, name: str, output: Path, *, quick: bool) -> dict[str, Any]:
    """The scenario one repetition runs: one small dense model, one Triton setting, a
    closed loop of `CONCURRENCY` clients on the direct link. Only the server kind (its
    `launch`, and the image) differs between the sides."""
    server: dict[str, Any] = {
        "name": "triton",
        **server_kind(SIDE_KINDS[side]).scenario_fields(),
        "protocol": "http",
        "settings": {"max_batch_size": 8, "dynamic_batching": False, "instance_count": 1},
    }
    if side == "container":
        server["image"] = TRITON_CPU_IMAGE
    return {
        "name": name,
        "seed": 0,
        "output": str(output),
        "models": {"grid": {"types": ["dense"], "depths": [2], "widths": [32]}},
        "servers": [server],
        "workload": {
            "mode": "closed",
            "concurrency": [CONCURRENCY],
            "batch_sizes": [1],
            "duration_s": 1.0 if quick else 5.0,
            "warmup_s": 0.3 if quick else 1.0,
        },
        "links": ["direct"],
    }


def serving_problem(side: Side) -> str | None:
    """Why serving cannot be measured on `side` here (one sentence), or None."""
    if side == "host":
        return None
    problem = container_problem(TRITON_CPU_IMAGE)
    return f"serving in a container: {problem}" if problem else None


def measure_serving(side: Side, run_dir: Path, rep: int, *, quick: bool) -> list[Measurement]:
    """Run the serving scenario once on `side`; its figures as measurements.

    A run stopped by Ctrl-C raises KeyboardInterrupt (the scenario runner caught the
    signal and kept its records); a run that measured nothing raises `ProbeFailed`.
    """
    from servebench.scenario.runner import ScenarioRunner

    problem = serving_problem(side)
    if problem:
        raise ProbeUnavailable(problem)
    folder = run_dir / SERVING_DIR
    folder.mkdir(exist_ok=True)
    name = f"serving-{side}-r{rep}"
    scenario_path = folder / f"{name}.yaml"
    scenario = serving_scenario(side, name, folder, quick=quick)
    scenario_path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    outcome = ScenarioRunner(scenario_path, console=Console(quiet=True)).run()
    if outcome.status == "interrupted":
        raise KeyboardInterrupt(outcome.reason)
    rows = [r for r in outcome.directory.rows if r.get("status") == "ok"]
    if not rows:
        why = outcome.reason or "no trial finished"
        raise ProbeFailed(f"{SERVING_PROBE} on the {side}: {why}")
    return _measurements(rows[0], outcome.directory.cold_starts, outcome.directory.path.name)


def _measurements(row: TrialRow, cold_starts: list[dict[str, Any]], run: str) -> list[Measurement]:
    detail = {"run": run, "model": str(row.get("model")), "concurrency": CONCURRENCY}
    wall_s = row.get("duration")
    found = [
        Measurement(
            SERVING_PROBE, metric, float(row[column]), unit, better, wall_s=wall_s, detail=detail
        )
        for column, (metric, unit, better) in _ROW_METRICS.items()
        if _number(row.get(column))
    ]
    found += _cold_start(cold_starts, detail)
    return found


def _cold_start(
    cold_starts: list[dict[str, Any]], detail: dict[str, str | float | int]
) -> list[Measurement]:
    """The server's start as both sides can be compared: `start_to_ready` is process
    start to ready on the host, and container create + start + ready in the container
    (the container's own start is part of what a container costs); then model load and
    first inference, and their sum, the wait from "start it" to the first answer."""
    phases = {
        str(c.get("phase")): float(c["seconds"])
        for c in cold_starts
        if c.get("phase") and _number(c.get("seconds"))
    }
    if "server_ready" not in phases:
        return []
    figures = {"start_to_ready": phases.get("container_start", 0.0) + phases["server_ready"]}
    for phase in ("model_load", "first_inference"):
        if phase in phases:
            figures[phase] = phases[phase]
    if len(figures) == 3:
        figures["to_first_answer"] = sum(figures.values())
    detail = {**detail, **{f"{k}_s": v for k, v in phases.items() if k == "container_start"}}
    return [
        Measurement(SERVING_PROBE, k, v, "s", "lower", detail=detail) for k, v in figures.items()
    ]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and value == value  # NaN is not a figure
