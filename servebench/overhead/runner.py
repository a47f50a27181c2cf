"""`servebench overhead run`: every probe on the host and in the container, interleaved,
repeated, and compared.

Each probe runs host, container, host, container, … `repeats` times over, so a drift in
the machine's load (these machines are shared) falls on both sides alike instead of on
whichever side ran second. Every figure lands in overhead_raw.csv as soon as it is
measured, and overhead.csv (one row per metric: both sides' medians and spread, overhead
% with its bootstrap interval) is rewritten after every step, both atomically: a run that
fails, or is stopped by Ctrl-C or SIGTERM, keeps everything it measured, and run.json
says how it ended and why.

A side that cannot run a probe says why in one sentence (no engine, no image, no GPU):
run.json keeps the sentence and the rest of the run goes on. A probe that crashes is
recorded as failed for that side and not repeated there.
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from servebench.common.wellknown import SERVEBENCH_IMAGE
from servebench.overhead.measure import Measurement, Side
from servebench.overhead.probes import PROBES, ProbeUnavailable
from servebench.overhead.serving import SERVING_PROBE, measure_serving
from servebench.overhead.sides import (
    ContainerSide,
    ContainerUnavailable,
    HostSide,
    ProbeFailed,
    ProbeSide,
)
from servebench.overhead.stats import (
    OVERHEAD_COLUMNS,
    Spread,
    compare_measurements,
    to_rows,
    unpaired,
)
from servebench.results import (
    OVERHEAD_FILE,
    OVERHEAD_RAW_FILE,
    RunDirectory,
    RunStatus,
    new_run_id,
    write_atomically,
)

ALL_PROBES: tuple[str, ...] = (*PROBES, SERVING_PROBE)
DEFAULT_REPEATS = 5
SIDES: tuple[Side, ...] = ("host", "container")
RAW_COLUMNS = (
    "order",
    "probe",
    "metric",
    "side",
    "rep",
    "value",
    "unit",
    "better",
    "cpu_s",
    "wall_s",
    "measured_at",
    "detail",
)
HOST_ONLY_REASON = "--host-only: the container side was not asked for."


@dataclass(frozen=True)
class Step:
    """One probe run on one side: the unit the interleaved schedule is made of."""

    probe: str
    rep: int
    side: Side


def schedule(probes: tuple[str, ...], repeats: int, sides: tuple[Side, ...]) -> list[Step]:
    """Probe by probe, repetition by repetition, the sides in turn: host, container, host, …"""
    return [
        Step(probe, rep, side)
        for probe in probes
        for rep in range(1, repeats + 1)
        for side in sides
    ]


@dataclass(frozen=True)
class OverheadSettings:
    probes: tuple[str, ...] = ALL_PROBES
    repeats: int = DEFAULT_REPEATS
    quick: bool = False
    host_only: bool = False
    output: Path = Path("results")
    image: str = SERVEBENCH_IMAGE

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"--repeats: must be at least 1, got {self.repeats}")
        if not self.probes:
            raise ValueError("--probes: name at least one probe")
        unknown = [p for p in self.probes if p not in ALL_PROBES and "." not in p]
        if unknown:
            raise ValueError(
                f"--probes: unknown {', '.join(unknown)}; expected some of {', '.join(ALL_PROBES)}"
            )

    def describe(self) -> str:
        """The settings as YAML: the result directory's "scenario as run"."""
        data = {
            "command": "servebench overhead run",
            "probes": list(self.probes),
            "repeats": self.repeats,
            "quick": self.quick,
            "host_only": self.host_only,
            "image": self.image,
        }
        return yaml.safe_dump(data, sort_keys=False)


@dataclass
class OverheadOutcome:
    directory: RunDirectory
    status: str
    reason: str | None
    container_reason: str | None


@dataclass
class _Progress:
    raw: list[dict[str, Any]] = field(default_factory=list)
    measurements: list[tuple[Side, Measurement]] = field(default_factory=list)
    unavailable: dict[str, dict[str, str]] = field(default_factory=dict)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)
    steps_done: int = 0

    def skipped(self, step: Step) -> bool:
        return step.side in self.unavailable.get(step.probe, {}) or step.side in self.failed.get(
            step.probe, {}
        )


class OverheadRunner:
    """Runs the schedule into a new result directory under `settings.output`.

    `on_step(step, outcome)` is told after every step, outcome being the measurements'
    count or the sentence why there were none (the CLI prints it)."""

    def __init__(
        self,
        settings: OverheadSettings,
        on_step: Callable[[Step, int | str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.on_step = on_step or (lambda step, outcome: None)
        self.progress = _Progress()

    def run(self) -> OverheadOutcome:
        """Measure; a `ResultDirError` (an unusable --out) comes before anything runs."""
        settings = self.settings
        directory = RunDirectory.create(
            settings.output,
            new_run_id("overhead"),
            settings.describe(),
            Path("servebench overhead run"),
            unique=True,
        )
        sides = ("host",) if settings.host_only else SIDES
        steps = schedule(settings.probes, settings.repeats, sides)
        directory.run["source"] = "servebench overhead"
        overhead: dict[str, Any] = {
            "probes": list(settings.probes),
            "repeats": settings.repeats,
            "quick": settings.quick,
            "image": settings.image,
            "sides": list(sides),
            "container_not_measured": HOST_ONLY_REASON if settings.host_only else None,
            "steps_planned": len(steps),
        }
        directory.run["overhead"] = overhead
        directory.write_run()
        status, reason = RunStatus.COMPLETE, None
        workdir = Path(tempfile.mkdtemp(prefix="servebench-overhead-"))
        runners: dict[Side, ProbeSide] = {}
        try:
            # Per step: the serving probe's scenario runner puts its own handlers in and
            # takes them out again, which leaves SIGTERM at its default.
            with _sigterm_as_interrupt():
                runners = self._open_sides(directory, workdir, steps)
            for order, step in enumerate(steps, start=1):
                if not self.progress.skipped(step):
                    with _sigterm_as_interrupt():
                        self._step(order, step, runners, directory)
        except KeyboardInterrupt as stop:
            status = RunStatus.INTERRUPTED
            reason = str(stop) if str(stop) else "stopped by Ctrl-C (SIGINT)"
        except Exception as err:  # the run cannot go on; what it measured stays
            status, reason = RunStatus.FAILED, f"{type(err).__name__}: {err}"
        finally:
            for side in runners.values():
                side.close()
            shutil.rmtree(workdir, ignore_errors=True)
            status, reason = self._close(directory, status, reason)
        return OverheadOutcome(directory, status, reason, overhead["container_not_measured"])

    # -- the steps --------------------------------------------------------------------------

    def _open_sides(
        self, directory: RunDirectory, workdir: Path, steps: list[Step]
    ) -> dict[Side, ProbeSide]:
        """The host side, and the container if a probe other than serving runs there; a
        container that cannot start makes those probes unavailable on it, with why."""
        scratch, overlay = workdir / "scratch", workdir / "overlay"
        scratch.mkdir()
        overlay.mkdir()
        sides: dict[Side, ProbeSide] = {"host": HostSide(scratch, overlay)}
        in_container = sorted(
            {s.probe for s in steps if s.side == "container" and s.probe != SERVING_PROBE}
        )
        if not in_container:
            return sides
        try:
            container = ContainerSide(scratch, self.settings.image)
        except ContainerUnavailable as why:
            directory.run["overhead"]["container_not_measured"] = str(why)
            for probe in in_container:
                self.progress.unavailable.setdefault(probe, {})["container"] = str(why)
            directory.write_run()
            return sides
        for note in container.notes:
            directory.warn(note)
        sides["container"] = container
        return sides

    def _step(
        self, order: int, step: Step, sides: dict[Side, ProbeSide], directory: RunDirectory
    ) -> None:
        progress = self.progress
        started = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            if step.probe == SERVING_PROBE:
                found = measure_serving(
                    step.side, directory.path, step.rep, quick=self.settings.quick
                )
            else:
                found = sides[step.side].run(step.probe, quick=self.settings.quick)
        except ProbeUnavailable as why:
            progress.unavailable.setdefault(step.probe, {})[step.side] = str(why)
            self._save(directory)
            self.on_step(step, f"unavailable: {why}")
            return
        except ProbeFailed as err:
            progress.failed.setdefault(step.probe, {})[step.side] = str(err)
            self._save(directory)
            self.on_step(step, f"failed: {err}")
            return
        for m in found:
            progress.measurements.append((step.side, m))
            progress.raw.append(
                {
                    "order": order,
                    "probe": m.probe,
                    "metric": m.metric,
                    "side": step.side,
                    "rep": step.rep,
                    "value": m.value,
                    "unit": m.unit,
                    "better": m.better,
                    "cpu_s": m.cpu_s,
                    "wall_s": m.wall_s,
                    "measured_at": started,
                    "detail": json.dumps(m.detail, sort_keys=True),
                }
            )
        progress.steps_done += 1
        self._save(directory)
        self.on_step(step, len(found))

    # -- the files --------------------------------------------------------------------------

    def _save(self, directory: RunDirectory) -> None:
        """Rewrite overhead_raw.csv, overhead.csv and run.json's account of the run."""
        progress = self.progress
        raw = pd.DataFrame(progress.raw, columns=list(RAW_COLUMNS))
        write_atomically(
            directory.path / OVERHEAD_RAW_FILE, lambda tmp: raw.to_csv(tmp, index=False)
        )
        table = pd.DataFrame(overhead_rows(progress.measurements), columns=list(OVERHEAD_COLUMNS))
        write_atomically(directory.path / OVERHEAD_FILE, lambda tmp: table.to_csv(tmp, index=False))
        directory.run["overhead"].update(
            steps_done=progress.steps_done,
            unavailable=progress.unavailable,
            failed=progress.failed,
        )
        directory.write_run()

    def _close(
        self, directory: RunDirectory, status: str, reason: str | None
    ) -> tuple[str, str | None]:
        """Write the files a last time and close run.json; a run that went through with
        failed probes is partial, one that measured nothing failed."""
        progress = self.progress
        if status == RunStatus.COMPLETE and not progress.measurements:
            why = _first_reason(progress.failed) or _first_reason(progress.unavailable)
            status, reason = RunStatus.FAILED, f"nothing was measured ({why or 'no step ran'})"
        elif status == RunStatus.COMPLETE and progress.failed:
            count = sum(len(v) for v in progress.failed.values())
            status, reason = (
                RunStatus.PARTIAL,
                f"{count} probe runs failed (see run.json, overhead.failed)",
            )
        try:
            self._save(directory)
        except OSError as err:
            if status != RunStatus.INTERRUPTED:
                status, reason = RunStatus.FAILED, f"cannot write the results ({err})"
        directory.finish(status, reason)
        return status, reason


def overhead_rows(measurements: list[tuple[Side, Measurement]]) -> list[dict[str, Any]]:
    """overhead.csv's rows: every metric both sides measured, compared; then every metric
    only one side measured (a --host-only run, a probe unavailable on the other side),
    with that side's figures and the comparison cells empty."""
    host = [m for side, m in measurements if side == "host"]
    container = [m for side, m in measurements if side == "container"]
    rows: list[dict[str, Any]] = to_rows(compare_measurements(host, container))
    by_side = {"host": host, "container": container}
    for probe, metric, side in unpaired(host, container):
        found = [m for m in by_side[side] if (m.probe, m.metric) == (probe, metric)]
        spread = Spread.of(np.asarray([m.value for m in found], dtype=np.float64))
        cpu = [m.cpu_s for m in found if m.cpu_s is not None]
        rows.append(
            {
                "probe": probe,
                "metric": metric,
                "unit": found[0].unit,
                "better": found[0].better,
                f"{side}_n": spread.n,
                f"{side}_median": spread.median,
                f"{side}_q1": spread.q1,
                f"{side}_q3": spread.q3,
                f"{side}_min": spread.minimum,
                f"{side}_max": spread.maximum,
                f"{side}_cpu_s": float(np.median(cpu)) if cpu else None,
                "ci_note": f"measured on the {side} only",
            }
        )
    return rows


def _first_reason(reasons: dict[str, dict[str, str]]) -> str | None:
    for probe, by_side in reasons.items():
        for side, why in by_side.items():
            return f"{probe} on the {side}: {why}"
    return None


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does (what was measured is kept), in the main
    thread; the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("stopped by SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
