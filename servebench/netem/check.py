"""Measure an emulated link the way a user would: ping-pong RTT and bulk throughput.

Used by `servebench netem check`, the tests and benchmarks/netem.py, against the local
probe server (probe.py) with the emulator (in its own process) in front of it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from servebench.netem.emulator import LinkEmulator
from servebench.netem.probe import measure_download, measure_rtts, measure_upload, probe_server
from servebench.netem.profiles import LinkProfile, get_profile
from servebench.netem.stats import LinkStats

#: Bulk size when a direction has no rate limit (about a quarter second at 1 GB/s).
UNLIMITED_TRANSFER_BYTES = 256 * 1024 * 1024
MIN_TRANSFER_BYTES = 64 * 1024


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


def robust_sd(values: list[float]) -> float:
    """Spread from the interquartile range: loss-delayed pings must not swamp the jitter."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / 1.349  # the IQR of a normal distribution is 1.349 sd


def transfer_bytes(rate_bps: float | None, duration_s: float) -> int:
    """A transfer that lasts about `duration_s` on this link."""
    if rate_bps is None:
        return UNLIMITED_TRANSFER_BYTES
    return max(MIN_TRANSFER_BYTES, int(rate_bps / 8 * duration_s))


def check_profile(
    profile: LinkProfile | str,
    *,
    duration_s: float = 2.0,
    pings: int = 20,
    seed: int | None = None,
) -> CheckReport:
    """Start a probe server and the emulator in front of it, measure, compare."""
    profile = get_profile(profile)
    report = CheckReport(profile)
    with probe_server() as server:
        baseline = statistics.median(measure_rtts(server, max(pings, 20)))
        emulator = LinkEmulator(profile, server, seed=seed)
        with emulator as address:
            rtts = measure_rtts(address, pings)
            down = measure_download(address, transfer_bytes(profile.rate_bps("down"), duration_s))
            up = measure_upload(address, transfer_bytes(profile.rate_bps("up"), duration_s))
        report.stats = emulator.final_stats
    report.rtts_s = rtts
    ms = 1e3
    report.rows += [
        CheckRow("RTT p50", "ms", profile.rtt_s * ms, statistics.median(rtts) * ms),
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
