"""Arrival processes for open-loop load: when each request is meant to be sent.

An arrival process yields *offsets* (seconds from the start of the schedule, never
decreasing). The engine turns offsets into intended send times and measures latency from
them, so the schedule never bends to the server's speed (no coordinated omission).

Rate-driven processes share one idea: a piecewise-linear rate profile r(t) with cumulative
count Λ(t) = ∫r. A *constant* process sends request k at Λ⁻¹(k); a *Poisson* process sends
at Λ⁻¹ of a unit-rate Poisson process's arrival times (time rescaling), which is exact for
constant, step and linear profiles alike. Trace replay is separate: it follows a file of
inter-arrival times as perf_analyzer's `--request-intervals` does.
"""

from __future__ import annotations

import bisect
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servebench.common.textfile import TextFileError, read_text

# Poisson gaps are drawn in blocks: one numpy call per block instead of one per request.
_BLOCK = 4096


@dataclass(frozen=True)
class Segment:
    """Rate r(t) = rate + slope * (t - start) on [start, next segment's start)."""

    start: float
    rate: float
    slope: float = 0.0


class RateProfile:
    """A piecewise-linear request rate over time; the last segment extends for ever."""

    def __init__(self, segments: Sequence[Segment]):
        if not segments:
            raise ValueError("rate profile: needs at least one segment")
        if segments[0].start != 0.0:
            raise ValueError("rate profile: the first segment must start at 0 s")
        for before, after in itertools.pairwise(segments):
            if after.start <= before.start:
                raise ValueError("rate profile: segment starts must increase")
        for seg in segments:
            if seg.rate < 0:
                raise ValueError(f"rate profile: negative rate {seg.rate} at {seg.start} s")
        if segments[-1].slope != 0.0:
            raise ValueError("rate profile: the last segment must be flat")
        self.segments = tuple(segments)
        # Cumulative count at each segment start, so Λ and Λ⁻¹ are one lookup away.
        cumulative = [0.0]
        for seg, nxt in itertools.pairwise(self.segments):
            cumulative.append(cumulative[-1] + _area(seg, nxt.start - seg.start))
        self._cumulative = cumulative
        self._starts = [seg.start for seg in self.segments]

    def cumulative(self, t: float) -> float:
        """Λ(t): the expected number of requests in [0, t)."""
        i = self._index(t)
        seg = self.segments[i]
        return self._cumulative[i] + _area(seg, t - seg.start)

    def inverse(self, count: float) -> float:
        """Λ⁻¹(count): the time by which `count` requests are due; inf if never."""
        i = max(0, bisect.bisect_right(self._cumulative, count) - 1)
        seg = self.segments[i]
        need = count - self._cumulative[i]
        a, b = seg.rate, seg.slope
        if b == 0.0:
            if a == 0.0:
                return math.inf
            return seg.start + need / a
        # Solve a*u + b*u²/2 = need for the smallest u >= 0.
        disc = a * a + 2.0 * b * need
        u = (-a + math.sqrt(max(disc, 0.0))) / b
        return seg.start + u

    def _index(self, t: float) -> int:
        return max(0, bisect.bisect_right(self._starts, t) - 1)


def _area(seg: Segment, width: float) -> float:
    return seg.rate * width + 0.5 * seg.slope * width * width


class ArrivalProcess(ABC):
    """Yields the offsets of intended sends; may be infinite."""

    @abstractmethod
    def offsets(self) -> Iterator[float]: ...

    @abstractmethod
    def expected(self, t0: float, t1: float) -> float:
        """Scheduled number of requests in [t0, t1): what `target_rate` is computed from."""

    @abstractmethod
    def describe(self) -> str: ...


class ProfileArrivals(ArrivalProcess):
    """Constant or Poisson arrivals following a rate profile."""

    def __init__(self, profile: RateProfile, *, poisson: bool = False, seed: int = 0, label: str):
        self.profile = profile
        self.poisson = poisson
        self.seed = seed
        self.label = label

    def offsets(self) -> Iterator[float]:
        inverse = self.profile.inverse
        # A flat profile needs no inversion: k / rate is the same thing, cheaper.
        flat = len(self.profile.segments) == 1
        rate = self.profile.segments[0].rate
        if not self.poisson:
            k = 0
            while True:
                t = k / rate if flat else inverse(k)
                if t == math.inf:
                    return
                yield t
                k += 1
        rng = np.random.default_rng(self.seed)
        count = 0.0
        while True:
            for gap in rng.exponential(1.0, _BLOCK).tolist():
                count += gap
                t = count / rate if flat else inverse(count)
                if t == math.inf:
                    return
                yield t

    def expected(self, t0: float, t1: float) -> float:
        return self.profile.cumulative(t1) - self.profile.cumulative(t0)

    def describe(self) -> str:
        return f"{self.label}{' (Poisson)' if self.poisson else ''}"


class TraceArrivals(ArrivalProcess):
    """Replays inter-arrival gaps, looping over them as perf_analyzer does.

    As in perf_analyzer, the first gap comes before the first request: gaps 0.1, 0.2, 0.5
    send at 0.1, 0.3, 0.8, 0.9, 1.1, 1.6, ...
    """

    def __init__(self, intervals: Sequence[float], *, loop: bool = True, source: str = "trace"):
        gaps = np.asarray(intervals, dtype=np.float64)
        if gaps.size == 0:
            raise ValueError(f"{source}: no intervals")
        if not np.all(np.isfinite(gaps)) or np.any(gaps < 0):
            raise ValueError(f"{source}: intervals must be finite and >= 0")
        if loop and gaps.sum() <= 0:
            raise ValueError(f"{source}: looping over all-zero intervals never ends")
        self.gaps = gaps
        self.loop = loop
        self.source = source
        self._times = np.cumsum(gaps)
        self._period = float(self._times[-1])

    @classmethod
    def from_file(cls, path: str | Path, *, loop: bool = True) -> TraceArrivals:
        """Read perf_analyzer's `--request-intervals` file: microseconds, one per line."""
        path = Path(path)
        try:
            lines = read_text(path).splitlines()
        except TextFileError as exc:
            raise ValueError(f"request intervals file {exc}") from None
        gaps = []
        for number, line in enumerate(lines, start=1):
            text = line.strip()
            if not text:
                continue
            try:
                gaps.append(float(text) * 1e-6)
            except ValueError:
                raise ValueError(
                    f"request intervals file {path}, line {number}: {text!r} is not a number "
                    "of microseconds"
                ) from None
        return cls(gaps, loop=loop, source=f"request intervals file {path}")

    def offsets(self) -> Iterator[float]:
        times = self._times.tolist()
        cycle = 0
        while True:
            base = cycle * self._period  # multiplied, not summed: no drift over long runs
            for t in times:
                yield base + t
            if not self.loop:
                return
            cycle += 1

    def expected(self, t0: float, t1: float) -> float:
        return float(self._count_before(t1) - self._count_before(t0))

    def _count_before(self, t: float) -> int:
        if not self.loop:
            return int(np.searchsorted(self._times, t, side="left"))
        # Cycle c sends at c*period + times, all in (c*period, (c+1)*period]: only the
        # cycles ending at or after t can be partly counted.
        last = int(t // self._period)
        first = max(last - 1, 0)
        count = first * self._times.size
        for c in range(first, last + 1):
            count += int(np.searchsorted(self._times, t - c * self._period, side="left"))
        return count

    def describe(self) -> str:
        mean = self._period / self.gaps.size
        return (
            f"trace of {self.gaps.size} intervals (mean {1 / mean:.6g} req/s)" if mean else "trace"
        )


def constant(rate: float) -> ProfileArrivals:
    """Evenly spaced requests at `rate` per second."""
    _check_positive("rate", rate)
    return ProfileArrivals(RateProfile([Segment(0.0, rate)]), label=f"constant {rate:g} req/s")


def poisson(rate: float, seed: int = 0) -> ProfileArrivals:
    """Poisson arrivals with mean `rate` per second, reproducible from `seed`."""
    _check_positive("rate", rate)
    return ProfileArrivals(
        RateProfile([Segment(0.0, rate)]), poisson=True, seed=seed, label=f"{rate:g} req/s"
    )


def step(
    start: float,
    step: float,
    end: float,
    step_duration: float,
    *,
    poisson: bool = False,
    seed: int = 0,
) -> ProfileArrivals:
    """ghz's `--load-schedule=step`: start, change by `step` every `step_duration`, hold at end."""
    _check_schedule(start, step, end)
    _check_positive("load step duration", step_duration)
    segments = []
    rate, t = start, 0.0
    while True:
        segments.append(Segment(t, rate))
        if rate == end:
            break
        rate = min(rate + step, end) if step > 0 else max(rate + step, end)
        t += step_duration
    return ProfileArrivals(
        RateProfile(segments),
        poisson=poisson,
        seed=seed,
        label=f"step {start:g}→{end:g} req/s by {step:g} every {step_duration:g} s",
    )


def linear(
    start: float, slope: float, end: float, *, poisson: bool = False, seed: int = 0
) -> ProfileArrivals:
    """ghz's `--load-schedule=line`: start, change by `slope` req/s each second, hold at end."""
    _check_schedule(start, slope, end)
    ramp = (end - start) / slope
    segments = [Segment(0.0, start, slope), Segment(ramp, end)] if ramp > 0 else [Segment(0, end)]
    return ProfileArrivals(
        RateProfile(segments),
        poisson=poisson,
        seed=seed,
        label=f"line {start:g}→{end:g} req/s at {slope:g} req/s²",
    )


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")


def _check_schedule(start: float, step: float, end: float) -> None:
    if not (start >= 0 and math.isfinite(start)):
        raise ValueError(f"load start: must be >= 0, got {start!r}")
    if not (end > 0 and math.isfinite(end)):
        raise ValueError(f"load end: must be > 0 (the rate the schedule holds), got {end!r}")
    if step == 0 or not math.isfinite(step):
        raise ValueError(f"load step: must be a finite non-zero number, got {step!r}")
    if (end - start) * step < 0:
        raise ValueError(f"load step: {step:g} moves away from load end {end:g}")
