"""Job traces for the cluster simulator: a synthetic mix, a trace file, or a leader's store.

A trace is a list of `TraceJob`: when a job was submitted, how long it runs on a follower
of speed 1.0, its estimate (if known), what it needs, and its scenario name (the key of
learned estimates). The trace file is CSV with a header, or JSON lines (`.jsonl`/`.json`,
one object per line), with these fields:

    submit_s     seconds, any origin (the simulator starts at the first submission)  required
    duration_s   seconds it runs on a speed-1.0 follower, > 0                      required
    estimate_s   what the scheduler is told, > 0; absent: duration_s × a log-normal error
    gpus         GPUs it needs, integer >= 0 (default 0)
    labels       labels a follower must have: CSV `zone=a;rack=3`, JSON an object
    name         scenario name (default "job"): jobs of one name share learned estimates
    priority     integer, higher first (default 0)
    trials       the trials it runs, integer >= 1 (default 1): where it may pause

A leader's store gives each finished job its estimate (the plan's) and its actual (the
seconds its runs took, `Job.run_s`, summed over the segments of a paused job).
`write_trace` writes the same CSV, so a synthetic mix or a store's history can be saved and
replayed. Errors name `file:line` and the field, in one line.

The synthetic mix (`SyntheticMix`) stands for a team's benchmark queue: Poisson arrivals;
many short parameter sweeps and a few long SLO searches, with log-normal (heavy-tailed)
durations; scenario kinds whose plans are systematically off by their own factor (so
learning has something to find), each job's estimate off again by a log-normal factor;
some jobs needing GPUs or a zone label; each job a number of trials (where a preemptive
policy may pause it). `synthetic_followers` gives heterogeneous
followers: log-normal speeds, a share with 1, 2 or 4 GPUs, two zones.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servebench.cluster.errors import ClusterError
from servebench.cluster.job import TERMINAL, FollowerInfo, JobState
from servebench.common.textfile import TextFileError, read_text

FIELDS = ("submit_s", "duration_s", "estimate_s", "gpus", "labels", "name", "priority", "trials")


class TraceError(ClusterError, ValueError):
    """A trace that cannot be read; the message is one line naming file and line."""


@dataclass(frozen=True)
class TraceJob:
    submit_s: float
    duration_s: float
    estimate_s: float | None = None
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    name: str = "job"
    priority: int = 0
    trials: int = 1  # equal parts of duration_s; a preemptive policy pauses between them


# ----------------------------------------------------------------------------- files


def read_trace(path: Path) -> list[TraceJob]:
    """The jobs of a CSV or JSON-lines trace file, in submission order."""
    path = Path(path)
    try:
        text = read_text(path)
    except TextFileError as err:
        raise TraceError(str(err)) from None
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        rows = _json_rows(text, path)
    else:
        rows = _csv_rows(text, path)
    jobs = [_trace_job(row, f"{path}:{line}") for line, row in rows]
    if not jobs:
        raise TraceError(f"{path}: no jobs in the trace")
    return sorted(jobs, key=lambda j: j.submit_s)


def _json_rows(text: str, path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise TraceError(f"{path}:{number}: not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise TraceError(f"{path}:{number}: each line must be a JSON object")
        rows.append((number, row))
    return rows


def _csv_rows(text: str, path: Path) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    unknown = [h for h in header if h not in FIELDS]
    if unknown:
        raise TraceError(f"{path}:1: unknown column {unknown[0]!r} (columns: {', '.join(FIELDS)})")
    rows = []
    for row in reader:
        if None in row:
            raise TraceError(f"{path}:{reader.line_num}: more values than columns")
        rows.append((reader.line_num, {k: v for k, v in row.items() if v not in (None, "")}))
    return rows


def _trace_job(row: Mapping[str, Any], where: str) -> TraceJob:
    unknown = [k for k in row if k not in FIELDS]
    if unknown:
        raise TraceError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    for name in ("submit_s", "duration_s"):
        if name not in row:
            raise TraceError(f"{where}: {name}: required")
    labels = row.get("labels", {})
    if isinstance(labels, str):
        labels = _parse_labels(labels, where)
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise TraceError(f"{where}: labels: must map names to strings")
    estimate = row.get("estimate_s")
    return TraceJob(
        submit_s=_number(row, "submit_s", where),
        duration_s=_number(row, "duration_s", where, positive=True),
        estimate_s=None if estimate is None else _number(row, "estimate_s", where, positive=True),
        gpus=_integer(row, "gpus", where, 0),
        labels=labels,
        name=str(row.get("name", "job")),
        priority=_integer(row, "priority", where, 0, negative=True),
        trials=_integer(row, "trials", where, 1, positive=True),
    )


def _number(row: Mapping[str, Any], name: str, where: str, positive: bool = False) -> float:
    raw = row[name]
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name}: {raw!r} is not a number") from None
    if isinstance(raw, bool) or not math.isfinite(value):
        raise TraceError(f"{where}: {name}: {raw!r} is not a finite number")
    if positive and value <= 0:
        raise TraceError(f"{where}: {name}: {raw!r} must be > 0")
    return value


def _integer(
    row: Mapping[str, Any],
    name: str,
    where: str,
    default: int,
    negative: bool = False,
    positive: bool = False,
) -> int:
    raw = row.get(name, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name}: {raw!r} is not an integer") from None
    if isinstance(raw, bool) or (isinstance(raw, float) and raw != value):
        raise TraceError(f"{where}: {name}: {raw!r} is not an integer")
    if value < 0 and not negative:
        raise TraceError(f"{where}: {name}: {raw!r} must be >= 0")
    if positive and value < 1:
        raise TraceError(f"{where}: {name}: {raw!r} must be >= 1")
    return value


def _parse_labels(text: str, where: str) -> dict[str, str]:
    labels = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise TraceError(f"{where}: labels: {part!r} is not name=value")
        labels[key.strip()] = value.strip()
    return labels


def write_trace(path: Path, jobs: Iterable[TraceJob]) -> None:
    """Write jobs as the CSV `read_trace` reads."""
    with Path(path).open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(FIELDS)
        for j in jobs:
            labels = ";".join(f"{k}={v}" for k, v in sorted(j.labels.items()))
            estimate = "" if j.estimate_s is None else repr(j.estimate_s)
            writer.writerow(
                [repr(j.submit_s), repr(j.duration_s), estimate, j.gpus, labels, j.name,
                 j.priority, j.trials]
            )  # fmt: skip


# ----------------------------------------------------------------------------- estimates


def with_estimates(jobs: Iterable[TraceJob], error: float, seed: int) -> list[TraceJob]:
    """Jobs without an estimate get duration × a log-normal factor (sigma `error`): what
    a plan's guess looks like. Drawn once, so every policy sees the same estimates."""
    rng = random.Random(seed)
    return [
        j
        if j.estimate_s is not None
        else replace(j, estimate_s=j.duration_s * rng.lognormvariate(0.0, error))
        for j in jobs
    ]


# ----------------------------------------------------------------------------- synthetic


@dataclass(frozen=True)
class SyntheticMix:
    """The synthetic workload's knobs (defaults: see the module docstring)."""

    jobs: int = 5000
    load: float = 0.9  # offered work over the followers' capacity
    long_share: float = 0.15  # SLO searches among the jobs
    short_median_s: float = 60.0  # parameter sweeps
    short_sigma: float = 0.6
    long_median_s: float = 900.0
    long_sigma: float = 1.0
    kinds: int = 12  # scenario names per class; each has its own plan bias
    kind_bias_sigma: float = 0.3
    estimate_error: float = 0.5  # each job's estimate: × lognormal(0, this)
    gpu_job_share: float = 0.15
    label_job_share: float = 0.1
    batch_mean: float = 4.0  # jobs per submission (geometric): sweeps come in batches
    short_trials: int = 12  # a sweep's trials: 1 to this, uniform
    long_trials: int = 10  # an SLO search's trials (each its search steps): 1 to this

    def __post_init__(self) -> None:
        checks = {
            "jobs": self.jobs >= 1,
            "load": 0 < self.load <= 10,
            "long_share": 0 <= self.long_share <= 1,
            "estimate_error": 0 <= self.estimate_error <= 5,
            "gpu_job_share": 0 <= self.gpu_job_share <= 1,
            "label_job_share": 0 <= self.label_job_share <= 1,
            "batch_mean": 1 <= self.batch_mean <= 1000,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name}: {getattr(self, name)!r} is out of range")

    @property
    def mean_duration_s(self) -> float:
        def lognormal_mean(median: float, sigma: float) -> float:
            return median * math.exp(sigma**2 / 2)

        return (1 - self.long_share) * lognormal_mean(
            self.short_median_s, self.short_sigma
        ) + self.long_share * lognormal_mean(self.long_median_s, self.long_sigma)


ZONES = ("a", "b")


def synthetic_followers(
    count: int, seed: int, *, gpu_share: float = 0.25, speed_sigma: float = 0.3
) -> list[FollowerInfo]:
    """Heterogeneous followers: log-normal speeds, `gpu_share` with 1, 2 or 4 GPUs, two
    zones. The first GPU follower has 2 GPUs, so every synthetic job fits somewhere."""
    if count < 1:
        raise ValueError(f"followers: {count} must be >= 1")
    rng = random.Random(seed)
    followers = []
    gpu_count = max(1, round(count * gpu_share)) if gpu_share > 0 else 0
    for i in range(count):
        gpus = 0
        if i < gpu_count:
            gpus = 2 if i == 0 else rng.choice((1, 1, 2, 4))
        followers.append(
            FollowerInfo(
                name=f"f{i:04d}",
                gpus=gpus,
                labels={"zone": ZONES[i % len(ZONES)]},
                speed=rng.lognormvariate(0.0, speed_sigma),
            )
        )
    rng.shuffle(followers)
    return followers


def synthetic_jobs(
    mix: SyntheticMix, followers: Iterable[FollowerInfo], seed: int
) -> list[TraceJob]:
    """The mix's jobs, arriving as a Poisson stream at `mix.load` of the followers'
    capacity (sum of slots × speed, over the mean duration)."""
    followers = list(followers)
    rng = random.Random(seed)
    capacity = sum(f.slots * f.speed for f in followers)
    rate = mix.load * capacity / mix.mean_duration_s
    any_gpu = any(f.gpus for f in followers)
    bias = {
        (cls, k): rng.lognormvariate(0.0, mix.kind_bias_sigma)
        for cls in ("sweep", "search")
        for k in range(mix.kinds)
    }
    # Trials from their own stream, so the other draws are those of a mix without them.
    trials_rng = random.Random(f"trials-{seed}")
    jobs = []
    now = 0.0
    left_in_batch = 0
    for _ in range(mix.jobs):
        if left_in_batch == 0:  # a new submission: Poisson in time, a geometric batch
            now += rng.expovariate(rate / mix.batch_mean)
            left_in_batch = _geometric(rng, mix.batch_mean)
        left_in_batch -= 1
        long = rng.random() < mix.long_share
        cls = "search" if long else "sweep"
        median, sigma = (
            (mix.long_median_s, mix.long_sigma) if long else (mix.short_median_s, mix.short_sigma)
        )
        duration = rng.lognormvariate(math.log(median), sigma)
        kind = rng.randrange(mix.kinds)
        estimate = duration / bias[cls, kind] * rng.lognormvariate(0.0, mix.estimate_error)
        gpus = 0
        if any_gpu and rng.random() < mix.gpu_job_share:
            gpus = 2 if rng.random() < 0.2 else 1
        labels = {"zone": rng.choice(ZONES)} if rng.random() < mix.label_job_share else {}
        trials = trials_rng.randint(1, mix.long_trials if long else mix.short_trials)
        jobs.append(TraceJob(now, duration, estimate, gpus, labels, f"{cls}-{kind}", trials=trials))
    return jobs


def _geometric(rng: random.Random, mean: float) -> int:
    """A count >= 1 with the given mean (geometric)."""
    if mean <= 1:
        return 1
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - 1.0 / mean))


# ----------------------------------------------------------------------------- a store


def store_trace(path: Path) -> tuple[list[TraceJob], list[FollowerInfo]]:
    """A leader store's finished jobs as a trace, and the followers they ran on.

    Each job that ran to an end (done or failed, with start and end times) becomes a
    TraceJob with its submission time, its actual (the seconds its runs took, summed over
    a paused job's segments; end − start for a store from before they were kept) and the
    estimate the leader had.
    The followers are the ones named in the history, each with the most GPUs and all the
    labels its jobs needed (what it must have had), at speed 1.0 (their durations are the
    measured ones).
    """
    from servebench.cluster.store import JobStore, StoreError

    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no job store there")
    try:
        store = JobStore(path)
    except StoreError as err:
        raise TraceError(str(err)) from None
    with store:
        finished = [
            j
            for j in store.list(TERMINAL - {JobState.CANCELLED})
            if j.started_at is not None and j.finished_at is not None
        ]
    if not finished:
        raise TraceError(f"{path}: no finished job (done or failed) with start and end times")
    gpus: dict[str, int] = {}
    labels: dict[str, dict[str, str]] = {}
    jobs = []
    for j in finished:
        assert j.started_at is not None and j.finished_at is not None
        jobs.append(
            TraceJob(
                submit_s=j.submitted_at,
                duration_s=max(j.run_s or j.finished_at - j.started_at, 1e-3),
                estimate_s=j.estimate_s if j.estimate_s > 0 else None,
                gpus=j.needs.gpus,
                labels=dict(j.needs.labels),
                name=j.scenario_name,
                priority=j.priority,
            )
        )
        if j.follower is not None:
            gpus[j.follower] = max(gpus.get(j.follower, 0), j.needs.gpus)
            labels.setdefault(j.follower, {}).update(j.needs.labels)
    followers = [FollowerInfo(name, gpus[name], labels[name]) for name in sorted(gpus)]
    return sorted(jobs, key=lambda j: j.submit_s), followers
