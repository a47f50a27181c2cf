"""The scenario file: a few lines of YAML that describe a whole study.

Every section is a strict pydantic model (unknown keys are errors) so a typo fails at
`scenario validate` time with the file, line and field, not an hour into a run.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from model_zoo.spec import LayerType, ModelSpec
from servebench.netem.profiles import BUILTIN_PROFILES, LinkProfile

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------- models


class GridModels(Strict):
    """depth x width x layer type, as InferBench's model generator varies them."""

    types: list[LayerType] = Field(min_length=1)
    depths: list[PositiveInt] = Field(min_length=1)
    widths: list[PositiveInt] = Field(min_length=1)
    input_shapes: dict[LayerType, list[PositiveInt]] = Field(default_factory=dict)
    num_outputs: PositiveInt = 10
    heads: PositiveInt | None = None
    seq_len: PositiveInt | None = None
    kernel_size: PositiveInt | None = None
    residual: bool | None = None


class MutatedModels(Strict):
    base: ModelSpec
    count: PositiveInt
    seed: int = 0
    max_depth: PositiveInt = 16
    max_width: PositiveInt = 1024


class ResNetReference(Strict):
    image_size: Annotated[int, Field(ge=32)] = 224


class ModelsSection(Strict):
    """Where the models come from; the union of every source given, deduplicated by id."""

    specs: list[ModelSpec] = Field(default_factory=list)
    grid: GridModels | None = None
    mutate: MutatedModels | None = None
    resnet50: bool | ResNetReference = False
    repository: Path | None = Field(
        default=None, description="an existing `servebench models export` folder"
    )

    @model_validator(mode="after")
    def _something(self) -> ModelsSection:
        if not (self.specs or self.grid or self.mutate or self.resnet50 or self.repository):
            raise ValueError("give at least one of specs, grid, mutate, resnet50, repository")
        return self


# ----------------------------------------------------------------------------- servers


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


class TritonSettingsMatrix(Strict):
    """Triton model-config settings; a list means "try each" (the settings matrix)."""

    max_batch_size: PositiveInt | list[PositiveInt] = 32
    dynamic_batching: bool | list[bool] = True
    max_queue_delay_us: NonNegativeInt | list[NonNegativeInt] = 0
    preferred_batch_sizes: list[PositiveInt] = Field(default_factory=list)
    instance_count: PositiveInt | list[PositiveInt] = 1
    instance_kind: Literal["KIND_CPU", "KIND_GPU"] = "KIND_CPU"

    def combinations(self) -> list[dict[str, Any]]:
        # Queue delay and preferred sizes mean nothing without the dynamic batcher, so
        # "batching off" is one setting, not one per delay.
        def normalize(combo: dict[str, Any]) -> dict[str, Any]:
            if combo["dynamic_batching"]:
                return combo
            return {**combo, "max_queue_delay_us": 0, "preferred_batch_sizes": []}

        return _unique(normalize(c) for c in _combinations(self))


class TfsSettingsMatrix(Strict):
    """TF Serving flags and batching parameters; a list means "try each"."""

    enable_batching: bool | list[bool] = False
    max_batch_size: PositiveInt | list[PositiveInt] = 32
    batch_timeout_us: NonNegativeInt | list[NonNegativeInt] = 1000
    num_batch_threads: PositiveInt | list[PositiveInt] = 2
    max_enqueued_batches: PositiveInt = 100
    rest_api_num_threads: PositiveInt | None = None
    intra_op_threads: NonNegativeInt | list[NonNegativeInt] = 0
    inter_op_threads: NonNegativeInt | list[NonNegativeInt] = 0

    def combinations(self) -> list[dict[str, Any]]:
        defaults = {k: TfsSettingsMatrix.model_fields[k].default for k in _TFS_BATCHING}

        def normalize(combo: dict[str, Any]) -> dict[str, Any]:
            return combo if combo["enable_batching"] else {**combo, **defaults}

        return _unique(normalize(c) for c in _combinations(self))


_TFS_BATCHING = ("max_batch_size", "batch_timeout_us", "num_batch_threads", "max_enqueued_batches")


def _unique(combos: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for combo in combos:
        seen.setdefault(json.dumps(combo, sort_keys=True), combo)
    return list(seen.values())


def _combinations(settings: BaseModel) -> list[dict[str, Any]]:
    """The cartesian product of list-valued settings, in field order."""
    names = list(type(settings).model_fields)
    values = [
        _as_list(getattr(settings, n)) if n != "preferred_batch_sizes" else [getattr(settings, n)]
        for n in names
    ]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


class ServerSection(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: Literal["triton", "tfs"]
    launch: Literal["local", "docker", "remote"] = "local"
    protocol: Literal["http", "grpc"] = "http"
    url: str | None = Field(default=None, description="remote: the HTTP/REST base URL")
    grpc_url: str | None = Field(default=None, description="remote: host:port for gRPC")
    image: str | None = Field(default=None, description="docker: image with tag")
    gpus: NonNegativeInt = 0
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _launch_rules(self) -> ServerSection:
        if self.kind == "tfs" and self.launch == "local":
            raise ValueError(
                "launch: TF Serving has no local launcher here; use docker (a Docker engine) "
                "or remote (url of a running server)"
            )
        if self.launch == "remote":
            # The HTTP/REST URL is always needed: readiness and model state are read there.
            if not self.url:
                raise ValueError("url: a remote server needs its HTTP/REST address")
            if self.protocol == "grpc" and not self.grpc_url:
                raise ValueError("grpc_url: a remote grpc server needs its gRPC address")
            if self.settings:
                raise ValueError("settings: a remote server's settings cannot be changed")
        elif self.url or self.grpc_url:
            raise ValueError("url: only remote servers take an address")
        if self.image and self.launch != "docker":
            raise ValueError("image: only docker servers take an image")
        return self

    @property
    def settings_model(self) -> TritonSettingsMatrix | TfsSettingsMatrix:
        model = TritonSettingsMatrix if self.kind == "triton" else TfsSettingsMatrix
        return model.model_validate(self.settings)


# ----------------------------------------------------------------------------- workload


class StabilityConfig(Strict):
    window_s: PositiveFloat = 5.0
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.1
    max_windows: PositiveInt = 10


class SearchConfig(Strict):
    """SLO search: the highest open-loop rate whose SLO percentile meets the bound."""

    min_rate: PositiveFloat = 1.0
    max_rate: PositiveFloat = 1000.0
    precision: Annotated[float, Field(gt=0, lt=1)] = 0.05
    max_steps: PositiveInt = 12

    @model_validator(mode="after")
    def _ordered(self) -> SearchConfig:
        if self.max_rate <= self.min_rate:
            raise ValueError(f"max_rate: must be > min_rate ({self.min_rate}), got {self.max_rate}")
        return self


class Workload(Strict):
    mode: Literal["open", "closed"] = "open"
    arrival: Literal["poisson", "constant"] = "poisson"
    rates: list[PositiveFloat] = Field(default_factory=list)
    trace: Path | None = Field(default=None, description="perf_analyzer --request-intervals file")
    concurrency: list[PositiveInt] = Field(default_factory=list)
    think_time_s: Annotated[float, Field(ge=0)] = 0.0
    batch_sizes: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    duration_s: PositiveFloat | None = 10.0
    requests: PositiveInt | None = None
    warmup_s: Annotated[float, Field(ge=0)] = 1.0
    timeout_s: PositiveFloat = 10.0
    stability: StabilityConfig | None = None
    search: Literal["max_rate"] | None = None
    search_settings: SearchConfig = Field(default_factory=SearchConfig)

    @model_validator(mode="after")
    def _levels(self) -> Workload:
        if self.mode == "open":
            if self.concurrency:
                raise ValueError("concurrency: only for mode closed (open loop uses rates)")
            if self.think_time_s:
                raise ValueError("think_time_s: only for mode closed")
            if not (self.rates or self.trace or self.search):
                raise ValueError("rates: open loop needs rates, a trace or search: max_rate")
            if self.trace and self.rates:
                raise ValueError("trace: give rates or a trace, not both")
        else:
            if self.rates or self.trace:
                raise ValueError("rates: only for mode open (closed loop uses concurrency)")
            if not self.concurrency:
                raise ValueError("concurrency: closed loop needs at least one level")
            if self.search:
                raise ValueError("search: max_rate searches open-loop rates; use mode open")
        if self.stability and self.requests:
            raise ValueError("stability: decides when to stop; drop requests")
        if self.duration_s is None and self.requests is None and self.stability is None:
            raise ValueError("duration_s: give duration_s, requests, or stability")
        return self

    @field_validator("rates", "concurrency", "batch_sizes")
    @classmethod
    def _distinct(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(f"must not repeat a value, got {values}")
        return values


# ----------------------------------------------------------------------------- the rest


class Slo(Strict):
    percentile: Annotated[float, Field(gt=0, le=100)] = 99.0
    latency_ms: PositiveFloat


class PriceOverride(Strict):
    usd_per_hour: PositiveFloat
    gpu: str = ""
    gpu_count: NonNegativeInt = 0
    vcpus: PositiveInt | None = None


class CostSection(Strict):
    instance: str = Field(min_length=1)
    prices: dict[str, PriceOverride] = Field(default_factory=dict)


def _known_link(link: str | LinkProfile) -> str | LinkProfile:
    if (
        isinstance(link, str)
        and link not in BUILTIN_PROFILES
        and not link.endswith((".yaml", ".yml"))
    ):
        raise ValueError(
            f"not a built-in link ({', '.join(BUILTIN_PROFILES)}) nor a .yaml profile file"
        )
    return link


class Scenario(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    seed: int = 0
    output: Path = Path("results")
    models: ModelsSection
    servers: list[ServerSection] = Field(min_length=1)
    workload: Workload
    links: list[Annotated[str | LinkProfile, AfterValidator(_known_link)]] = Field(
        default_factory=lambda: ["direct"], min_length=1
    )
    slo: Slo | None = None
    cost: CostSection | None = None

    @field_validator("links")
    @classmethod
    def _distinct_links(cls, links: list[str | LinkProfile]) -> list[str | LinkProfile]:
        names = [link if isinstance(link, str) else link.name for link in links]
        if len(set(names)) != len(names):
            raise ValueError(f"link names must be distinct, got {names}")
        return links

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"servers: names must be distinct, got {names}")
        if self.workload.search and self.slo is None:
            raise ValueError("slo: search: max_rate needs an slo (percentile and latency_ms)")
        return self
