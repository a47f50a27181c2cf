"""Disk latency: 4 KiB reads with Debian's `ioping`, sequential and random, O_DIRECT and
cached, on the scratch folder and on the overlay folder.

This is the paper's ioping experiment. Each folder gets a new file of random bytes,
written and fsynced, then read four ways, one ioping run each (requests back to back,
`-i 0`, fixed random offsets `-e 1` so both sides read the same places):

- direct (`-D`, O_DIRECT): every request goes to the device; no page cache, no readahead;
- cached (`-C`): no cache invalidation between requests, so reads of the just-written
  file are page-cache hits. That is the point of the pair: the gap between them is what
  caching buys, and the paper's container effect on random I/O lives there;
- sequential (`-L`) or random offsets over the whole file. The file (512 MiB; 64 MiB
  quick) is far larger than any readahead window, so random reads cannot ride on one.

ioping's JSON output has one entry per request (its time in ns; the first request is a
warm-up ioping itself marks "ignored") and a final statistics entry; the percentiles
come from the per-request times, the IOPS from the statistics (requests per second of
I/O time, i.e. 1 / mean latency, not counting ioping's own time between requests).

Metric names say where and how: `scratch_random_direct_p50_s`, `overlay_sequential_cached_iops`.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from servebench.common.quantiles import percentiles
from servebench.overhead.measure import Measurement
from servebench.overhead.probes import ProbeContext
from servebench.overhead.probes.folders import DiskTarget, on_each_disk
from servebench.overhead.probes.tool import require, run_parsed

PROBE = "ioping"
REQUEST_BYTES = 4096
FULL_FILE_MIB, FULL_REQUESTS = 512, 5000
QUICK_FILE_MIB, QUICK_REQUESTS = 64, 500
PATTERNS = {"sequential": ["-L"], "random": []}
MODES = {"direct": ["-D"], "cached": ["-C"]}
PERCENTILES = (50, 90, 99)
SEED = "1"
TIMEOUT_S = 600.0
CHUNK = 2**20


def write_target(path: Path, mib: int) -> None:
    """`mib` MiB of random bytes (one random MiB repeated: no filesystem here
    deduplicates), on disk before the first read."""
    chunk = os.urandom(CHUNK)
    with path.open("wb") as out:
        for _ in range(mib):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())


def parse_output(text: str) -> tuple[list[int], dict[str, Any]]:
    """ioping -J output: the measured requests' times in ns (warm-up left out) and the
    final statistics object; ValueError when it is not ioping's JSON."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"ioping output is not JSON: {err}") from None
    if not isinstance(entries, list):
        raise ValueError("ioping output is not a JSON array")
    times = [
        int(entry["io"]["time"])
        for entry in entries
        if "io" in entry and not entry["io"].get("ignored", False)
    ]
    stats = [entry["stat"] for entry in entries if "stat" in entry]
    if not times or not stats:
        raise ValueError("ioping output has no measured requests or no statistics")
    return times, stats[-1]


def latency_measurements(
    prefix: str,
    times_ns: list[int],
    stat: dict[str, Any],
    *,
    cpu_s: float | None = None,
    wall_s: float | None = None,
    detail: dict[str, str | float | int] | None = None,
) -> list[Measurement]:
    """Latency percentiles (seconds, as every file here; lower is better) and IOPS (higher
    is better) of one run."""
    extra = {**(detail or {}), "requests": len(times_ns)}
    common: dict[str, Any] = {"probe": PROBE, "cpu_s": cpu_s, "wall_s": wall_s, "detail": extra}
    values = percentiles(np.asarray(times_ns, dtype=float) / 1e9, PERCENTILES)
    found = [
        Measurement(metric=f"{prefix}_p{q}_s", value=float(v), unit="s", better="lower", **common)
        for q, v in zip(PERCENTILES, values, strict=True)
    ]
    found.append(
        Measurement(
            metric=f"{prefix}_iops",
            value=float(stat["iops"]),
            unit="IOPS",
            better="higher",
            **common,
        )
    )
    return found


def _argv(binary: str, target: Path, pattern: str, mode: str, requests: int) -> list[str]:
    argv = [binary, "-J", "-c", str(requests), "-i", "0", "-s", str(REQUEST_BYTES)]
    return [*argv, "-e", SEED, *PATTERNS[pattern], *MODES[mode], str(target)]


def _read_four_ways(binary: str, requests: int, disk: DiskTarget) -> list[Measurement]:
    """Write the file, then read it each way (pattern by mode)."""
    write_target(disk.path, disk.file_mib)
    found: list[Measurement] = []
    for pattern in PATTERNS:
        for mode in MODES:
            done, (times, stat) = run_parsed(
                _argv(binary, disk.path, pattern, mode, requests),
                parse_output,
                where=f"{disk.name} {pattern} {mode}",
                timeout_s=TIMEOUT_S,
            )
            found += latency_measurements(
                f"{disk.name}_{pattern}_{mode}",
                times,
                stat,
                cpu_s=done.cpu_s,
                wall_s=done.wall_s,
                detail={**disk.detail, "request_bytes": REQUEST_BYTES},
            )
    return found


def run(context: ProbeContext) -> list[Measurement]:
    """Write a file in each folder and read it the four ways; 16 figures per folder."""
    binary = require("ioping", "ioping")
    mib, requests = (
        (QUICK_FILE_MIB, QUICK_REQUESTS) if context.quick else (FULL_FILE_MIB, FULL_REQUESTS)
    )
    return on_each_disk(context, PROBE, mib, functools.partial(_read_four_ways, binary, requests))
