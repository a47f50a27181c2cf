"""The scenario file: a few lines of YAML that describe a whole study.

Every section is a strict pydantic model (unknown keys are errors) so a typo fails at
`scenario validate` time with the file, line and field, not an hour into a run. Rules
between fields are `@rule` methods (servebench.common.validation), so one pass reports every
problem. Every number is finite and bounded: hard ceilings where no real study needs more,
and `limits:` (the `Limits` section) where one might, so that a slip — an extra zero,
`1e26` — is refused here instead of filling the memory or never ending.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, ConfigDict, Field, PrivateAttr, StrictInt, field_validator

from model_zoo.imports import ImportedModel, model_limit, read_model
from model_zoo.mutate import DEFAULT_INPUT_SHAPES
from model_zoo.spec import KNOB_DEFAULTS, LayerType, ModelSpec
from servebench.clients.endpoints import grpc_target, http_base
from servebench.clients.input_data import InputData, read_input_data
from servebench.clients.registry import ProtocolSpec, for_server

# Every bound is servebench.common.limits' (the command line applies the same ones): hard
# ceilings, beyond which a value is a slip whatever the study, and the `Limits` defaults.
from servebench.common.limits import (
    MAX_COLD_START_REPEATS,
    MAX_CONCURRENCY,
    MAX_DEPTH,
    MAX_FAMILY_SIZE,
    MAX_GPUS,
    MAX_HEADS,
    MAX_KERNEL_SIZE,
    MAX_MIX_MODELS,
    MAX_MIX_WEIGHT,
    MAX_MODEL_MB,
    MAX_NAME_CHARS,
    MAX_OUTPUTS,
    MAX_RATE,
    MAX_REMEASURES,
    MAX_REPEATS,
    MAX_REQUEST_MB,
    MAX_REQUESTS,
    MAX_SAMPLE_ELEMENTS,
    MAX_SEARCH_STEPS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_STABILITY_WINDOWS,
    MAX_THREADS,
    MAX_TRIAL_S,
    MAX_TUNE_LEVEL,
    MAX_TUNE_TRIALS,
    MAX_WIDTH,
    MIN_RATE,
    MIN_TUNE_LEVEL,
)
from servebench.common.quantiles import CONFIDENCE
from servebench.common.validation import OnePassModel, Problem, known, rule
from servebench.load.summary import (
    EARLY_STOP_MIN_DURATION,
    EARLY_STOP_MIN_REQUESTS,
    LAG_RATIO,
    LATE_LIMIT,
    LATE_THRESHOLD,
    RATE_TOLERANCE,
)
from servebench.netem.errors import UnknownLinkError
from servebench.netem.profiles import LinkProfile, link_kind, resolve_link
from servebench.pricing import InstancePrice, scenario_price
from servebench.servers.errors import ServerKindError
from servebench.servers.kinds import KINDS, LAUNCHES, ServerKind, api_names, scenario_kind
from servebench.servers.settings import Batch, SettingsMatrix

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class Strict(OnePassModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ----------------------------------------------------------------------------- limits


class Limits(Strict):
    """Ceilings a scenario may raise (`limits:`) when a real study needs more.

    Each default refuses what would run for days or exhaust a machine's memory; each has
    a hard ceiling of its own so the override cannot be a slip of the same kind. The
    `warn_*` thresholds only warn (`scenario validate` and `plan`).
    docs/scenario-limits.md lists them.
    """

    max_models: Annotated[int, Field(gt=0, le=MAX_FAMILY_SIZE)] = 1000
    max_trials: Annotated[int, Field(gt=0, le=1_000_000)] = 100_000
    max_rate: Annotated[float, Field(gt=0, le=10_000_000)] = MAX_RATE
    max_concurrency: Annotated[int, Field(gt=0, le=1_000_000)] = MAX_CONCURRENCY
    max_requests: Annotated[int, Field(gt=0, le=10_000_000_000)] = MAX_REQUESTS
    max_trial_s: Annotated[float, Field(gt=0, le=30 * 86_400)] = MAX_TRIAL_S
    max_request_mb: Annotated[float, Field(gt=0, le=65_536)] = MAX_REQUEST_MB
    max_model_mb: Annotated[float, Field(gt=0, le=1_048_576)] = MAX_MODEL_MB
    max_repeats: Annotated[int, Field(gt=0, le=MAX_REPEATS)] = 50
    warn_trials: Annotated[int, Field(gt=0, le=1_000_000)] = 1000
    warn_hours: Annotated[float, Field(gt=0, le=10_000)] = 12.0


LIMITS_CONTEXT_KEY = "limits"


def limits_of(context: Mapping[str, Any]) -> Limits:
    """The scenario's limits, which reach nested sections through the validation context."""
    limits = context.get(LIMITS_CONTEXT_KEY)
    return limits if isinstance(limits, Limits) else Limits()


def over_limit(name: str, limits: Limits, unit: str = "") -> str:
    """The message for a value past a limit, with the way to allow it."""
    return f"must be <= {getattr(limits, name):,g}{unit}; raise limits.{name} if you mean it"


# ----------------------------------------------------------------------------- models


class GridModels(Strict):
    """depth x width x layer type, as InferBench's model generator varies them."""

    types: list[LayerType] = Field(min_length=1)
    depths: list[Annotated[int, Field(gt=0, le=MAX_DEPTH)]] = Field(min_length=1)
    widths: list[Annotated[int, Field(gt=0, le=MAX_WIDTH)]] = Field(min_length=1)
    input_shapes: dict[LayerType, list[Annotated[int, Field(gt=0, le=MAX_SAMPLE_ELEMENTS)]]] = (
        Field(default_factory=dict)
    )
    num_outputs: Annotated[int, Field(gt=0, le=MAX_OUTPUTS)] = 10
    heads: Annotated[int, Field(gt=0, le=MAX_HEADS)] | None = None
    seq_len: Annotated[int, Field(gt=0, le=MAX_SEQ_LEN)] | None = None
    kernel_size: Annotated[int, Field(gt=0, le=MAX_KERNEL_SIZE)] | None = None
    residual: bool | None = None

    @property
    def size(self) -> int:
        """How many models the grid names, counted without building one."""
        return len(set(self.types)) * len(set(self.depths)) * len(set(self.widths))

    @rule("input_shapes")
    def _ranks(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        for layer_type, shape in self.input_shapes.items():
            rank = len(DEFAULT_INPUT_SHAPES.get(layer_type, ()))
            if layer_type == "resnet50":
                yield ("input_shapes", layer_type), "resnet50 is not a grid type (resnet50: true)"
            elif len(shape) != rank:
                expected = f"{layer_type} takes {_SHAPE_NAMES[rank]}, got {len(shape)} dims"
                yield ("input_shapes", layer_type), expected

    @rule("types", "widths", "heads", "kernel_size")
    def _knobs_fit(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        # What ModelSpec would refuse for one combination, said once at the grid's line.
        if "attention" in self.types:
            heads = self.heads or KNOB_DEFAULTS["attention"]["heads"]
            for i, width in enumerate(self.widths):
                if width % heads:
                    yield ("widths", i), f"attention needs widths divisible by heads ({heads})"
        if "conv" in self.types and self.kernel_size is not None and self.kernel_size % 2 == 0:
            yield ("kernel_size",), "must be odd for 'same' padding"

    @rule("types", "depths", "widths")
    def _not_too_many(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        limits = limits_of(context)
        if self.size > limits.max_models:
            product = (
                f"{len(set(self.types))} types x {len(set(self.depths))} depths x "
                f"{len(set(self.widths))} widths = {self.size:,} models"
            )
            yield (), f"{product}; {over_limit('max_models', limits)}"


_SHAPE_NAMES = {1: "(features,)", 3: "(height, width, channels)"}


class MutatedModels(Strict):
    base: ModelSpec
    count: PositiveInt
    seed: int = 0
    max_depth: Annotated[int, Field(gt=0, le=MAX_DEPTH)] = 16
    max_width: Annotated[int, Field(gt=0, le=MAX_WIDTH)] = 1024

    @rule("count")
    def _not_too_many(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        limits = limits_of(context)
        if self.count + 1 > limits.max_models:
            yield ("count",), over_limit("max_models", limits) + " (the base counts too)"


class ResNetReference(Strict):
    image_size: Annotated[int, Field(ge=32, le=4096)] = 224


class ModelFile(Strict):
    """A user's own model (any format `servebench models import` reads: ONNX, TorchScript,
    torch.export, Keras, SavedModel, a Triton model folder), imported by the run.

    `path` is relative to the scenario's folder; `name` is the name it is served under and
    trials.csv's `model` (default: the file's stem); `input_shapes` give one sample's
    shape of each input whose file leaves a dimension open (docs/scenarios.md).
    """

    path: Path
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
    )
    input_shapes: dict[str, list[Annotated[int, Field(gt=0, le=MAX_SAMPLE_ELEMENTS)]]] = Field(
        default_factory=dict
    )


class ModelsSection(Strict):
    """Where the models come from; the union of every source given, deduplicated by id."""

    specs: list[ModelSpec] = Field(default_factory=list)
    grid: GridModels | None = None
    mutate: MutatedModels | None = None
    resnet50: bool | ResNetReference = False
    repository: Path | None = Field(
        default=None, description="an existing `servebench models export` folder"
    )
    files: list[ModelFile] = Field(default_factory=list)

    @property
    def size(self) -> int:
        """How many models the section names at most (an export folder's are not counted)."""
        return (
            len(self.specs)
            + (self.grid.size if self.grid else 0)
            + (self.mutate.count + 1 if self.mutate else 0)
            + (1 if self.resnet50 else 0)
            + len(self.files)
        )

    @rule("specs", "grid", "mutate", "resnet50", "repository", "files")
    def _something(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if not (
            self.specs or self.grid or self.mutate or self.resnet50 or self.repository or self.files
        ):
            yield (), "give at least one of specs, grid, mutate, resnet50, repository, files"

    @rule("specs", "grid", "mutate", "resnet50")
    def _not_too_many(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        limits = limits_of(context)
        parts = [self.grid.size if self.grid else 0, self.mutate.count + 1 if self.mutate else 0]
        if self.size > limits.max_models and all(p <= limits.max_models for p in parts):
            yield (), f"{self.size:,} models in all; " + over_limit("max_models", limits)


# ----------------------------------------------------------------------------- servers

# Literal types built from the registry (`servers.kinds`), which owns these words; the YAML
# spells them exactly as before.
ApiName = Literal[api_names()]  # type: ignore[valid-type]
LaunchName = Literal[tuple(LAUNCHES)]  # type: ignore[valid-type]
_MODES = tuple(dict.fromkeys(mode for kind in KINDS.values() for mode in kind.model_control))
ModelControl = Literal[_MODES]  # type: ignore[valid-type]
# What a server section's launch-specific fields are called in messages.
_FIELD_NOUNS = {"url": "an address", "grpc_url": "an address", "image": "an image"}


class ServerSection(Strict):
    """One server of a scenario: `api` (the API it serves: triton, tfs) and `launch` name
    its entry in the server-kind registry (`server_kind`), whose rules the checks below
    read."""

    #: Fields renamed since, by their old name. A file that still writes the old name is
    #: read as if it wrote the new one (`_prepare`); `Scenario.notes` says so, one line
    #: each (`renamed_fields` finds them).
    RENAMED: ClassVar[Mapping[str, str]] = {"kind": "api"}

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    api: ApiName
    launch: LaunchName = "local"
    protocol: Literal["http", "grpc"] = "http"
    url: str | None = Field(default=None, description="remote: the HTTP/REST base URL")
    grpc_url: str | None = Field(default=None, description="remote: host:port for gRPC")
    image: str | None = Field(default=None, description="docker: image with tag")
    gpus: Annotated[int, Field(ge=0, le=MAX_GPUS)] = 0
    # remote: "none" (the server serves its own model config; servebench only checks each
    # model is ready) or "explicit" (a Triton in explicit mode; servebench loads them).
    model_control: ModelControl = "none"
    ready_timeout_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 30.0
    settings: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def _prepare(cls, data: Any) -> Any:
        """The old names as the new ones (a file that writes both keeps both: the old one
        is then an unknown key, which the schema reports)."""
        if not isinstance(data, Mapping):
            return data
        old = [name for name, new in cls.RENAMED.items() if name in data and new not in data]
        if not old:
            return data
        return {cls.RENAMED[key] if key in old else key: value for key, value in data.items()}

    @rule("api", "launch")
    def _launcher_exists(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        try:
            scenario_kind(self.api, self.launch)
        except ServerKindError as err:
            yield ("launch",), str(err)

    @rule("launch", "protocol", "url", "grpc_url")
    def _addresses(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        launch = LAUNCHES[self.launch]
        if "url" in launch.takes:
            # The HTTP/REST URL is always needed: readiness and model state are read there.
            if not self.url:
                yield ("url",), f"a {launch.name} server needs its HTTP/REST address"
            if self.protocol == "grpc" and not self.grpc_url:
                yield ("grpc_url",), f"a {launch.name} grpc server needs its gRPC address"
        for name in ("url", "grpc_url"):
            if getattr(self, name) and name not in launch.takes:
                yield (name,), _only_launches_take(name)
        if self.url and (problem := _http_address_problem(self.url)):
            yield ("url",), problem
        if self.grpc_url and (problem := _grpc_address_problem(self.grpc_url)):
            yield ("grpc_url",), problem

    @rule("api", "launch", "settings")
    def _settings_taken(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        kind = _kind_or_none(self.api, self.launch)
        if kind is not None and kind.settings is None and self.settings:
            yield ("settings",), f"a {kind.launch.name} server's settings cannot be changed"

    @rule("launch", "api", "model_control")
    def _model_control(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        kind = _kind_or_none(self.api, self.launch)
        if kind is None or self.model_control in kind.model_control:
            return
        takers = [k for k in KINDS.values() if self.model_control in k.model_control]
        launches = list(dict.fromkeys(k.launch.name for k in takers))
        if kind.launch.name not in launches:
            where = " or ".join(launches)
            yield ("model_control",), f"only for {where} servers (servebench loads its own)"
        else:
            owner = " or ".join(dict.fromkeys(k.api.title for k in takers))
            yield (
                ("model_control",),
                f"{self.model_control} is {owner}'s mode; {kind.api.title} has none",
            )

    @rule("launch", "image")
    def _image_for_docker(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.image and "image" not in LAUNCHES[self.launch].takes:
            yield ("image",), _only_launches_take("image")

    @property
    def server_kind(self) -> ServerKind:
        """The registry entry this section means (a `ServerKindError` on a pair validation
        refuses)."""
        return scenario_kind(self.api, self.launch)

    @property
    def client_protocol(self) -> ProtocolSpec:
        """The protocol trials speak to this server: its API's over `protocol` (http,
        grpc), from the clients registry."""
        return for_server(self.server_kind.api.name, self.protocol)

    @property
    def settings_type(self) -> type[SettingsMatrix] | None:
        """The settings matrix the kind takes; None for a kind that takes none (a server
        servebench attaches to) or an api and launch that name no kind."""
        kind = _kind_or_none(self.api, self.launch)
        return kind.settings if kind is not None else None

    @property
    def settings_model(self) -> SettingsMatrix:
        settings_type = self.settings_type
        if settings_type is None:
            raise ValueError(f"server {self.name}: a {self.launch} server has no settings")
        return settings_type.model_validate(self.settings)


def renamed_fields(data: Any) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Where a scenario's raw data writes a field by its old name (`ServerSection.RENAMED`),
    with the new name."""
    servers = data.get("servers") if isinstance(data, Mapping) else None
    for i, server in enumerate(servers if isinstance(servers, list) else []):
        if isinstance(server, Mapping):
            for old, new in ServerSection.RENAMED.items():
                if old in server and new not in server:
                    yield ("servers", i, old), new


def _kind_or_none(api: str, launch: str) -> ServerKind | None:
    try:
        return scenario_kind(api, launch)
    except ServerKindError:
        return None


def _only_launches_take(field: str) -> str:
    takers = " or ".join(n for n, launch in LAUNCHES.items() if field in launch.takes)
    return f"only {takers} servers take {_FIELD_NOUNS[field]}"


# A host name or an IP address (IPv6 in brackets, as URLs write it); what yarl accepts
# besides (spaces, for one) would only fail at connect time.
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)$")


def _http_address_problem(url: str) -> str | None:
    try:
        parsed = http_base(url)
    except ValueError as err:
        return _address_reason(err) + ", like http://127.0.0.1:8000"
    host = parsed.raw_host or ""
    if not _HOST.match(f"[{host}]" if ":" in host else host):
        return f"host {host!r} is not a host name or IP address; like http://127.0.0.1:8000"
    if parsed.explicit_port == 0:
        return "port 0 is not a server's port; like http://127.0.0.1:8000"
    return None


def _grpc_address_problem(url: str) -> str | None:
    try:
        target = grpc_target(url)
    except ValueError as err:
        return _address_reason(err) + ", like 127.0.0.1:8001"
    host, _, port = target.rpartition(":")
    if not _HOST.match(host):
        return f"host {host!r} is not a host name or IP address; like 127.0.0.1:8001"
    if port == "0":
        return "port 0 is not a server's port; like 127.0.0.1:8001"
    return None


def _address_reason(err: ValueError) -> str:
    """The endpoint parser's reason, without the `url: 'x'` it starts with (shown already)."""
    return re.sub(r"^url: '.*?'(: | )", "", str(err), count=1)


# ----------------------------------------------------------------------------- workload


class StabilityConfig(Strict):
    window_s: PositiveFloat = 5.0
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.1
    max_windows: Annotated[int, Field(gt=0, le=MAX_STABILITY_WINDOWS)] = 10

    @rule("window_s", "max_windows")
    def _bounded(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        limits = limits_of(context)
        if self.window_s * self.max_windows > limits.max_trial_s:
            windows = f"{self.max_windows} windows of {self.window_s:g} s"
            yield ("window_s",), f"{windows} exceed a trial's {over_limit('max_trial_s', limits)}"


class StopConfig(Strict):
    """Early stop: end a trial once its SLO question is decided at `confidence` (the
    SLO percentile's interval lies wholly within the bound or wholly over it), never
    before `min_duration_s` and `min_requests` (MLPerf LoadGen's minimums). `confidence`
    is also the level of every interval the trial's row reports."""

    confidence: Annotated[float, Field(ge=0.5, lt=1)] = CONFIDENCE
    min_duration_s: Annotated[float, Field(ge=0, le=MAX_TRIAL_S)] = EARLY_STOP_MIN_DURATION
    min_requests: Annotated[int, Field(gt=0, le=MAX_REQUESTS)] = EARLY_STOP_MIN_REQUESTS


class GeneratorsConfig(Strict):
    """Send each trial's load from a gang of `count` generators on Dask (`load.gang`): a
    LocalCluster of that many worker processes on this machine, or with `scheduler`
    (tcp://host:port) that many workers of an existing Dask cluster. One seeded schedule
    is split between them (every count-th arrival; closed loop: the concurrency)."""

    count: Annotated[int, Field(ge=1, le=MAX_THREADS)] = 1
    scheduler: Annotated[str, Field(pattern=r"^(tcp|tls|ws|wss|ucx)://[^/\s]+:\d+$")] | None = None

    @property
    def is_gang(self) -> bool:
        """Whether loads go to Dask (more than one generator, or a scheduler's workers)
        rather than staying in this one process."""
        return self.count > 1 or self.scheduler is not None


class SearchConfig(Strict):
    """SLO search: the highest open-loop rate whose SLO percentile meets the bound."""

    min_rate: PositiveFloat = 1.0
    max_rate: PositiveFloat = 1000.0
    precision: Annotated[float, Field(gt=0, lt=1)] = 0.05
    max_steps: Annotated[int, Field(gt=0, le=MAX_SEARCH_STEPS)] = 12

    @rule("min_rate", "max_rate")
    def _ordered(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.max_rate <= self.min_rate:
            yield ("max_rate",), f"must be > min_rate ({self.min_rate:g})"
        if self.min_rate < MIN_RATE:
            yield ("min_rate",), f"must be >= {MIN_RATE:g} (a request every 1000 s)"
        limits = limits_of(context)
        if self.max_rate > limits.max_rate:
            yield ("max_rate",), over_limit("max_rate", limits)


class MixEntry(Strict):
    """One model of a weighted mix: a model id of the scenario's models and its weight
    (a share of the requests relative to the others')."""

    model: str = Field(min_length=1)
    weight: Annotated[float, Field(gt=0, le=MAX_MIX_WEIGHT)]


class Workload(Strict):
    mode: Literal["open", "closed"] = "open"
    arrival: Literal["poisson", "constant"] = "poisson"
    rates: list[PositiveFloat] = Field(default_factory=list)
    trace: Path | None = Field(default=None, description="perf_analyzer --request-intervals file")
    inputs: Path | None = Field(
        default=None,
        description="real input data: an .npz or perf_analyzer --input-data JSON file "
        "(docs/load.md), sent instead of random tensors to every model",
    )
    concurrency: list[PositiveInt] = Field(default_factory=list)
    think_time_s: Annotated[float, Field(ge=0, le=MAX_SECONDS)] = 0.0
    batch_sizes: list[Batch] = Field(default_factory=lambda: [1], min_length=1)
    duration_s: PositiveFloat | None = 10.0
    requests: PositiveInt | None = None
    warmup_s: Annotated[float, Field(ge=0)] = 1.0
    timeout_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = 10.0
    repeats: Annotated[StrictInt, Field(gt=0)] = Field(
        default=1,
        description="replicates of every setting, one per round, rounds in a seeded random "
        "order (docs/scenarios.md); 1 measures each once",
    )
    remeasure: Annotated[StrictInt, Field(ge=0, le=MAX_REMEASURES)] = Field(
        default=MAX_REMEASURES,
        description="how often a replicate disturbed from outside (interference_* warnings) "
        "is measured again in a later round, with repeats > 1; 0 keeps it, flagged",
    )
    # How generator lateness is judged (see servebench.load.summary): a send this late is
    # late; more late sends than late_limit is a warning; sending rate_tolerance short of
    # the schedule, or a lag p99 over lag_ratio of latency p99, makes a trial INVALID.
    late_threshold_ms: Annotated[float, Field(gt=0, le=MAX_SECONDS * 1e3)] = LATE_THRESHOLD * 1e3
    late_limit: Annotated[float, Field(ge=0, le=1)] = LATE_LIMIT
    rate_tolerance: Annotated[float, Field(ge=0, lt=1)] = RATE_TOLERANCE
    lag_ratio: Annotated[float, Field(gt=0, le=1000)] = LAG_RATIO
    stability: StabilityConfig | None = None
    stop: StopConfig | None = None
    search: Literal["max_rate"] | None = None
    search_settings: SearchConfig = Field(default_factory=SearchConfig)
    mix: list[MixEntry] = Field(
        default_factory=list,
        min_length=2,
        max_length=MAX_MIX_MODELS,
        description="a weighted mix of models in one trial: each request picks its model "
        "by weight (seeded by the scenario's seed)",
    )
    generators: GeneratorsConfig | None = Field(
        default=None,
        description="send each load from a gang of generators on Dask (docs/load.md)",
    )

    @rule("mix")
    def _mix_models_distinct(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        seen: set[str] = set()
        for i, entry in enumerate(self.mix):
            model = entry.__dict__.get("model")  # None where the entry's model is broken
            if model is not None and model in seen:
                yield ("mix", i, "model"), f"{model!r} is in the mix already"
            seen.add(model)

    @rule("mode")
    def _levels(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        # Each check reads different fields; one that read a broken field is left out.
        if self.mode == "open":
            if known(self, "concurrency") and self.concurrency:
                yield ("concurrency",), "only for mode closed (open loop uses rates)"
            if known(self, "think_time_s") and self.think_time_s:
                yield ("think_time_s",), "only for mode closed"
            if known(self, "rates", "trace", "search") and not (
                self.rates or self.trace or self.search
            ):
                yield ("rates",), "open loop needs rates, a trace or search: max_rate"
            if known(self, "rates", "trace") and self.trace and self.rates:
                yield ("trace",), "give rates or a trace, not both"
            return
        for name in ("rates", "trace"):
            if known(self, name) and getattr(self, name):
                yield (name,), "only for mode open (closed loop uses concurrency)"
        if known(self, "concurrency") and not self.concurrency:
            yield ("concurrency",), "closed loop needs at least one level"
        if known(self, "search") and self.search:
            yield ("search",), "max_rate searches open-loop rates; use mode open"

    @rule()
    def _when_to_stop(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if known(self, "stability", "requests") and self.stability and self.requests:
            yield ("stability",), "decides when to stop; drop requests"
        if (
            known(self, "duration_s", "requests", "stability")
            and self.duration_s is None
            and self.requests is None
            and self.stability is None
        ):
            yield ("duration_s",), "give duration_s, requests, or stability"

    @rule()
    def _within_limits(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        limits = limits_of(context)
        for i, rate in enumerate(self.rates if known(self, "rates") else []):
            if rate > limits.max_rate:
                yield ("rates", i), over_limit("max_rate", limits)
            elif rate < MIN_RATE:
                yield ("rates", i), f"must be >= {MIN_RATE:g} (a request every 1000 s)"
        for i, level in enumerate(self.concurrency if known(self, "concurrency") else []):
            if level > limits.max_concurrency:
                yield ("concurrency", i), over_limit("max_concurrency", limits)
        if known(self, "requests") and (self.requests or 0) > limits.max_requests:
            yield ("requests",), over_limit("max_requests", limits)
        for name in ("duration_s", "warmup_s"):
            if known(self, name) and (getattr(self, name) or 0) > limits.max_trial_s:
                yield (name,), over_limit("max_trial_s", limits)
        if known(self, "repeats") and self.repeats > limits.max_repeats:
            yield ("repeats",), over_limit("max_repeats", limits)

    @field_validator("rates", "concurrency", "batch_sizes")
    @classmethod
    def _distinct(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(f"must not repeat a value, got {values}")
        return values


# ----------------------------------------------------------------------------- the rest


class Slo(Strict):
    percentile: Annotated[float, Field(gt=0, le=100)] = 99.0
    latency_ms: Annotated[float, Field(gt=0, le=MAX_SECONDS * 1000)]


class ColdStartSection(Strict):
    """How often each server setting's cold start is timed. One start is one sample; more
    (each a stop, start, model load and first inference before the trials) give the
    median, min and max of every phase, since a single start can be an outlier."""

    repeats: Annotated[int, Field(gt=0, le=MAX_COLD_START_REPEATS)] = 1


class PriceOverride(Strict):
    usd_per_hour: Annotated[float, Field(gt=0, le=100_000)]
    gpu: str = ""
    gpu_count: Annotated[int, Field(ge=0, le=MAX_GPUS)] = 0
    vcpus: Annotated[int, Field(gt=0, le=100_000)] | None = None


class CostSection(Strict):
    instance: str = Field(min_length=1)
    prices: dict[str, PriceOverride] = Field(default_factory=dict)

    def price(self) -> InstancePrice:
        """What the trials are costed at: `instance` with `prices` merged over the shipped
        table (`pricing.scenario_price`, as the runner and `servebench ui` price)."""
        overrides = {name: p.model_dump() for name, p in self.prices.items()}
        return scenario_price(self.instance, overrides)


class TuneSection(Strict):
    """A configuration search over each server's settings matrix (`scenario/tune.py`):
    `brute` measures every setting (the matrix as it always ran), `quick` climbs from a
    start (the first value of each list, or `start`) one setting at a time to the
    neighbouring value that improves `objective` most, until `budget_trials` settings are
    measured (a local optimum with trials left restarts the climb elsewhere) or, without a
    budget, no neighbour improves; measured in rounds it moves only on a paired
    improvement at `level`, confirmed by one more round. `race` (`scenario/race.py`)
    measures every setting (`over: all`) or the start and its neighbours (`over:
    neighbourhood`) in `first_rounds` rounds, then drops those a Friedman test finds worse
    than the leader at `level`, one round of the survivors at a time, until one is left,
    `workload.repeats` rounds are measured or `budget_trials` replicate trials are spent.
    Objectives: `max_rate` (the SLO search's highest rate, higher is better), `cost_at_qps`
    (USD per million inferences of serving `qps` with ceil(qps / max_rate) replicas, lower
    is better) and `p99` (the p99's high bound at `qps`, lower is better)."""

    method: Literal["quick", "brute", "race"] = "quick"
    objective: Literal["max_rate", "cost_at_qps", "p99"] = "max_rate"
    qps: Annotated[float, Field(gt=0, le=MAX_RATE * MAX_THREADS)] | None = None
    budget_trials: Annotated[int, Field(ge=1, le=MAX_TUNE_TRIALS)] | None = None
    start: dict[str, Any] = Field(
        default_factory=dict,
        description="quick's (or a race over the neighbourhood's) starting setting: a value "
        "from each named setting's list",
    )
    level: Annotated[float, Field(ge=MIN_TUNE_LEVEL, le=MAX_TUNE_LEVEL)] = Field(
        default=0.05,
        description="how often a search may call settings that are the same different: a "
        "race drops one, a replicated quick climb moves",
    )
    first_rounds: Annotated[int, Field(ge=2, le=MAX_REPEATS)] = Field(
        default=5, description="race: the rounds of every candidate before the first test"
    )
    over: Literal["all", "neighbourhood"] = Field(
        default="all", description="race: every setting, or the start and its neighbours"
    )

    @rule("method", "budget_trials", "start", "level")
    def _searches_only(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.method == "brute":
            for name in ("budget_trials", "start", "level"):
                if known(self, name) and name in self.model_fields_set:
                    yield (name,), "only for methods quick and race (brute measures every setting)"

    @rule("method", "first_rounds", "over", "start")
    def _race_only(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.method != "race":
            for name in ("first_rounds", "over"):
                if known(self, name) and name in self.model_fields_set:
                    yield (name,), "only for method race"
        elif self.over == "all" and known(self, "start") and self.start:
            yield ("start",), "a race over all settings has no start: only with over: neighbourhood"

    @rule("objective", "qps")
    def _qps(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.objective != "max_rate" and self.qps is None:
            yield ("qps",), f"objective {self.objective} is taken at a target rate: give qps"
        if self.objective == "max_rate" and self.qps is not None:
            yield ("qps",), "only for objectives cost_at_qps and p99"


def _known_link(link: str | LinkProfile) -> str | LinkProfile:
    """A reference `link_kind` understands (a profile file is read later, by `link_profile`)."""
    try:
        link_kind(link)
    except UnknownLinkError as err:
        raise ValueError(err.reason) from None
    if isinstance(link, LinkProfile) and (name := infinite_field(link)):
        raise ValueError(f"{name}: must be a finite number")
    return link


def infinite_field(profile: LinkProfile) -> str | None:
    """The first number of a link profile that is not finite, if any.

    Profiles take `.inf` for a rate (netem's own model allows it); the emulator would then
    pace by it, so a scenario refuses it.
    """
    for name, value in profile:
        if isinstance(value, float) and not math.isfinite(value):
            return name
    return None


class Scenario(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0  # numpy's generators take no other
    output: Path = Path("results")
    models: ModelsSection
    servers: list[ServerSection] = Field(min_length=1)
    workload: Workload
    links: list[Annotated[str | LinkProfile, AfterValidator(_known_link)]] = Field(
        default_factory=lambda: ["direct"], min_length=1
    )
    slo: Slo | None = None
    cost: CostSection | None = None
    cold_start: ColdStartSection = Field(default_factory=ColdStartSection)
    tune: TuneSection | None = None
    limits: Limits = Field(default_factory=Limits)

    # Profile files read by `link_profile`, by (reference, folder).
    _link_files: dict[tuple[str, Path], LinkProfile] = PrivateAttr(default_factory=dict)
    _input_files: dict[Path, InputData] = PrivateAttr(default_factory=dict)
    # Model files read by `imported_model`, by (path, name, shapes).
    _model_files: dict[str, ImportedModel] = PrivateAttr(default_factory=dict)
    # What its file should change though it validated (a field's old name), one line each.
    _notes: list[str] = PrivateAttr(default_factory=list)

    @field_validator("links")
    @classmethod
    def _distinct_links(cls, links: list[str | LinkProfile]) -> list[str | LinkProfile]:
        names = [link if isinstance(link, str) else link.name for link in links]
        if len(set(names)) != len(names):
            raise ValueError(f"link names must be distinct, got {names}")
        return links

    def link_profile(self, link: str | LinkProfile, base_dir: Path) -> LinkProfile:
        """One of `links` as its profile (`netem.resolve_link`, files from `base_dir`, the
        scenario's folder).

        A profile file is read once per scenario and kept: validation reads it to report
        its errors at the scenario's line, and the plan's expansion takes that profile
        instead of reading the file again (so a run reads each file once).
        """
        if isinstance(link, LinkProfile):
            return link
        key = (link, Path(base_dir).resolve())
        if key not in self._link_files:
            self._link_files[key] = resolve_link(link, base_dir)
        return self._link_files[key]

    def input_data(self, base_dir: Path) -> InputData | None:
        """`workload.inputs` read (relative to `base_dir`, the scenario's folder), or None.

        Read once per scenario and kept, as link profile files are: validation reads it to
        report its errors at the scenario's line, and every trial takes the same samples.
        """
        inputs = self.workload.inputs
        if inputs is None:
            return None
        path = inputs if inputs.is_absolute() else Path(base_dir) / inputs
        key = path.resolve()
        if key not in self._input_files:
            self._input_files[key] = read_input_data(path, self._file_limits.max_request_mb)
        return self._input_files[key]

    def imported_model(self, entry: ModelFile, base_dir: Path) -> ImportedModel:
        """One of `models.files` read (`model_zoo.imports.read_model`, the path relative to
        `base_dir`, the scenario's folder).

        Read once per scenario and kept, as link profiles and input data are: validation
        reads it to report its errors at the scenario's line, and the plan takes the same
        model (signature, shapes, counts) instead of reading the file again.
        """
        path = entry.path if entry.path.is_absolute() else Path(base_dir) / entry.path
        shapes = {name: tuple(dims) for name, dims in entry.input_shapes.items()}
        key = repr((str(path.resolve()), entry.name, sorted(shapes.items())))
        if key not in self._model_files:
            self._model_files[key] = read_model(
                path, name=entry.name, input_shapes=shapes, option="input_shapes",
                limit=model_limit(self._file_limits.max_model_mb),
            )  # fmt: skip
        return self._model_files[key]

    @property
    def notes(self) -> list[str]:
        """What the file it was read from should change though it is valid (an old field
        name, read as the new one): `validate_source` writes them, the CLI shows them as
        warnings."""
        return list(self._notes)

    @property
    def _file_limits(self) -> Limits:
        """The limits its files are read within: its own, or the defaults where they did not
        validate (a partial scenario's; the schema reports their errors)."""
        limits = self.__dict__.get("limits")
        return limits if isinstance(limits, Limits) else Limits()

    def imported_models(self, base_dir: Path) -> list[ImportedModel]:
        """Every model of `models.files`, read (see `imported_model`)."""
        return [self.imported_model(entry, base_dir) for entry in self.models.files]

    @rule("servers")
    def _distinct_servers(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            yield ("servers",), f"names must be distinct, got {names}"

    @rule("workload.search", "slo")
    def _search_needs_slo(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.workload.search and self.slo is None:
            yield ("slo",), "search: max_rate needs an slo (percentile and latency_ms)"

    @rule("workload.stop", "slo")
    def _stop_needs_slo(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        if self.workload.stop and self.slo is None:
            yield ("slo",), "workload.stop ends a trial once its slo is decided: give an slo"
        if self.workload.stop and self.slo is not None and self.slo.percentile >= 100:
            yield ("slo", "percentile"), "early stop needs a percentile under 100"

    @rule(
        "tune", "workload.search", "workload.rates", "workload.batch_sizes", "workload.repeats",
        "slo", "cost", "links", "servers",
    )  # fmt: skip
    def _tune_measurable(self, context: Mapping[str, Any]) -> Iterator[Problem]:
        """What a tuned setting is measured with: one trial per setting (one batch size,
        link and model), by the SLO search or at `qps`, against an SLO, priced; a race's
        rounds."""
        tune, w = self.tune, self.workload
        if tune is None:
            return
        if tune.method == "race" and w.repeats < tune.first_rounds:
            yield (
                ("workload", "repeats"),
                f"tune method race measures every setting in {tune.first_rounds} rounds "
                f"(tune.first_rounds) before its first test, and at most repeats rounds: "
                f"give repeats >= {tune.first_rounds}",
            )
        if self.slo is None:
            yield ("slo",), f"tune objective {tune.objective} is judged against an slo: give one"
        if tune.objective == "p99":
            if w.search or list(w.rates) != [tune.qps]:
                yield (
                    ("workload", "rates"),
                    f"tune objective p99 measures each setting at tune.qps: set rates to "
                    f"[{tune.qps:g}] (and no search)",
                )
        elif not w.search:
            yield (
                ("workload", "search"),
                f"tune objective {tune.objective} takes each setting's max rate: "
                "set search: max_rate",
            )
        if tune.objective == "cost_at_qps" and self.cost is None:
            yield ("cost",), "tune objective cost_at_qps prices replicas: give a cost section"
        if len(w.batch_sizes) > 1:
            yield ("workload", "batch_sizes"), "tune compares one trial per setting: one size"
        if len(self.links) > 1:
            yield ("links",), "tune compares one trial per setting: one link"
        for i, server in enumerate(self.servers):
            if server.__dict__.get("launch") == "remote":
                yield ("servers", i, "launch"), "a remote server has no settings to tune"
