"""Runs samplers beside a trial, in a background thread, at a fixed interval.

The recorder samples once when started and once when stopped, so counters (server
metrics) have a value at both ends of the trial and their difference is the trial's; in
between it samples every `interval_s` (default 0.5 s) on a fixed schedule that does not
drift with sampling time. Everything a sampler could not do becomes a note, once.

The server's counters of a trial cover its measured window: `mark_measured` reads them
before the first measured send (the load engine waits for it) and `stop` after the last
measured completion. Where no request is in flight at a reading (closed loop's start, every
end), the server's counters are first let settle (`PrometheusSampler.wait_until_quiet`),
so they count exactly the requests the client measured.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from servebench.telemetry.aggregate import aggregate
from servebench.telemetry.gpu import NvmlSampler
from servebench.telemetry.process import HostSampler, ProcessTreeSampler
from servebench.telemetry.prometheus import PrometheusSampler
from servebench.telemetry.rows import TelemetryRow
from servebench.telemetry.sampler import Sampler, SamplerUnavailable

DEFAULT_INTERVAL_S = 0.5


class TelemetryRecorder:
    """Collects `TelemetryRow`s from `samplers` while running; see `for_server`."""

    def __init__(
        self,
        samplers: Sequence[Sampler],
        *,
        trial_id: str = "",
        interval_s: float = DEFAULT_INTERVAL_S,
        notes: Sequence[str] = (),
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s: must be > 0, got {interval_s}")
        self.samplers = list(samplers)
        self.trial_id = trial_id
        self.interval_s = interval_s
        self.notes: list[str] = list(notes)
        self.rows: list[TelemetryRow] = []
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self.measured_from: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @classmethod
    def for_server(
        cls,
        *,
        pid: int | None = None,
        metrics_url: str | None = None,
        container: Callable[[], Sampler] | None = None,
        gpu: bool = True,
        host: bool = True,
        trial_id: str = "",
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> TelemetryRecorder:
        """The usual set: GPUs (NVML), the server's process tree (if its pid is known),
        the host, and the server's Prometheus page (if it has one).

        `container` makes the sampler of a server in a container (its engine's stats,
        `ContainerStatsSampler`); it replaces the process tree, which it already counts.
        """
        samplers: list[Sampler] = []
        notes: list[str] = []
        factories: list[Callable[[], Sampler]] = []
        if gpu:
            factories.append(NvmlSampler)
        if container is not None:
            factories.append(container)
        elif pid is not None:
            factories.append(lambda: ProcessTreeSampler(pid))
        if host:
            factories.append(HostSampler)
        if metrics_url:
            factories.append(lambda: PrometheusSampler(metrics_url))
        for make in factories:
            try:
                samplers.append(make())
            except SamplerUnavailable as err:
                notes.append(str(err))
        return cls(samplers, trial_id=trial_id, interval_s=interval_s, notes=notes)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> TelemetryRecorder:
        if self._thread is not None:
            raise RuntimeError("telemetry recorder already started")
        self.started_at = time.time()
        self.sample_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="servebench-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[TelemetryRow]:
        """Stop sampling, take the closing sample, release the samplers; return all rows.

        Safe to call again (e.g. from a cleanup path after an explicit stop): samplers are
        released once."""
        if self._closed:
            return self.snapshot()
        self._closed = True
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._settle_counters()
            self.sample_once()
            self.stopped_at = time.time()
        for sampler in self.samplers:
            try:
                sampler.close()
            except Exception as err:
                self._note(f"{sampler.source}: close failed: {err}")
        return self.snapshot()

    def __enter__(self) -> TelemetryRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mark_measured(self, *, quiet: bool = False) -> None:
        """The warm-up is over: sample now and aggregate only from here on.

        Warm-up requests are not in the client's counts, so the server's counters must not
        have them either (9,554 counted by Triton vs 7,315 by the client, before this).
        `quiet`: no request is in flight now, so the server's counters are let settle
        first (the reading then has every warm-up request in it).
        """
        if quiet:
            self._settle_counters()
        self.measured_from = time.time()
        self.sample_once()

    def _settle_counters(self) -> None:
        for sampler in self.samplers:
            if isinstance(sampler, PrometheusSampler) and not sampler.wait_until_quiet():
                self._note(f"{sampler.source}: request counters still moving at a reading")

    # -- sampling -----------------------------------------------------------------------

    def sample_once(self) -> None:
        """Ask every sampler once and keep what they read."""
        for sampler in list(self.samplers):
            stamp = time.time()
            try:
                readings = sampler.sample()
            except SamplerUnavailable as err:
                self._note(str(err))
                self.samplers.remove(sampler)
                continue
            except Exception as err:  # a failed scrape must not end the trial
                self._note(f"{sampler.source}: {err}")
                continue
            rows = [
                TelemetryRow(self.trial_id, stamp, sampler.source, r.metric, r.value, r.labels)
                for r in readings
            ]
            with self._lock:
                self.rows.extend(rows)

    def _run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.sample_once()
            next_at += self.interval_s
            if next_at < time.monotonic():  # sampling took longer than the interval
                next_at = time.monotonic() + self.interval_s

    def _note(self, text: str) -> None:
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    # -- results ------------------------------------------------------------------------

    def snapshot(self) -> list[TelemetryRow]:
        with self._lock:
            return list(self.rows)

    def summary(self, model: str | None = None) -> dict[str, float | str | None]:
        """The per-trial aggregates (see `telemetry.aggregate.aggregate`), from the end of the
        warm-up when `mark_measured` was called."""
        return aggregate(self.snapshot(), model=model, since=self.measured_from)
