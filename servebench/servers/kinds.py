"""Every kind of server servebench runs or attaches to, defined once.

A kind is one `ServerKind` entry in `KINDS`: the API it serves (`common.serving_apis`:
Triton's or TF Serving's, what a scenario's server `api` says), how it is launched
(`LAUNCHES`: started here, in a container, or attached to at a URL — a scenario's
`launch`), the `Server` class that starts, stops and loads models, the settings a scenario
may vary (`servers.settings`), the `model_zoo` export format it serves, and how one is
built from a scenario's server section and an export folder (`ServerKind.build`).

Everything that starts a server goes through this table: the scenario runner
(`scenario.deploy`, which `servebench scenario run`, cluster jobs and the overhead serving
probe all run), `servebench ui` and `servebench models serve`. The scenario schema maps
its `api` and `launch` to an entry with `scenario_kind`, the one place that pairing is
decided, and reads its rules (which settings, which fields, which model-control modes) off
the entry. `tests/test_server_kinds.py` keeps every other module from testing API names.

The protocols a kind speaks are the clients registry's with `ProtocolSpec.server ==
kind.api.name`: servers sit below clients and do not import them, so the scenario layer
joins the two (`ServerSection.client_protocol`).

Classes are named as "module:Class" and imported on use: the container kinds pull in the
Docker SDK, and validating a scenario must not pay for that.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from servebench.common.serving_apis import TFS, TRITON, ServingApi
from servebench.servers.base import Server
from servebench.servers.errors import ServerKindError
from servebench.servers.settings import SettingsMatrix, TfsSettingsMatrix, TritonSettingsMatrix

if TYPE_CHECKING:
    from model_zoo.imports import ServedModel

# The folder under a server's work folder that holds the repository servebench writes.
REPOSITORY_DIR = "models"


@dataclass(frozen=True)
class Launch:
    """One way a server comes to exist, as a scenario's `launch` names it.

    `starts`: servebench starts and stops the server (and may time its cold start and set
    its settings); False: it attaches to a server someone else runs. `takes`: the server
    section's fields only this launch uses. `start_s`: a start's rough cost, for the
    plan's wall-time estimate (`scenario.plan`; measured on the 2-core development
    machines, see docs/benchmarks.md).
    """

    name: str
    means: str
    starts: bool
    takes: frozenset[str] = frozenset()
    start_s: float = 0.0


LAUNCHES: dict[str, Launch] = {
    launch.name: launch
    for launch in (
        Launch("local", "the tritonserver of the nvidia-pytriton wheel", starts=True,
               start_s=1.0),
        Launch("docker", "a Docker engine", starts=True, takes=frozenset({"image"}),
               start_s=15.0),
        Launch("remote", "url of a running server", starts=False,
               takes=frozenset({"url", "grpc_url"}), start_s=0.5),
    )
}  # fmt: skip


class ServerOptions(Protocol):
    """What a kind builds from in a scenario's server section (`ServerSection` has these),
    named here so that servers need not import the scenario layer."""

    @property
    def image(self) -> str | None: ...
    @property
    def gpus(self) -> int: ...
    @property
    def url(self) -> str | None: ...
    @property
    def grpc_url(self) -> str | None: ...
    @property
    def model_control(self) -> str: ...
    @property
    def ready_timeout_s(self) -> float: ...


@dataclass(frozen=True)
class Deployment:
    """Everything building one server needs, whoever asks for it.

    `values` is one combination of the kind's settings (`{}` for a kind without any);
    `export_dir` the `model_zoo.export.family` folder holding `models` in the kind's
    export format; `workdir` the server's own folder (its repository copy, its log).
    `side_by_side`, for a kind that `shares_server`: several combinations served at once
    by one server, each as (values, suffix): every model under `<model id><suffix>`
    with that combination's settings (empty: `values` alone, under the models' ids).
    """

    options: ServerOptions
    values: Mapping[str, Any]
    models: Sequence[ServedModel]
    export_dir: Path
    workdir: Path
    side_by_side: Sequence[tuple[Mapping[str, Any], str]] = ()

    @property
    def names(self) -> list[str]:
        return [spec.id + suffix for _, suffix in self.variants() for spec in self.models]

    def variants(self) -> list[tuple[Mapping[str, Any], str]]:
        """Each combination the server serves, with the suffix of its models' names."""
        return list(self.side_by_side) or [(self.values, "")]


@dataclass(frozen=True)
class ServerKind:
    """One kind of server.

    `server` is the `Server` class ("module:Class"): how it starts, stops, waits for
    ready, loads and unloads models (its `owns_process` and `manages_models` say what
    servebench may do to it). `settings` is the matrix a scenario's `settings:` is
    validated with (None: servebench cannot change the server's settings);
    `export_format` the `model_zoo` export format it serves (None: it serves its own
    models); `shares_server`: every setting it varies is a model's own (Triton's model
    config), so one server can serve several settings side by side under distinct model
    names (`Deployment.side_by_side`) and a replicated run switches between them without a
    restart; `export_s_per_model` that export's rough cost per model, for the plan's
    wall-time estimate; `model_control` the scenario `model_control` values it accepts;
    `preset` the constructor arguments the kind itself fixes; `builder` makes the server
    for a `Deployment`.
    """

    name: str
    api: ServingApi
    launch: Launch
    server: str
    builder: Callable[[ServerKind, Deployment], Server]
    settings: type[SettingsMatrix] | None = None
    export_format: str | None = None
    shares_server: bool = False
    export_s_per_model: float = 0.0
    model_control: tuple[str, ...] = ("none",)
    preset: Mapping[str, Any] = field(default_factory=dict)

    def server_class(self) -> type[Server]:
        module, _, attribute = self.server.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def accepted_settings(self) -> list[str]:
        """The constructor arguments `create` takes (the class's, less the preset)."""
        return [name for name in _parameters(self.server_class()) if name not in self.preset]

    def create(self, **settings: Any) -> Server:
        """A server of this kind from constructor arguments; unknown or missing ones are
        named (a `ServerKindError`)."""
        accepted = self.accepted_settings()
        unknown = sorted(set(settings) - set(accepted))
        if unknown:
            raise ServerKindError(
                f"server kind {self.name!r}: unknown setting(s) {', '.join(unknown)}; "
                f"accepted: {', '.join(accepted)}"
            )
        params = _parameters(self.server_class())
        missing = [
            name
            for name in accepted
            if params[name].default is inspect.Parameter.empty and name not in settings
        ]
        if missing:
            raise ServerKindError(
                f"server kind {self.name!r}: missing setting(s) {', '.join(missing)}"
            )
        return self.server_class()(**self.preset, **settings)

    def scenario_fields(self) -> dict[str, str]:
        """The `api` and `launch` of a scenario's server section that mean this kind (what
        `scenario_kind` maps back to it)."""
        return {"api": self.api.name, "launch": self.launch.name}

    def build(self, deployment: Deployment) -> Server:
        """The server for one scenario setting (not started): its repository written
        under `deployment.workdir` where the kind serves files servebench lays out."""
        return self.builder(self, deployment)


def _parameters(cls: type[Server]) -> dict[str, inspect.Parameter]:
    """The named arguments of `cls(...)`: its constructor's and, where that passes
    `**settings` on, its base class's (a container kind's own, then `DockerServer`'s)."""
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        own = inspect.signature(klass.__init__).parameters.values()
        for param in own:
            if param.name != "self" and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                params.setdefault(param.name, param)
        if all(param.kind is not param.VAR_KEYWORD for param in own):
            return params
    return params


# -- builders ------------------------------------------------------------------------------


def _triton_repository(deployment: Deployment, form: str) -> Path:
    """`<workdir>/models`: each model with this setting's model config, in the repository
    form the server runs (`model_zoo.export.triton`'s forms).

    A generated model gets the config servebench writes for it next to its exported ONNX
    file; an imported one (its folder in the export, the user's own config or the one its
    import wrote from its signature) is copied with only the swept fields rewritten.
    """
    from model_zoo.export.triton import (
        FORM_REPOSITORY,
        ONNX_FILENAME,
        STANDARD_REPOSITORY,
        write_settings_copy,
        write_triton_model,
    )
    from model_zoo.spec import ModelSpec

    repository = deployment.workdir / REPOSITORY_DIR
    for values, suffix in deployment.variants():
        settings = TritonSettingsMatrix.model_config_of(values)
        for model in deployment.models:
            name = model.id + suffix
            if isinstance(model, ModelSpec):
                exported = deployment.export_dir / STANDARD_REPOSITORY / model.id
                onnx = sorted(exported.glob(f"*/{ONNX_FILENAME}"))[-1]
                write_triton_model(
                    onnx, model, repository, settings, name=name, form=form, force=True
                )
                continue
            exported = deployment.export_dir / FORM_REPOSITORY[form] / model.id
            if not exported.is_dir():
                raise ServerKindError(
                    f"model {model.id!r} ({model.source_format}) has no {form} form for this "
                    f"Triton (its platform runs only where its backend is: the official image)"
                )
            write_settings_copy(exported, repository, settings, name=name if suffix else None)
    return repository


def _build_triton_local(kind: ServerKind, deployment: Deployment) -> Server:
    # The bundled tritonserver has only the python backend: it serves that form.
    repository = _triton_repository(deployment, "python")
    return kind.create(model_repository=repository, run_dir=deployment.workdir)


def _build_triton_docker(kind: ServerKind, deployment: Deployment) -> Server:
    from servebench.servers.docker_triton import official_image, repository_form

    options = deployment.options
    # The image says which form it serves; asking the engine now makes a missing image
    # fail here, before any file is written.
    form = repository_form(options.image or official_image())
    return kind.create(
        model_repository=_triton_repository(deployment, form),
        run_dir=deployment.workdir,
        gpus=options.gpus or None,
        **_image(options.image),
    )


def _build_tfs_docker(kind: ServerKind, deployment: Deployment) -> Server:
    from model_zoo.export.family import TFS_DIR

    values, options = deployment.values, deployment.options
    return kind.create(
        base_path=deployment.export_dir / TFS_DIR,
        models=deployment.names,
        run_dir=deployment.workdir,
        gpus=options.gpus or None,
        enable_batching=values["enable_batching"],
        batching=TfsSettingsMatrix.batching_of(values),
        rest_api_num_threads=values["rest_api_num_threads"],
        tensorflow_intra_op_parallelism=values["intra_op_threads"] or None,
        tensorflow_inter_op_parallelism=values["inter_op_threads"] or None,
        **_image(options.image),
    )


def _build_remote(kind: ServerKind, deployment: Deployment) -> Server:
    options = deployment.options
    return kind.create(
        http_url=options.url,
        grpc_address=options.grpc_url,
        models=deployment.names,
        model_control=options.model_control,
        ready_timeout_s=options.ready_timeout_s,
    )


def _image(image: str | None) -> dict[str, str]:
    return {"image": image} if image else {}


# -- the table -----------------------------------------------------------------------------

# What every Triton that servebench starts takes, wherever it runs: the Triton settings
# matrix and the Triton export.
_STARTED_TRITON: dict[str, Any] = {
    "settings": TritonSettingsMatrix,
    "export_format": "triton",
    "shares_server": True,
    "export_s_per_model": 5.0,
}

# Order matters where kinds are listed: a scenario's `api` values and an API's launches
# are shown in this order.
KINDS: dict[str, ServerKind] = {
    kind.name: kind
    for kind in (
        ServerKind(
            "triton-local", TRITON, LAUNCHES["local"],
            server="servebench.servers.local:LocalTritonServer", builder=_build_triton_local,
            **_STARTED_TRITON,
        ),
        ServerKind(
            "triton-docker", TRITON, LAUNCHES["docker"],
            server="servebench.servers.docker_triton:TritonDocker", builder=_build_triton_docker,
            **_STARTED_TRITON,
        ),
        ServerKind(
            "tfs-docker", TFS, LAUNCHES["docker"],
            server="servebench.servers.docker_tfs:TfsDocker",
            builder=_build_tfs_docker, settings=TfsSettingsMatrix, export_format="tfs",
            export_s_per_model=1.5,
        ),
        ServerKind(
            "triton-remote", TRITON, LAUNCHES["remote"],
            server="servebench.servers.remote:RemoteServer", builder=_build_remote,
            model_control=("none", "explicit"), preset={"api": TRITON.name},
        ),
        ServerKind(
            "tfs-remote", TFS, LAUNCHES["remote"],
            server="servebench.servers.remote:RemoteServer", builder=_build_remote,
            preset={"api": TFS.name},
        ),
    )
}  # fmt: skip


def api_names() -> tuple[str, ...]:
    """The APIs some kind serves, in table order: a scenario's `api` values."""
    return tuple(dict.fromkeys(kind.api.name for kind in KINDS.values()))


def server_kind(name: str) -> ServerKind:
    """The kind called `name`; a `ServerKindError` naming the choices otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        raise ServerKindError(
            f"server kind: unknown {name!r}; expected one of {', '.join(KINDS)}"
        ) from None


def scenario_kind(api: str, launch: str) -> ServerKind:
    """The kind a scenario's server section means by its `api` and `launch`;
    a `ServerKindError` saying which launches that API has otherwise."""
    for kind in KINDS.values():
        if kind.api.name == api and kind.launch.name == launch:
            return kind
    offered = [k for k in KINDS.values() if k.api.name == api]
    if not offered:
        raise ServerKindError(f"api: {api!r} is not one of {', '.join(api_names())}")
    alternatives = " or ".join(f"{k.launch.name} ({k.launch.means})" for k in offered)
    raise ServerKindError(
        f"{offered[0].api.title} has no {launch} launcher here; use {alternatives}"
    )


def create_server(name: str, **settings: Any) -> Server:
    """A `Server` of the kind called `name`, from its constructor arguments."""
    return server_kind(name).create(**settings)
