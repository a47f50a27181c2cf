"""A cluster job: one scenario (its text, so no follower needs the submitter's disk), who
sent it, what it needs, how long it should take, and where it is in its life.

States run queued → placed → running → done | failed | cancelled. `placed` means the
leader put the job on one follower's queue (tier 1); `running` means it was handed to
that follower. A job whose follower vanished goes back to `queued` (from placed or
running), keeping its attempt count. `LEGAL` lists every allowed move; the store refuses
the rest, so a bug in the leader cannot, say, finish a job twice.

A job's scenario must be self-contained: files it names by path (link profile files,
Mahimahi traces in an inline profile, a request trace, an export folder) would be looked
up on whichever follower runs it, where they need not exist, and resolving them on the
leader would let a submitter make the leader read its own files. So `new_job` refuses them, naming the field, and the submitter
writes link profiles inline and describes models by grid, specs or mutation instead.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servebench.cluster.errors import ClusterError

if TYPE_CHECKING:  # the validator imports torch (model_zoo.counting): loaded when used
    from servebench.scenario.plan import Plan
    from servebench.scenario.schema import Scenario
    from servebench.scenario.source import Location, ScenarioSource


class JobState(StrEnum):
    QUEUED = "queued"
    PLACED = "placed"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})

#: Every allowed move. placed/running → queued re-queue a job whose follower is gone;
#: placed → failed is a job the leader could not hand to its follower at all.
LEGAL: Mapping[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.PLACED, JobState.CANCELLED}),
    JobState.PLACED: frozenset(
        {JobState.RUNNING, JobState.QUEUED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {JobState.DONE, JobState.FAILED, JobState.QUEUED, JobState.CANCELLED}
    ),
    JobState.DONE: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

#: The largest scenario text a job takes: a scenario is a few dozen lines; this bounds
#: what the store keeps and Dask ships per job.
MAX_SCENARIO_BYTES = 1 << 20


class IllegalTransition(ClusterError, ValueError):
    """A state change that `LEGAL` does not allow (the message names both states)."""


def check_transition(job_id: str, old: JobState, new: JobState) -> None:
    if new not in LEGAL[old]:
        allowed = ", ".join(sorted(LEGAL[old])) or "none: it is finished"
        raise IllegalTransition(
            f"job {job_id}: {old} → {new} is not allowed (from {old}: {allowed})"
        )


@dataclass(frozen=True)
class Needs:
    """What a follower must have to run the job: at least `gpus` GPUs, and every label
    equal (`{"zone": "a"}` runs only where the follower was started with zone=a)."""

    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)

    def fits(self, follower: FollowerInfo) -> bool:
        return follower.gpus >= self.gpus and all(
            follower.labels.get(k) == v for k, v in self.labels.items()
        )


def why_unschedulable(needs: Needs, followers: Iterable[FollowerInfo]) -> str | None:
    """Why none of `followers` can ever run a job with `needs` (None if one can, or if
    there is no follower yet: one that fits may still join). The job stays queued; this
    is what its status says, so it is not mistaken for a job that waits its turn."""
    followers = list(followers)
    if not followers or any(needs.fits(f) for f in followers):
        return None
    parts = []
    most = max(f.gpus for f in followers)
    if needs.gpus > most:
        parts.append(f"needs GPU={needs.gpus}, followers have at most {most}")
    for key, value in needs.labels.items():
        if not any(f.labels.get(key) == value for f in followers):
            seen = sorted({f.labels[key] for f in followers if key in f.labels})
            have = f"followers have {key}={', '.join(seen)}" if seen else f"no follower has {key}"
            parts.append(f"needs {key}={value}, {have}")
    if not parts:  # each need is met somewhere, never all on one follower
        wanted = ", ".join([f"GPU={needs.gpus}", *(f"{k}={v}" for k, v in needs.labels.items())])
        parts.append(f"needs {wanted} on one follower; none has them all")
    return "unschedulable: " + "; ".join(parts)


@dataclass(frozen=True)
class FollowerInfo:
    """A follower as the scheduler sees it. `slots` is how many benchmarks it runs at once
    (one per slot/GPU, so they do not disturb each other); `speed` is used only by the
    simulator (a real follower's speed is what the learned estimates find out)."""

    name: str
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    slots: int = 1
    speed: float = 1.0


@dataclass
class Job:
    id: str
    scenario_name: str
    scenario_text: str
    submitter: str
    priority: int
    needs: Needs
    estimate_s: float
    state: JobState
    submitted_at: float
    attempts: int = 0
    follower: str | None = None
    result_path: str | None = None
    reason: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    #: The actual: seconds its runs took on followers so far, summed over the segments of
    #: a job paused and resumed (`estimate_s` is the plan's). Learning compares the two.
    run_s: float = 0.0
    #: How often it was paused at a trial boundary for a shorter job (two-tier-preemptive).
    preemptions: int = 0

    @property
    def key(self) -> str:
        """What "similar scenarios" share for learned estimates: the scenario's name."""
        return self.scenario_name

    def as_dict(self, text: bool = False) -> dict[str, Any]:
        """JSON-ready fields (the scenario text only when asked: it is the bulk)."""
        data = asdict(self)
        data["state"] = str(self.state)
        data["needs"] = {"gpus": self.needs.gpus, "labels": dict(self.needs.labels)}
        if not text:
            del data["scenario_text"]
        return data


def new_job_id() -> str:
    return "j" + secrets.token_hex(6)


def new_job(
    scenario_text: str,
    *,
    submitter: str,
    priority: int = 0,
    source: str = "<submitted>",
    needs: Needs | None = None,
    now: float | None = None,
) -> Job:
    """A queued job for a scenario's text, validated as `scenario validate` would.

    Raises `ScenarioError` whose `problems` read `<source>:<line> <field>: ...`, like the
    validator's for a file. The estimate is the scenario plan's wall time (what `scenario
    plan` prints); `needs` defaults to the most GPUs any of its servers asks for, no labels.
    """
    scenario, plan = validate_text(scenario_text, source)
    gpus = max(server.gpus for server in scenario.servers)
    return Job(
        id=new_job_id(),
        scenario_name=scenario.name,
        scenario_text=scenario_text,
        submitter=submitter,
        priority=priority,
        needs=needs if needs is not None else Needs(gpus=gpus),
        estimate_s=plan.estimated_s,
        state=JobState.QUEUED,
        submitted_at=time.time() if now is None else now,
    )


# File references by field (`links` items are checked one by one below).
_FILE_FIELDS: dict[tuple[str, str], str] = {
    ("workload", "trace"): "a trace file does not travel with the job; use rates or concurrency",
    ("models", "repository"): (
        "an export folder does not travel with the job; describe the models with grid, "
        "specs or mutate"
    ),
}
_SELF_CONTAINED = "a cluster job's scenario must be self-contained: "


def _file_references(source: ScenarioSource) -> list[str]:
    """One problem per file the scenario names by path (see the module docstring)."""
    from servebench.netem.profiles import is_profile_file

    data = source.data
    if not isinstance(data, dict):
        return []
    problems = []
    links = data.get("links")
    for i, link in enumerate(links if isinstance(links, list) else []):
        if is_profile_file(link):
            problems.append(
                _problem(
                    source, ("links", i), link,
                    _SELF_CONTAINED + "write the link profile inline (a mapping with name, "
                    "rtt_s, down_mbps, ...) instead of a file",
                )
            )  # fmt: skip
        elif isinstance(link, dict):
            for name in ("down_trace", "up_trace"):
                if link.get(name) is not None:
                    problems.append(
                        _problem(
                            source, ("links", i, name), link[name],
                            _SELF_CONTAINED + "a Mahimahi trace file does not travel with "
                            "the job; give a rate (down_mbps, up_mbps)",
                        )
                    )  # fmt: skip
    for (section, name), expected in _FILE_FIELDS.items():
        part = data.get(section)
        if isinstance(part, dict) and part.get(name) is not None:
            problems.append(
                _problem(source, (section, name), part[name], _SELF_CONTAINED + expected)
            )
    return problems


def _problem(source: ScenarioSource, location: Location, value: Any, expected: str) -> str:
    """A problem line in the validator's own form: `<source>:<line> <field>: value — why`."""
    from servebench.scenario.source import format_location

    line = source.line_of(location)
    where = f"{source.path}:{line}" if line else str(source.path)
    shown = f"{value!r} — " if len(repr(value)) <= 60 else ""
    return f"{where} {format_location(location)}: {shown}{expected}"


def validate_text(scenario_text: str, source: str = "<submitted>") -> tuple[Scenario, Plan]:
    """The scenario and its plan, or a `ScenarioError` listing every problem.

    File references are refused before the validator runs, so the leader never opens a
    path a submitter wrote.
    """
    from model_zoo.spec import SpecError
    from servebench.scenario.plan import expand
    from servebench.scenario.source import SourceError, parse_source
    from servebench.scenario.validate import ScenarioError, validate_source

    size = len(scenario_text.encode("utf-8", "surrogatepass"))
    if size > MAX_SCENARIO_BYTES:
        raise ScenarioError(
            [f"{source}:1 (top level): {size:,} bytes; a job's scenario must be at most "
             f"{MAX_SCENARIO_BYTES:,} bytes"]
        )  # fmt: skip
    try:
        parsed = parse_source(scenario_text.removeprefix("\ufeff"), Path(source))
    except SourceError as err:
        raise ScenarioError([str(err)]) from None
    if problems := _file_references(parsed):
        raise ScenarioError(problems)
    scenario = validate_source(parsed)
    try:
        plan = expand(scenario, Path("."))
    except (SpecError, FileNotFoundError) as err:  # as `scenario plan` reports them
        raise ScenarioError([f"{source}: models: {err}"]) from None
    return scenario, plan
