"""What a load run does: arrivals or workers, when to stop, limits, and how to judge it.

Validation happens here, once, with messages that name the field, so the engine's hot
path can trust every value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servebench.clients.input_data import InputData
from servebench.common.quantiles import CONFIDENCE
from servebench.load.arrivals import ArrivalProcess
from servebench.load.summary import (
    EARLY_STOP_MIN_DURATION,
    EARLY_STOP_MIN_REQUESTS,
    LAG_RATIO,
    LATE_LIMIT,
    LATE_THRESHOLD,
    MAX_ERROR_SHARE,
    RATE_TOLERANCE,
    START_SKEW_LIMIT,
)


@dataclass(frozen=True)
class StabilitySettings:
    """perf_analyzer's stability mode: windows until the last `agree` ones agree."""

    window: float = 5.0  # seconds per measurement window (perf_analyzer -p)
    tolerance: float = 0.10  # allowed deviation from the windows' mean (perf_analyzer -s)
    percentile: float = 99.0  # the latency compared besides throughput
    max_windows: int = 10  # perf_analyzer -r
    agree: int = 3

    def __post_init__(self) -> None:
        _positive("stability.window", self.window)
        _positive("stability.tolerance", self.tolerance)
        if not 0 < self.percentile < 100:
            raise ValueError(f"stability.percentile: must be in (0, 100), got {self.percentile}")
        if self.agree < 2:
            raise ValueError(f"stability.agree: needs at least 2 windows, got {self.agree}")
        if self.max_windows < self.agree:
            raise ValueError(
                f"stability.max_windows: must be >= agree ({self.agree}), got {self.max_windows}"
            )


EARLY_STOP_EVERY = 1.0  # seconds between checks (each one flushes the records: not too often)


@dataclass(frozen=True)
class EarlyStopSettings:
    """End a load once its SLO question is decided: the `percentile`-th latency of the
    requests answered so far is within `bound_s` (the interval's high bound is) or over it
    (its low bound is), at the load's two-sided `LoadSettings.confidence` (one level for the
    stop and the summary's intervals, so the row never disagrees with the stop; see
    `common.quantiles.decides`), checked every `every` seconds, never before `min_duration` seconds and `min_requests`
    answered requests of the measured window. Only the requests answered by then count: a
    request in flight is not a latency yet (those in flight at the stop still finish and
    are in the summary, so its row decides on a few more). A load that never decides runs
    to its end."""

    percentile: float
    bound_s: float
    min_duration: float = EARLY_STOP_MIN_DURATION
    min_requests: int = EARLY_STOP_MIN_REQUESTS
    every: float = EARLY_STOP_EVERY

    def __post_init__(self) -> None:
        if not 0 < self.percentile < 100:
            raise ValueError(f"stop.percentile: must be in (0, 100), got {self.percentile}")
        _positive("stop.bound_s", self.bound_s)
        if self.min_duration < 0 or not math.isfinite(self.min_duration):
            raise ValueError(f"stop.min_duration_s: must be >= 0 s, got {self.min_duration}")
        if self.min_requests < 1:
            raise ValueError(f"stop.min_requests: must be >= 1, got {self.min_requests}")
        _positive("stop.every", self.every)


@dataclass(frozen=True)
class LoadSettings:
    """One load run. Give `arrivals` for open loop or `concurrency` for closed loop.

    Stop rules (MLPerf style): `duration` only, `count` only, or both (run until both
    minimums are met); `stability` replaces them. `early_stop` may end it sooner, once its
    SLO question is decided, at `confidence`: the level of every interval the summary
    reports too (with stability, whichever decides first ends the load). `warmup` seconds come first and are not recorded. Latency is measured
    from the intended send time in open loop and from the actual send in closed loop.
    """

    arrivals: ArrivalProcess | None = None
    concurrency: int | None = None
    think_time: float = 0.0
    duration: float | None = None
    count: int | None = None
    warmup: float = 0.0
    stability: StabilitySettings | None = None
    timeout: float = 10.0
    max_in_flight: int | None = 10_000
    batch_size: int = 1
    seed: int = 0
    trial_id: str = ""
    # Generators sending the load, each a part of its plan (`load.plan`): above 1, or with
    # a Dask `scheduler` (tcp://host:port), a gang on Dask (`load.gang`): a LocalCluster of
    # that many worker processes here, or that many workers of the scheduler's cluster.
    generators: int = 1
    scheduler: str | None = None
    # A gang whose generators may have started further apart than this (s) is INVALID.
    start_skew_limit: float = START_SKEW_LIMIT
    # How the generator's lateness is judged (see load.summary): a send more than
    # `late_threshold` s late is late; over `late_limit` of them is a warning; sending
    # `rate_tolerance` short of the schedule, or a lag p99 over `lag_ratio` of latency p99,
    # is INVALID.
    late_threshold: float = LATE_THRESHOLD
    late_limit: float = LATE_LIMIT
    rate_tolerance: float = RATE_TOLERANCE
    lag_ratio: float = LAG_RATIO
    max_error_share: float = MAX_ERROR_SHARE
    # Seconds of nothing but refused or dropped connections after which the run stops: the
    # server is gone, and timing out every remaining request against it measures nothing.
    # None keeps going (a test of a server's restart, say).
    unreachable_after: float | None = 2.0
    chunk_rows: int = 8192
    # Real input data (`clients.input_data`): requests cycle through its samples instead
    # of one random batch drawn from `seed`.
    input_data: InputData | None = None
    early_stop: EarlyStopSettings | None = None
    # Two-sided confidence of the summary's percentile intervals (`LoadSummary`).
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if (self.arrivals is None) == (self.concurrency is None):
            raise ValueError(
                "load: give exactly one of arrivals (open loop) or concurrency (closed loop)"
            )
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"load.concurrency: must be >= 1, got {self.concurrency}")
        if self.think_time < 0 or not math.isfinite(self.think_time):
            raise ValueError(f"load.think_time: must be >= 0 s, got {self.think_time}")
        if self.think_time and self.arrivals is not None:
            raise ValueError("load.think_time: only applies to closed loop (concurrency)")
        if self.stability is not None:
            if self.duration is not None or self.count is not None:
                raise ValueError(
                    "load.stability: decides when to stop itself; drop duration and count"
                )
        elif self.duration is None and self.count is None:
            raise ValueError("load: give duration, count, or both (or stability)")
        if self.duration is not None:
            _positive("load.duration", self.duration)
        if self.count is not None and self.count < 1:
            raise ValueError(f"load.count: must be >= 1, got {self.count}")
        if self.warmup < 0 or not math.isfinite(self.warmup):
            raise ValueError(f"load.warmup: must be >= 0 s, got {self.warmup}")
        _positive("load.timeout", self.timeout)
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError(f"load.max_in_flight: must be >= 1, got {self.max_in_flight}")
        if self.batch_size < 1:
            raise ValueError(f"load.batch_size: must be >= 1, got {self.batch_size}")
        if self.generators < 1:
            raise ValueError(f"load.generators: must be >= 1, got {self.generators}")
        if self.concurrency is not None and self.generators > self.concurrency:
            raise ValueError(
                f"load.generators: {self.generators} generators need at least as many "
                f"workers, concurrency is {self.concurrency}"
            )
        if self.scheduler is not None and not self.scheduler:
            raise ValueError("load.generators.scheduler: give a Dask address tcp://host:port")
        _positive("load.start_skew_limit", self.start_skew_limit)
        _positive("load.late_threshold", self.late_threshold)
        if not 0 <= self.late_limit <= 1:
            raise ValueError(f"load.late_limit: must be a share in [0, 1], got {self.late_limit}")
        if not 0 <= self.rate_tolerance < 1:
            raise ValueError(
                f"load.rate_tolerance: must be a share in [0, 1), got {self.rate_tolerance}"
            )
        _positive("load.lag_ratio", self.lag_ratio)
        if not 0 <= self.max_error_share <= 1:
            raise ValueError(
                f"load.max_error_share: must be a share in [0, 1], got {self.max_error_share}"
            )
        if self.unreachable_after is not None:
            _positive("load.unreachable_after", self.unreachable_after)
        if self.chunk_rows < 1:
            raise ValueError(f"load.chunk_rows: must be >= 1, got {self.chunk_rows}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"load.confidence: must be in (0, 1), got {self.confidence}")

    @property
    def is_gang(self) -> bool:
        """Whether the load runs on a gang of generators on Dask (`load.gang`)."""
        return self.generators > 1 or self.scheduler is not None

    @property
    def mode(self) -> str:
        return "open" if self.arrivals is not None else "closed"

    def describe(self) -> str:
        if self.arrivals is not None:
            return self.arrivals.describe()
        think = f", think {self.think_time * 1e3:g} ms" if self.think_time else ""
        return f"concurrency {self.concurrency}{think}"


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
