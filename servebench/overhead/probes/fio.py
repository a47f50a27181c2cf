"""Disk throughput with `fio`: sequential write and read in 1 MiB blocks, and random 4 KiB
read IOPS, all O_DIRECT, on the scratch folder and on the overlay folder.

ioping measures one request at a time (latency); fio keeps 16 requests in flight through
Linux native AIO (`libaio`), which is how a data loader or a database reads, and gives
the throughput figures the paper compares as "sequential I/O". direct=1 keeps the page
cache out, so the figures are the filesystem and device path a container may change.

One fio run per job (its own CPU and wall time): the write lays out the file (fsynced at
the end), the two reads read it back. Sizes: a 1 GiB file and 256 MiB of random reads
(a few seconds on an SSD); quick mode 64 MiB and 16 MiB.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.overhead.measure import Measurement
from servebench.overhead.probes import ProbeContext
from servebench.overhead.probes.folders import DiskTarget, on_each_disk
from servebench.overhead.probes.tool import require, run_parsed

PROBE = "fio"
IODEPTH = 16
ENGINE = "libaio"
FULL_FILE_MIB, FULL_RANDOM_MIB = 1024, 256
QUICK_FILE_MIB, QUICK_RANDOM_MIB = 64, 16
TIMEOUT_S = 600.0
MIB = 2**20


@dataclass(frozen=True)
class Job:
    """One fio job and the figure it gives."""

    name: str
    rw: str  # fio's rw=
    block: str  # fio's bs=
    direction: str  # "read" or "write": the section of fio's JSON with the figures
    figure: str  # "bw_bytes" (reported in MiB/s) or "iops"


JOBS = (
    Job("seq_write", "write", "1M", "write", "bw_bytes"),
    Job("seq_read", "read", "1M", "read", "bw_bytes"),
    Job("rand_read", "randread", "4k", "read", "iops"),
)


def job_metric(job: Job) -> tuple[str, str]:
    """The metric suffix and unit of a job's figure."""
    return (
        (f"{job.name}_mibs", "MiB/s") if job.figure == "bw_bytes" else (f"{job.name}_iops", "IOPS")
    )


def parse_output(text: str, job: Job) -> tuple[float, dict[str, Any]]:
    """fio --output-format=json: the job's figure (MiB/s or IOPS) and its result section;
    ValueError when fio reports an error, did no I/O, or the text is not its JSON."""
    start = text.find("{")
    if start < 0:
        raise ValueError("fio printed no JSON")
    try:
        report = json.loads(text[start:])
    except ValueError as err:
        raise ValueError(f"fio output is not JSON: {err}") from None
    jobs = report.get("jobs") or []
    if len(jobs) != 1:
        raise ValueError(f"fio output has {len(jobs)} jobs, expected 1")
    result = jobs[0]
    if result.get("error"):
        raise ValueError(f"fio job {result.get('jobname')} failed with error {result['error']}")
    section = result[job.direction]
    if not section.get("io_bytes"):
        raise ValueError(f"fio job {result.get('jobname')} did no {job.direction} I/O")
    value = float(section[job.figure])
    return (value / MIB if job.figure == "bw_bytes" else value), section


def _argv(binary: str, job: Job, target: Path, file_mib: int, io_mib: int) -> list[str]:
    return [
        binary,
        f"--name={job.name}",
        f"--filename={target}",
        f"--size={file_mib}M",
        f"--io_size={io_mib}M",
        f"--rw={job.rw}",
        f"--bs={job.block}",
        "--direct=1",
        f"--ioengine={ENGINE}",
        f"--iodepth={IODEPTH}",
        "--end_fsync=1",
        "--output-format=json",
    ]


def _jobs(binary: str, random_mib: int, disk: DiskTarget) -> list[Measurement]:
    """The jobs in order on one folder: the write makes the file the reads read."""
    found: list[Measurement] = []
    for job in JOBS:
        io_mib = random_mib if job.rw == "randread" else disk.file_mib
        done, (value, section) = run_parsed(
            _argv(binary, job, disk.path, disk.file_mib, io_mib),
            functools.partial(parse_output, job=job),
            where=f"{disk.name} {job.name}",
            timeout_s=TIMEOUT_S,
        )
        suffix, unit = job_metric(job)
        found.append(
            Measurement(
                probe=PROBE,
                metric=f"{disk.name}_{suffix}",
                value=value,
                unit=unit,
                better="higher",
                cpu_s=done.cpu_s,
                wall_s=done.wall_s,
                detail={
                    **disk.detail,
                    "io_mib": io_mib,
                    "block": job.block,
                    "iodepth": IODEPTH,
                    "ioengine": ENGINE,
                    "fio_runtime_ms": int(section["runtime"]),
                },
            )
        )
    return found


def run(context: ProbeContext) -> list[Measurement]:
    """The three jobs on each folder (`_jobs`)."""
    binary = require("fio", "fio")
    file_mib, random_mib = (
        (QUICK_FILE_MIB, QUICK_RANDOM_MIB) if context.quick else (FULL_FILE_MIB, FULL_RANDOM_MIB)
    )
    return on_each_disk(context, PROBE, file_mib, functools.partial(_jobs, binary, random_mib))
