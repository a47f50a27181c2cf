"""Upper bounds a CPU figure cannot exceed on this machine, computed from its core count.

A measured rate above these means a unit or counting error, not a fast machine: no x86
core sustains more than 6 GHz, executes more than 32 double-precision FLOP a cycle (two
512-bit FMA pipes: 2 × 8 lanes × 2 operations), moves more than 192 bytes a cycle
through its L1 cache (two 64-byte loads and one 64-byte store), or completes more than
one random memory update a cycle.
"""

from __future__ import annotations

import os

MAX_CLOCK_HZ = 6e9
FP64_FLOP_PER_CYCLE = 32
L1_BYTES_PER_CYCLE = 192


def cores() -> int:
    return len(os.sched_getaffinity(0))


def fp64_peak_gflops() -> float:
    return cores() * MAX_CLOCK_HZ * FP64_FLOP_PER_CYCLE / 1e9


def cache_bandwidth_gbs() -> float:
    return cores() * MAX_CLOCK_HZ * L1_BYTES_PER_CYCLE / 1e9


def updates_gups() -> float:
    return cores() * MAX_CLOCK_HZ / 1e9
