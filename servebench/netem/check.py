"""Measure an emulated link the way a user would: ping-pong RTT and bulk throughput.

Used by `servebench netem check`, the tests and benchmarks/netem.py, against the local
probe server (probe.py) with the emulator (in its own process) in front of it.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from servebench.common.quantiles import percentiles
from servebench.netem.emulator import LinkEmulator
from servebench.netem.probe import (
    in_realtime_thread,
    measure_download,
    measure_rtts,
    measure_upload,
    probe_server,
)
from servebench.netem.profiles import LinkProfile
from servebench.netem.stats import LinkStats

T = TypeVar("T")

#: Bulk size when a direction has no rate limit (about a quarter second at 1 GB/s).
UNLIMITED_TRANSFER_BYTES = 256 * 1024 * 1024
MIN_TRANSFER_BYTES = 64 * 1024
#: Size of a ping-pong message (a small request, as in the paper's small-batch case).
PING_BYTES = 16


@dataclass(frozen=True)
class CheckRow:
    """One quantity: what the profile says and what came out of the link."""

    quantity: str
    unit: str  # how `configured` and `measured` are expressed for a person
    configured: float | None
    measured: float

    @property
    def error(self) -> float | None:
        """Relative error of measured against configured, None when nothing was configured."""
        if not self.configured:
            return None
        return (self.measured - self.configured) / self.configured


@dataclass
class CheckReport:
    profile: LinkProfile
    rows: list[CheckRow] = field(default_factory=list)
    rtts_s: list[float] = field(default_factory=list)
    stats: LinkStats | None = None

    def row(self, quantity: str) -> CheckRow:
        return next(r for r in self.rows if r.quantity == quantity)


def expected_rtt_s(profile: LinkProfile, size: int = PING_BYTES) -> float:
    """The profile's RTT plus the time the link takes to serialize a ping each way."""
    rtt = profile.rtt_s
    for direction in ("up", "down"):
        rate = profile.rate_bps(direction)  # type: ignore[arg-type]
        if rate is not None:
            rtt += size * 8 / rate
    return rtt


def robust_sd(values: list[float]) -> float:
    """Spread from the interquartile range: loss-delayed pings must not swamp the jitter."""
    q1, q3 = percentiles(values, [25, 75])
    return (q3 - q1) / 1.349  # the IQR of a normal distribution is 1.349 sd


def transfer_bytes(rate_bps: float | None, duration_s: float) -> int:
    """A transfer that lasts about `duration_s` on this link."""
    if rate_bps is None:
        return UNLIMITED_TRANSFER_BYTES
    return max(MIN_TRANSFER_BYTES, int(rate_bps / 8 * duration_s))


def check_profile(
    profile: LinkProfile,
    *,
    duration_s: float = 2.0,
    pings: int = 20,
    seed: int | None = None,
    realtime: bool = True,
) -> CheckReport:
    """Start a probe server and the emulator in front of it, measure, compare.

    With `realtime` (where allowed) the probe server and the measuring client run in a
    real-time scheduling class like the emulator, so a busy machine's run queue does not
    end up in the figures.
    """
    report = CheckReport(profile)

    def run(fn: Callable[..., T], *args: Any) -> T:
        return in_realtime_thread(fn, *args) if realtime else fn(*args)

    with probe_server(realtime=realtime) as server:
        baseline = statistics.median(run(measure_rtts, server, max(pings, 20)))
        emulator = LinkEmulator(profile, server, seed=seed, realtime=realtime)
        with emulator as address:
            rtts = run(functools.partial(measure_rtts, address, pings, size=PING_BYTES))
            down_bytes = transfer_bytes(profile.rate_bps("down"), duration_s)
            down = run(measure_download, address, down_bytes)
            up = run(measure_upload, address, transfer_bytes(profile.rate_bps("up"), duration_s))
        report.stats = emulator.final_stats
    report.rtts_s = rtts
    ms = 1e3
    report.rows += [
        CheckRow("RTT p50", "ms", expected_rtt_s(profile) * ms, statistics.median(rtts) * ms),
        CheckRow("RTT without emulator p50", "ms", None, baseline * ms),
        CheckRow("RTT jitter (IQR/1.349)", "ms", profile.jitter_s * ms, robust_sd(rtts) * ms),
        CheckRow("RTT max", "ms", None, max(rtts) * ms),
        CheckRow("throughput down", "Mbit/s", _mbps(profile.rate_bps("down")), down * 8 / 1e6),
        CheckRow("throughput up", "Mbit/s", _mbps(profile.rate_bps("up")), up * 8 / 1e6),
    ]
    if profile.loss and report.stats is not None:
        stats = report.stats
        segments = stats.up.segments + stats.down.segments
        lost = stats.up.lost_segments + stats.down.lost_segments
        report.rows.append(
            CheckRow(
                "segment loss (emulator's count)", "%", profile.loss * 100, lost / segments * 100
            )
        )
    return report


def _mbps(bps: float | None) -> float | None:
    return None if bps is None else bps / 1e6
