"""Expand a scenario into trials: server setting x model x link x batch size x load level.

The order groups trials by server setting, because starting a server (and loading its
models) is the expensive step; within a setting, models vary slowest so each model is
loaded once. Trial ids hash the trial's coordinates, so the same trial has the same id
in every run of the scenario — what `--resume` and `report compare` join on.

`count_trials` counts without listing, so validation can refuse a scenario that would
expand to millions of trials before any of them is built.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_zoo.imports import ServedModel
from model_zoo.mutate import dedupe, grid, random_mutations
from model_zoo.spec import ModelSpec, resnet50_spec
from servebench.common.quantiles import requests_to_decide
from servebench.load.settings import EARLY_STOP_EVERY
from servebench.netem.profiles import LinkProfile
from servebench.scenario.schema import ResNetReference, Scenario, ServerSection

# Rough costs for the wall-time estimate (measured on the 2-core development machines; see
# docs/benchmarks.md): model load and the fixed overhead of a trial (telemetry start/stop,
# records flush). A server start's cost is its launch's (`Launch.start_s`), an export's
# per model its kind's (`ServerKind.export_s_per_model`).
LOAD_S_PER_MODEL = 1.5
TRIAL_OVERHEAD_S = 1.0
# A closed-loop request's time besides its link's round trip, for an early-stopped trial's
# estimate (the zoo's small models on those machines: about a millisecond).
EXPECTED_SERVICE_S = 0.001
EXPECTED_STABILITY_WINDOWS = 4


@dataclass(frozen=True)
class ServerSetting:
    """One server with one combination from its settings matrix."""

    server: ServerSection
    values: dict[str, Any] = field(default_factory=dict)
    varying: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        if not self.varying:
            return self.server.name
        parts = ",".join(f"{k}={_short(self.values[k])}" for k in self.varying)
        return f"{self.server.name}[{parts}]"


def _short(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class LoadLevel:
    kind: str  # "rate" | "concurrency" | "trace" | "search"
    value: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "rate":
            return f"{self.value:g}/s"
        if self.kind == "concurrency":
            return f"c{self.value:g}"
        return self.kind


@dataclass(frozen=True)
class ModelMix:
    """A weighted mix of the scenario's models (`workload.mix`), measured as one trial: one
    load whose requests each go to a model picked by weight. Its `id` is the trial's `model`
    coordinate, e.g. `mix(dense-d2-w16-1a2b3c*3+conv-d1-w8-4d5e6f*1)`."""

    members: tuple[tuple[ServedModel, float], ...]

    @property
    def id(self) -> str:
        return "mix(" + "+".join(f"{spec.id}*{weight:.15g}" for spec, weight in self.members) + ")"

    @property
    def specs(self) -> tuple[ServedModel, ...]:
        return tuple(spec for spec, _ in self.members)


def model_mix(scenario: Scenario, models: list[ServedModel]) -> ModelMix | None:
    """The scenario's mix with each id resolved to its model, or None without a mix.
    (Validation has checked every id names one of `models`.)"""
    if not scenario.workload.mix:
        return None
    by_id = {spec.id: spec for spec in models}
    return ModelMix(tuple((by_id[m.model], m.weight) for m in scenario.workload.mix))


@dataclass(frozen=True)
class Trial:
    """One trial of the plan. `link` is resolved (`Scenario.link_profile`) when the plan is
    expanded: nothing downstream reads a profile file or decides what a link name means.
    `model` is one model, or the weighted mix a `workload.mix` scenario measures."""

    index: int
    setting: ServerSetting
    model: ServedModel | ModelMix
    link: LinkProfile
    batch_size: int
    level: LoadLevel
    estimated_s: float
    #: `trial_id` of the coordinates, made by `expand` (it needs the link as written).
    id: str

    @property
    def coordinates(self) -> dict[str, Any]:
        return _coordinates(self.setting, self.model, self.link.name, self.batch_size, self.level)

    @property
    def models(self) -> tuple[ServedModel, ...]:
        """The models the trial sends to, which its server must have loaded."""
        return self.model.specs if isinstance(self.model, ModelMix) else (self.model,)


def _coordinates(
    setting: ServerSetting,
    model: ServedModel | ModelMix,
    link: str,
    batch_size: int,
    level: LoadLevel,
) -> dict[str, Any]:
    return {
        "server": setting.server.name,
        "api": setting.server.api,
        "setting": setting.id,
        "model": model.id,
        "batch_size": batch_size,
        "link": link,
        "load_kind": level.kind,
        "load_level": level.value,
    }


# What the API coordinate is called inside a trial id's hash: its name when ids were first
# made, kept so that an id never changes.
_ID_API = "server_kind"


def trial_id(
    setting: ServerSetting,
    model: ServedModel | ModelMix,
    link: str | LinkProfile,
    batch_size: int,
    level: LoadLevel,
) -> str:
    """A hash of the trial's coordinates and settings, the same in every run of a scenario.

    The link enters as the scenario writes it (a built-in or inline profile's name, a
    profile file's path), as it always has, and the API under its name of before (the
    coordinate `server_kind`): ids of earlier runs still match on `--resume`.
    """
    written = link if isinstance(link, str) else link.name
    coordinates = _coordinates(setting, model, written, batch_size, level)
    coordinates[_ID_API] = coordinates.pop("api")
    canonical = json.dumps({**coordinates, "settings": setting.values}, sort_keys=True, default=str)
    return "t" + hashlib.sha256(canonical.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    models: list[ServedModel]
    settings: list[ServerSetting]
    trials: list[Trial]

    @property
    def estimated_s(self) -> float:
        """Whole-run estimate: trials (each its warm-up, measuring time and, for an SLO
        search, its steps) times `workload.repeats`, per setting its server starts
        (`cold_start.repeats` of them where servebench starts the server, each loading the
        models), the one-off exports (per model, per export format), and in a replicated
        run the servers' starts for the rounds: once per server where settings are served
        side by side (`ServerKind.shares_server`), once per setting and round otherwise.
        A cluster job's estimate (the leader then corrects it per follower by what it has
        learned)."""
        kinds = [s.server.server_kind for s in self.settings]
        per_model = {k.export_format: k.export_s_per_model for k in kinds if k.export_format}
        export = len(self.models) * sum(per_model.values())
        setup = sum(
            (k.launch.start_s + LOAD_S_PER_MODEL * len(self.models))
            * (self.scenario.cold_start.repeats if k.launch.starts else 1)
            for k in kinds
        )
        repeats = self.scenario.workload.repeats
        if repeats > 1:
            loads = LOAD_S_PER_MODEL * len(self.models)
            for kind in kinds:
                if kind.launch.starts:
                    # Shared: each setting's models loaded on one server; else a start a round.
                    setup += (
                        loads if kind.shares_server else (kind.launch.start_s + loads) * repeats
                    )
            shared = {s.server.name: s.server.server_kind for s in self.settings}
            setup += sum(
                k.launch.start_s for k in shared.values() if k.shares_server and k.launch.starts
            )
        return export + setup + repeats * sum(t.estimated_s for t in self.trials)

    def warnings(self) -> list[str]:
        """What makes this plan unusually big (past `limits.warn_*`), one sentence each."""
        limits = self.scenario.limits
        found = []
        if len(self.trials) > limits.warn_trials:
            found.append(
                f"{len(self.trials):,} trials, more than limits.warn_trials "
                f"({limits.warn_trials:,}); is every list meant to be that long?"
            )
        hours = self.estimated_s / 3600
        if hours > limits.warn_hours:
            found.append(
                f"estimated {hours:,.1f} hours, more than limits.warn_hours "
                f"({limits.warn_hours:g}); `scenario plan` lists the trials"
            )
        return found


def resolve_models(
    scenario: Scenario, base_dir: Path, *, generated: list[ModelSpec] | None = None
) -> list[ServedModel]:
    """Every model the scenario names, in the order the sections list them, deduplicated:
    the generated ones (`generated`, where the caller has them already), then the user's
    files (read at validation, kept by the scenario; validation refused a file whose name
    another model has)."""
    if generated is None:
        generated = generated_models(scenario, base_dir)
    return [*generated, *scenario.imported_models(base_dir)]


def generated_models(scenario: Scenario, base_dir: Path) -> list[ModelSpec]:
    """The models servebench generates (or an export folder holds), deduplicated."""
    from model_zoo.export.family import load_family

    section = scenario.models
    specs: list[ModelSpec] = list(section.specs)
    if section.grid:
        g = section.grid
        knobs = {k: getattr(g, k) for k in ("heads", "seq_len", "kernel_size", "residual")}
        specs += grid(
            g.types, g.depths, g.widths,
            input_shapes=g.input_shapes, num_outputs=g.num_outputs,
            max_count=scenario.limits.max_models,
            **{k: v for k, v in knobs.items() if v is not None},
        )  # fmt: skip
    if section.mutate:
        m = section.mutate
        specs += [
            m.base,
            *random_mutations(
                m.base, m.count, m.seed, max_depth=m.max_depth, max_width=m.max_width,
                max_count=scenario.limits.max_models,
            ),
        ]  # fmt: skip
    if section.resnet50:
        size = section.resnet50.image_size if isinstance(section.resnet50, ResNetReference) else 224
        specs.append(resnet50_spec(size))
    if section.repository:
        repository = (
            section.repository
            if section.repository.is_absolute()
            else base_dir / section.repository
        )
        specs += load_family(repository)[0]
    return dedupe(specs)


def _server_settings(server: ServerSection) -> list[ServerSetting]:
    if server.launch == "remote":
        return [ServerSetting(server)]
    matrix = server.settings_model
    combos = matrix.combinations()
    varying = tuple(k for k in combos[0] if len({json.dumps(c[k]) for c in combos}) > 1)
    return [ServerSetting(server, combo, varying) for combo in combos]


def count_trials(scenario: Scenario, models: int) -> int:
    """The trials `expand` would list for `models` models, counted without listing them
    (a mix is one model).

    Each server's settings matrix must be validated (`settings_model`) and no bigger than
    `limits.max_trials` combinations: it is expanded, the rest is multiplied.
    """
    if scenario.workload.mix:
        models = 1
    per_setting = models * len(scenario.links) * len(_levels(scenario))
    total = 0
    for server in scenario.servers:
        if server.launch == "remote":
            total += len(scenario.workload.batch_sizes) * per_setting
            continue
        for combo in server.settings_model.combinations():
            batches = [b for b in scenario.workload.batch_sizes if b <= combo["max_batch_size"]]
            total += len(batches) * per_setting
    return total


def _levels(scenario: Scenario) -> list[LoadLevel]:
    w = scenario.workload
    if w.search:
        return [LoadLevel("search")]
    if w.mode == "closed":
        return [LoadLevel("concurrency", c) for c in w.concurrency]
    if w.trace:
        return [LoadLevel("trace")]
    return [LoadLevel("rate", r) for r in w.rates]


def _trial_seconds(scenario: Scenario, level: LoadLevel, link: LinkProfile) -> float:
    w = scenario.workload
    if w.stability:
        measure = w.stability.window_s * min(w.stability.max_windows, EXPECTED_STABILITY_WINDOWS)
    else:
        by_count = w.requests / level.value if w.requests and level.kind == "rate" else 0.0
        measure = max(w.duration_s or 0.0, by_count)
        if w.stop is not None and scenario.slo is not None:
            measure = min(measure, _until_decided(scenario, level, link))
    one = w.warmup_s + measure + TRIAL_OVERHEAD_S
    return one * w.search_settings.max_steps if level.kind == "search" else one


def _until_decided(scenario: Scenario, level: LoadLevel, link: LinkProfile) -> float:
    """How long an early-stopped trial is expected to measure, answering at its rate — a
    closed loop's from its clients and the link's round trip — with none over the bound
    (`_first_deciding_look`). Infinite where the rate cannot be told (a trace, a search:
    their own rules) or the load has no planned duration."""
    w, slo = scenario.workload, scenario.slo
    assert w.stop is not None and slo is not None
    if level.kind == "rate" and level.value:
        rate = level.value
    elif level.kind == "concurrency" and level.value:
        rate = level.value / (link.rtt_s + EXPECTED_SERVICE_S)
    else:
        return math.inf
    if not w.duration_s:
        return math.inf
    stop = w.stop
    return _first_deciding_look(
        rate, w.duration_s, stop.min_duration_s, stop.min_requests, slo.percentile,
        stop.confidence,
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _first_deciding_look(
    rate: float,
    duration_s: float,
    min_duration_s: float,
    min_requests: int,
    percentile: float,
    confidence: float,
) -> float:
    """The early stop's looks as the engine takes them (`load.engine`: from the minimum
    duration, every `EARLY_STOP_EVERY` s, each at the level `load.error_spending` allows
    it so far into the load), on answers at `rate` none of which is over the bound: when
    the first look has enough of them to decide (`requests_to_decide`), else the whole
    duration, whose final look decides what the early ones could not."""
    from servebench.load.error_spending import ErrorSpending

    spending = ErrorSpending(confidence)
    look = min_duration_s
    while look < duration_s:
        answered = rate * look
        if answered >= min_requests:
            level = spending.level(look / duration_s, answered)
            needed = requests_to_decide(1, 0, percentile, level) if level is not None else None
            if needed is not None and answered >= needed:
                return look
        look += EARLY_STOP_EVERY
    return duration_s


def expand(scenario: Scenario, base_dir: Path = Path(".")) -> Plan:
    """Every trial of the scenario, in run order; `base_dir` is the scenario's folder.

    Links are resolved here, once: each trial carries its `LinkProfile`. With a
    `workload.mix`, the mix is every trial's model (its models are the plan's `models`).
    """
    models = resolve_models(scenario, base_dir)
    mix = model_mix(scenario, models)
    if mix is not None:
        models = list(mix.specs)
    settings = [s for server in scenario.servers for s in _server_settings(server)]
    levels = _levels(scenario)
    links = [(link, scenario.link_profile(link, base_dir)) for link in scenario.links]
    trials: list[Trial] = []
    for setting in settings:
        for model in models if mix is None else [mix]:
            for link, profile in links:
                for batch_size in scenario.workload.batch_sizes:
                    if batch_size > setting.values.get("max_batch_size", batch_size):
                        continue  # validation ensured another combination takes it
                    for level in levels:
                        trials.append(
                            Trial(
                                len(trials), setting, model, profile, batch_size, level,
                                _trial_seconds(scenario, level, profile),
                                trial_id(setting, model, link, batch_size, level),
                            )
                        )  # fmt: skip
    return Plan(scenario, models, settings, trials)
