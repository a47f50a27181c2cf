"""Whether a replicate was measured under interference, and why: the judge the scenario
runner asks before it decides to measure a replicate again.

It reads an `InterferenceRecord` (what the window's counters say) and the load's own
schedule lag p99 (`LoadSummary.schedule_lag_p99`: the load engine measures the generator's
timer lag already, so it is taken here, not measured twice). Each figure over its limit is
one warning with its code (`common.verdict_codes`, `interference_*`) and a sentence; a
figure this machine cannot measure (None, NaN) is not judged.

The limits were calibrated by `benchmarks/interference.py` (see there and docs/load.md):
windows of a real load on a local Triton server, with and without a known CPU burner,
alternated A B B A; each limit is the largest figure of the windows without the burner
times a margin (the figures are below the constants).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servebench.common.verdict_codes import VerdictCode
from servebench.telemetry.interference import InterferenceRecord

# Calibrated on the development machine (2 vCPUs under KVM, Linux with PSI), shared at
# the time with five other sessions' work, with
#   PYTHONPATH=$PWD .venv/bin/python benchmarks/interference.py        (1 burner)
#   PYTHONPATH=$PWD .venv/bin/python benchmarks/interference.py --burners 2
# each 3 cycles of A B B A, 8 s windows of Poisson 500 req/s on a local Triton; figures are
# A (no burner) median [min-max] / B (burners) median [min-max]:
#   other CPU     1 burner  9.8 [0.0-25.5] % / 56.2 [53.9-66.5] %   2 burners 13.4 [4.8-20.1] / 90.0 [88.6-90.6]
#   CPU pressure  1 burner  6.9 [4.9-15.6] % /  6.8 [4.3-19.9] %    2 burners 11.9 [8.5-18.7] / 22.3 [17.6-27.6]
#   lag p99       1 burner  0.4 [0.1-0.7] ms /  2.1 [0.4-5.5] ms    2 burners 0.6 [0.3-14.3] / 4.1 [3.8-56.6]
#   steal         0.0-0.1 % in every window
# Other CPU's limit is the 1-burner run's A windows' largest value times 1.5: with it no A
# window of that run is disturbed and every B window of both runs is. Steal is the
# hypervisor's, which no burner in the guest makes: its limit, 5 % of the cores, is set
# above all of the above, not measured.
#
# CPU pressure is recorded, not judged: it counts every task that waited for a CPU, the
# server's and the generator's own included, so it measures how hard the benchmark itself
# drives two cores as much as what else runs. Checked on the quiet machine (nothing else
# running: other CPU 0.0 % in every window) with benchmarks/aa.py's scenario at 40 % of
# its capacity (Poisson 3,673 req/s, 8 settings x 2 replicates, 4 s windows): pressure
# 22-38 % in 16 windows of 16, above the 1-burner windows' 4-20 %; it separates nothing.
# The generator's lag p99 in those quiet windows was 0.50-1.48 ms (the 500 req/s
# calibration's 0.1-0.7 ms limit of 1.1 ms flagged 7 of 16 undisturbed windows): its
# limit is 5 ms, over three times the quiet largest and inside the burner windows'
# 3.8-56.6 ms with two burners. Re-run both on the machine that measures, as quiet as it
# will be then, and take its limits.
OTHER_CPU_LIMIT = 0.38  # share of all cores' time (25.5 % x 1.5)
STEAL_LIMIT = 0.05  # share of all cores' time (set, see above)
SCHEDULE_LAG_LIMIT_S = 5e-3  # seconds (quiet at 40 % of capacity: at most 1.48 ms)


@dataclass(frozen=True)
class InterferenceLimits:
    """Over which figure a window is disturbed; shares 0-1, the lag in seconds."""

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
