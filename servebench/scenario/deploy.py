"""From a plan to running servers: export the models once, give each server setting its
folder, and have the setting's server kind (`servers.kinds`) build its `Server`.

ONNX export is the slow step (seconds per model), so every model is exported (a user's
file imported) once per run into `<run>/export/`, in each export format the run's kinds
serve; a server setting only
writes its own config next to a copy of the ONNX file (`<run>/repos/<n>/`), which takes
milliseconds. A fresh run copies its export from `scenario.export_cache` when one is set
(the test suite's seam).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_zoo.export.family import FORMATS, TFS_DIR, ExportedModel, export_family, is_exported
from model_zoo.export.onnx import ExportExistsError
from model_zoo.export.triton import PYTHON_REPOSITORY, STANDARD_REPOSITORY
from model_zoo.imports import IMPORT_FILE, ImportedModel, ServedModel, import_model
from model_zoo.spec import ModelSpec
from servebench.scenario.export_cache import cache_entry, keep
from servebench.scenario.plan import Plan, ServerSetting, Trial
from servebench.servers.base import Server
from servebench.servers.kinds import Deployment, ServerKind

EXPORT_DIR = "export"
REPOS_DIR = "repos"


def needed_formats(kinds: Iterable[ServerKind]) -> tuple[str, ...]:
    """The export formats `kinds` serve, in `model_zoo`'s order."""
    wanted = {kind.export_format for kind in kinds}
    return tuple(f for f in FORMATS if f in wanted)


def export_models(plan: Plan, run_dir: Path, on_model=None) -> Path:
    """Export every model the run serves (skipping those a resumed run already has)."""
    kinds = [s.server.server_kind for s in plan.settings]
    return export_for(kinds, plan.models, run_dir, seed=plan.scenario.seed, on_model=on_model)


def export_for(
    kinds: Iterable[ServerKind],
    models: Sequence[ServedModel],
    run_dir: Path,
    *,
    seed: int,
    on_model=None,
) -> Path:
    """`<run_dir>/export`, holding `models` in every format `kinds` serve: generated
    models exported (`export_family`), a user's files imported (`import_model`)."""
    out = run_dir / EXPORT_DIR
    formats = needed_formats(kinds)
    if not formats:
        return out
    specs = [model for model in models if isinstance(model, ModelSpec)]
    if specs:
        _export_generated(specs, formats, out, seed=seed, on_model=on_model)
    for model in models:
        if isinstance(model, ImportedModel):
            _import_file(model, formats, out, on_model=on_model)
    return out


def _export_generated(
    specs: list[ModelSpec], formats: tuple[str, ...], out: Path, *, seed: int, on_model=None
) -> None:
    cached = None if out.exists() else cache_entry(specs, formats, seed)
    if cached is not None and cached.is_dir():
        shutil.copytree(cached, out)  # a fresh run, and the cache holds this very export
        return
    missing = [spec for spec in specs if not all(is_exported(out, spec, f) for f in formats)]
    if missing:
        try:
            export_family(missing, out, formats=formats, seed=seed, on_model=on_model)
        except ExportExistsError:
            # A resumed run that died mid-export: replace the half-written models.
            export_family(missing, out, formats=formats, seed=seed, force=True, on_model=on_model)
    if cached is not None:
        keep(out, cached)


def _import_file(model: ImportedModel, formats: tuple[str, ...], out: Path, on_model=None) -> None:
    """Import one of the user's files into the run's export, once: a resumed run finds it
    in `import.json` (written last) and skips it; what a killed import left is replaced.

    Imports are not kept in the export cache: its entries are keyed by generated specs,
    and a user's file is one import per run.
    """
    record = out / IMPORT_FILE
    if record.is_file() and model.id in json.loads(record.read_text()):
        return
    for folder in (STANDARD_REPOSITORY, PYTHON_REPOSITORY, TFS_DIR):
        shutil.rmtree(out / folder / model.id, ignore_errors=True)
    result = import_model(
        model.path,
        out,
        formats=formats,
        name=model.id,
        input_shapes=model.input_shapes,
        signature=model.signature,
        limit=model.limit,
    )
    if on_model is not None:
        on_model(ExportedModel(model.id, seconds=result.seconds, parity=result.parity))


def build_server(
    setting: ServerSetting, index: int, models: Sequence[ServedModel], run_dir: Path
) -> Server:
    """The `Server` for one setting (not started), its files under `<run>/repos/<index>`."""
    return _build(setting, (), models, run_dir / REPOS_DIR / f"{index:02d}", run_dir)


@dataclass(frozen=True)
class ServerGroup:
    """Server settings one server serves at once, and the models it serves them with.

    A replicated run switches settings every trial; where a kind's settings are all a
    model's own (`ServerKind.shares_server`: Triton's model config), the settings of one
    server section are loaded side by side under distinct model names
    (`<model id>.s<k>`), so a round moves between them without a restart. Anything else
    (TF Serving's batching is a server flag; a run of one round) is a group of one setting,
    its models under their own names, as runs always were.
    """

    folder: str  # under `<run>/repos/`
    settings: tuple[ServerSetting, ...]
    models: tuple[ServedModel, ...]

    def suffix(self, setting: ServerSetting) -> str:
        return "" if len(self.settings) == 1 else f".s{self.settings.index(setting)}"

    def names(self, setting: ServerSetting) -> dict[str, str]:
        """Model id -> the name the server serves it under for `setting`."""
        suffix = self.suffix(setting)
        return {model.id: model.id + suffix for model in self.models}


def server_groups(plan: Plan, trials: Sequence[Trial], *, side_by_side: bool) -> list[ServerGroup]:
    """The settings of `trials` as server groups (`side_by_side`: share servers where the
    kind allows), in the plan's order; each with every model its settings' trials send to.
    (A configuration search measures a batch at a time: only the batch's settings are
    loaded and have their cold start timed, not the whole matrix.)"""
    wanted = {id(t.setting) for t in trials}
    members: dict[tuple[str, int], list[int]] = {}
    for index, setting in enumerate(plan.settings):
        if id(setting) not in wanted:
            continue
        shared = side_by_side and setting.server.server_kind.shares_server
        key = (setting.server.name, -1) if shared else ("", index)
        members.setdefault(key, []).append(index)
    groups = []
    for key, indices in members.items():
        settings = tuple(plan.settings[i] for i in indices)
        models = {m.id: m for t in trials if t.setting in settings for m in t.models}
        folder = f"{indices[0]:02d}" if len(indices) == 1 else f"shared-{key[0]}"
        groups.append(ServerGroup(folder, settings, tuple(models.values())))
    return groups


def build_group_server(group: ServerGroup, run_dir: Path) -> Server:
    """The one `Server` (not started) for a group, its files under `<run>/repos/<folder>`."""
    side = [(s.values, group.suffix(s)) for s in group.settings] if len(group.settings) > 1 else []
    return _build(
        group.settings[0], side, group.models, run_dir / REPOS_DIR / group.folder, run_dir
    )


def _build(
    setting: ServerSetting,
    side_by_side: Sequence[tuple[Mapping[str, Any], str]],
    models: Sequence[ServedModel],
    workdir: Path,
    run_dir: Path,
) -> Server:
    kind = setting.server.server_kind
    if kind.launch.starts:
        workdir.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(
        setting.server, setting.values, models, run_dir / EXPORT_DIR, workdir, side_by_side
    )
    return kind.build(deployment)


def start_serving(server: Server, models: Iterable[str]) -> None:
    """Start `server` and load `models` where servebench loads them (`manages_models`; a
    server that serves its own configuration waited for them in its start)."""
    server.start()
    if server.manages_models:
        for model in models:
            server.load_model(model)


@contextlib.contextmanager
def serving(
    setting: ServerSetting,
    specs: Sequence[ServedModel],
    workdir: Path,
    seed: int,
    say: Callable[[str], None],
) -> Iterator[tuple[str, str]]:
    """One setting's server outside a run (`servebench ui`): export the models, have the
    setting's server kind build the server as a scenario run does, start it with them
    loaded; yields (http url, grpc address) and stops it after."""
    kind = setting.server.server_kind
    label = f"{kind.launch.name} {kind.api.title}"
    ids = [spec.id for spec in specs]
    say(f"exporting {', '.join(ids)} for the {label} ...")
    export_for([kind], specs, workdir, seed=seed)
    server = build_server(setting, 0, specs, workdir)
    say(f"starting the {label} ...")
    try:
        start_serving(server, ids)
        ep = server.endpoints
        say(f"{label} ready: {ep.http_url} (gRPC {ep.grpc_address})")
        yield ep.http_url, ep.grpc_address or ""
    finally:
        server.stop()
        say(f"{label} stopped")


def client_target(server: Server, protocol: str) -> tuple[str, str]:
    """(scheme-less host:port the link proxies to, URL form the client wants)."""
    endpoints = server.endpoints
    if protocol == "grpc":
        if not endpoints.grpc_address:
            raise ValueError(f"{server.describe()}: no gRPC address")
        return endpoints.grpc_address, endpoints.grpc_address
    address = endpoints.http_url.split("://", 1)[-1].rstrip("/")
    return address, endpoints.http_url
