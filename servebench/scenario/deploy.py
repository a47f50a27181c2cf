"""From a plan to running servers: export the models once, lay out one repository per
server setting, and build the `Server` each setting needs.

ONNX export is the slow step (seconds per model), so every model is exported once per run
into `<run>/export/`; a server setting only writes its own config next to a copy of the
ONNX file (`<run>/repos/<n>/`), which takes milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from model_zoo.export.family import TFS_DIR, export_family
from model_zoo.export.onnx import ExportExistsError
from model_zoo.export.tfs_batching import TfsBatching
from model_zoo.export.triton import (
    ONNX_FILENAME,
    STANDARD_REPOSITORY,
    TritonSettings,
    write_triton_model,
)
from model_zoo.spec import ModelSpec
from servebench.scenario.plan import Plan, ServerSetting
from servebench.scenario.schema import ServerSection
from servebench.servers.base import Server
from servebench.servers.docker_triton import official_image, repository_form
from servebench.servers.registry import create_server

EXPORT_DIR = "export"
REPOS_DIR = "repos"


def needed_formats(plan: Plan) -> tuple[str, ...]:
    kinds = {s.server.kind for s in plan.settings if s.server.launch != "remote"}
    return tuple(f for f in ("triton", "tfs") if f in kinds)


def export_models(plan: Plan, run_dir: Path, on_model=None) -> Path:
    """Export every model the run serves (skipping those a resumed run already has)."""
    out = run_dir / EXPORT_DIR
    formats = needed_formats(plan)
    if not formats:
        return out
    missing = [spec for spec in plan.models if not _exported(out, spec, formats)]
    if missing:
        try:
            export_family(missing, out, formats=formats, seed=plan.scenario.seed, on_model=on_model)
        except ExportExistsError:
            # A resumed run that died mid-export: replace the half-written models.
            export_family(
                missing,
                out,
                formats=formats,
                seed=plan.scenario.seed,
                force=True,
                on_model=on_model,
            )
    return out


def _exported(out: Path, spec: ModelSpec, formats: tuple[str, ...]) -> bool:
    onnx = any((out / STANDARD_REPOSITORY / spec.id).glob(f"*/{ONNX_FILENAME}"))
    saved = any((out / TFS_DIR / spec.id).glob("*/saved_model.pb"))
    return ("triton" not in formats or onnx) and ("tfs" not in formats or saved)


def triton_settings(values: dict) -> TritonSettings:
    return TritonSettings(
        max_batch_size=values["max_batch_size"],
        dynamic_batching=values["dynamic_batching"],
        preferred_batch_sizes=tuple(values["preferred_batch_sizes"]),
        max_queue_delay_microseconds=values["max_queue_delay_us"],
        instance_count=values["instance_count"],
        instance_kind=values["instance_kind"],
    )


def tfs_batching(values: dict) -> TfsBatching | None:
    if not values["enable_batching"]:
        return None
    return TfsBatching(
        max_batch_size=values["max_batch_size"],
        batch_timeout_micros=values["batch_timeout_us"],
        num_batch_threads=values["num_batch_threads"],
        max_enqueued_batches=values["max_enqueued_batches"],
    )


def build_server(
    setting: ServerSetting, index: int, models: list[ModelSpec], run_dir: Path
) -> Server:
    """The `Server` for one setting, with its repository written under `<run>/repos/<index>`."""
    server = setting.server
    names = [spec.id for spec in models]
    if server.launch == "remote":
        return create_server(
            "remote",
            api=server.kind,
            http_url=server.url,
            grpc_address=server.grpc_url,
            models=names,
            model_control=server.model_control,
            ready_timeout_s=server.ready_timeout_s,
        )
    export = run_dir / EXPORT_DIR
    workdir = run_dir / REPOS_DIR / f"{index:02d}"
    workdir.mkdir(parents=True, exist_ok=True)
    if server.kind == "triton":
        settings = triton_settings(setting.values)
        # The local binary serves the python-backend form; an image says which it serves
        # (asking the engine, so a missing image fails here, before any file is written).
        form = "python" if server.launch == "local" else repository_form(_triton_image(server))
        repository = workdir / "models"
        for spec in models:
            onnx = sorted((export / STANDARD_REPOSITORY / spec.id).glob(f"*/{ONNX_FILENAME}"))[-1]
            write_triton_model(onnx, spec, repository, settings, form=form, force=True)
        if server.launch == "local":
            return create_server("triton-local", model_repository=repository, run_dir=workdir)
        return create_server(
            "triton-docker", model_repository=repository, run_dir=workdir,
            gpus=server.gpus or None, **_image(server.image),
        )  # fmt: skip
    values = setting.values
    return create_server(
        "tfs-docker",
        base_path=export / TFS_DIR,
        models=names,
        run_dir=workdir,
        gpus=server.gpus or None,
        enable_batching=values["enable_batching"],
        batching=tfs_batching(values),
        rest_api_num_threads=values["rest_api_num_threads"],
        tensorflow_intra_op_parallelism=values["intra_op_threads"] or None,
        tensorflow_inter_op_parallelism=values["inter_op_threads"] or None,
        **_image(server.image),
    )


def _image(image: str | None) -> dict[str, str]:
    return {"image": image} if image else {}


def _triton_image(server: ServerSection) -> str:
    return server.image or official_image()


def client_target(server: Server, protocol: str) -> tuple[str, str]:
    """(scheme-less host:port the link proxies to, URL form the client wants)."""
    endpoints = server.endpoints
    if protocol == "grpc":
        if not endpoints.grpc_address:
            raise ValueError(f"{server.describe()}: no gRPC address")
        return endpoints.grpc_address, endpoints.grpc_address
    address = endpoints.http_url.split("://", 1)[-1].rstrip("/")
    return address, endpoints.http_url
