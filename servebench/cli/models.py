"""`servebench models`: generate, list, export, check and serve model families.

Heavy libraries (torch, TensorFlow, tritonclient) are imported inside the commands so that
`--help` and `list` stay fast.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servebench.cli.command import with_options
from servebench.cli.usage import cannot_write, fail
from servebench.cli.values import (
    InputDir,
    InputFile,
    InputPath,
    Number,
    OutputDir,
    OutputFile,
    Port,
)
from servebench.cli.values import seed as seed_type
from servebench.common.limits import (
    MAX_BATCH,
    MAX_DELAY_US,
    MAX_FAMILY_SIZE,
    MAX_HEADS,
    MAX_KERNEL_SIZE,
    MAX_OUTPUTS,
    MAX_SEQ_LEN,
    MAX_THREADS,
)

if TYPE_CHECKING:
    from model_zoo.export import TritonSettings
    from model_zoo.export.family import ExportedModel
    from model_zoo.export.tfs_batching import TfsBatching
    from model_zoo.spec import ModelSpec
    from servebench.servers.base import Endpoints
    from servebench.servers.local import LocalTritonServer

app = typer.Typer(
    help="Generate, list, export, check and serve model families.", no_args_is_help=True
)
# Piped output gets a wide table rather than ids cut at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


def _csv_ints(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise fail(f"{option}: expected comma-separated integers, got {text!r}") from None


def _shape(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.lower().split("x")]
    except ValueError:
        raise fail(f"{option}: expected dims like 32x32x3, got {text!r}") from None


@dataclass(frozen=True)
class GenerateOptions:
    """`servebench models generate`'s options, as parsed (`cli.command`)."""

    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="spec list to write (.yaml or .json)",
            parser=OutputFile(make_parents=True),
        ),
    ]
    types: Annotated[str, typer.Option(help="grid: layer types, comma-separated")] = "dense"
    depths: Annotated[str, typer.Option(help="grid: depths, comma-separated")] = "2"
    widths: Annotated[str, typer.Option(help="grid: widths, comma-separated")] = "64"
    input_shape: Annotated[
        list[str] | None,
        typer.Option(help="per-type served input, e.g. conv=32x32x3 or dense=128 (repeatable)"),
    ] = None
    num_outputs: Annotated[
        int, typer.Option(help="classifier outputs", parser=Number(int, ge=1, le=MAX_OUTPUTS))
    ] = 10
    heads: Annotated[
        int | None, typer.Option(help="attention heads", parser=Number(int, ge=1, le=MAX_HEADS))
    ] = None
    seq_len: Annotated[
        int | None,
        typer.Option(
            help="sequence length (lstm/gru/attention)", parser=Number(int, ge=1, le=MAX_SEQ_LEN)
        ),
    ] = None
    kernel_size: Annotated[
        int | None,
        typer.Option(help="conv kernel size", parser=Number(int, ge=1, le=MAX_KERNEL_SIZE)),
    ] = None
    residual: Annotated[bool | None, typer.Option(help="conv residual blocks")] = None
    spec: Annotated[
        Path | None,
        typer.Option(
            help="spec file: used as the family itself, or as the base with --mutate",
            parser=InputFile(),
        ),
    ] = None
    mutate: Annotated[
        int,
        typer.Option(
            help="seeded random mutants of the base spec",
            parser=Number(
                int, ge=0, le=MAX_FAMILY_SIZE - 1, why="a family holds the base and its mutants"
            ),
        ),
    ] = 0
    seed: Annotated[int, typer.Option(help="mutation seed", parser=seed_type())] = 0
    resnet50: Annotated[bool, typer.Option(help="add the ResNet-50 reference (224x224x3)")] = False
    force: Annotated[bool, typer.Option(help="overwrite an existing output file")] = False

    def family(self) -> list[ModelSpec]:
        """The specs the options give: a spec file's, or a grid's, then mutants of the
        first and the ResNet-50 reference where asked."""
        from model_zoo.mutate import random_mutations
        from model_zoo.spec import load_specs, resnet50_spec

        if self.spec is not None:
            family = load_specs(self.spec)
            if self.mutate:
                family = [family[0], *random_mutations(family[0], self.mutate, self.seed)]
        else:
            family = self._grid()
            if self.mutate:
                family = [*family, *random_mutations(family[0], self.mutate, self.seed)]
        if self.resnet50:
            family.append(resnet50_spec())
        return family

    def _grid(self) -> list[ModelSpec]:
        from model_zoo.mutate import grid

        shapes = {}
        for item in self.input_shape or []:
            layer_type, _, dims = item.partition("=")
            shapes[layer_type.strip()] = _shape(dims, "--input-shape")
        knobs = {
            "heads": self.heads,
            "seq_len": self.seq_len,
            "kernel_size": self.kernel_size,
            "residual": self.residual,
        }
        return grid(
            [t.strip() for t in self.types.split(",") if t.strip()],
            _csv_ints(self.depths, "--depths"),
            _csv_ints(self.widths, "--widths"),
            input_shapes=shapes,
            num_outputs=self.num_outputs,
            **{k: v for k, v in knobs.items() if v is not None},
        )


@app.command()
@with_options(GenerateOptions)
def generate(options: GenerateOptions) -> None:
    """Write a family of model specs: a grid, a spec file, or seeded mutants of a base."""
    from model_zoo.mutate import dedupe
    from model_zoo.spec import SpecError, save_specs

    out = options.out
    if out.exists() and not options.force:
        raise fail(f"{out}: already exists; pass --force to overwrite it")
    try:
        family = dedupe(options.family())
    except (SpecError, OSError) as err:
        raise fail(str(err)) from None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save_specs(family, out)
    except OSError as err:  # the disk filled, or the folder changed since it was checked
        raise fail(f"cannot write {out}: {err.strerror or err}", code=1) from None
    console.print(f"wrote {len(family)} specs to {out}")


def _family_from(path: Path):
    """Specs from a spec file or from an export folder's family.yaml."""
    from model_zoo.export.family import FAMILY_FILE
    from model_zoo.spec import SpecError, load_specs

    target = path / FAMILY_FILE if path.is_dir() else path
    if not target.is_file():
        raise fail(f"{target}: no such spec file")
    try:
        return load_specs(target)
    except SpecError as err:
        raise fail(str(err)) from None


@app.command("list")
def list_models(
    source: Annotated[Path, typer.Argument(help="spec file or export folder", parser=InputPath())],
) -> None:
    """Table of the family: id, type, depth, width, parameters, GFLOPs per sample."""
    from model_zoo.counting import count

    table = Table("id", "type", "depth", "width", "input", "params", "GFLOPs/sample", "weights MB")
    for spec in _family_from(source):
        cost = count(spec)
        table.add_row(
            spec.id,
            spec.layer_type,
            str(spec.depth),
            str(spec.width),
            "x".join(map(str, spec.served_input_shape)),
            f"{cost.params:,}",
            f"{cost.gflops:.4f}",
            f"{cost.weight_bytes / 1e6:.2f}",
        )
    console.print(table)


@dataclass(frozen=True)
class ExportOptions:
    """`servebench models export`'s argument and options, as parsed (`cli.command`)."""

    source: Annotated[Path, typer.Argument(help="spec file", parser=InputFile())]
    out: Annotated[Path, typer.Option("--out", "-o", help="export folder", parser=OutputDir())]
    to: Annotated[Literal["triton", "tfs", "both"], typer.Option(help="triton, tfs or both")] = (
        "both"
    )
    max_batch_size: Annotated[
        int,
        typer.Option(help="Triton max_batch_size", parser=Number(int, ge=0, le=MAX_BATCH)),
    ] = 32
    dynamic_batching: Annotated[bool, typer.Option(help="Triton dynamic batching")] = True
    preferred_batch_sizes: Annotated[str, typer.Option(help="Triton preferred sizes, e.g. 4,8")] = (
        ""
    )
    max_queue_delay_us: Annotated[
        int,
        typer.Option(help="Triton max queue delay (µs)", parser=Number(int, ge=0, le=MAX_DELAY_US)),
    ] = 0
    instances: Annotated[
        int, typer.Option(help="Triton instance count", parser=Number(int, ge=1, le=MAX_THREADS))
    ] = 1
    instance_kind: Annotated[str, typer.Option(help="KIND_CPU or KIND_GPU")] = "KIND_CPU"
    tfs_batching: Annotated[bool, typer.Option(help="write TF Serving batching_parameters.txt")] = (
        False
    )
    tfs_batch_timeout_us: Annotated[
        int,
        typer.Option(help="TFS batch_timeout_micros", parser=Number(int, ge=0, le=MAX_DELAY_US)),
    ] = 1000
    tfs_batch_threads: Annotated[
        int, typer.Option(help="TFS num_batch_threads", parser=Number(int, ge=1, le=MAX_THREADS))
    ] = 2
    seed: Annotated[int, typer.Option(help="weight seed", parser=seed_type())] = 0
    check: Annotated[bool, typer.Option(help="parity check after export")] = True
    force: Annotated[bool, typer.Option(help="replace models already in the folder")] = False

    def triton_settings(self) -> TritonSettings:
        from model_zoo.export import TritonSettings

        return TritonSettings(
            max_batch_size=self.max_batch_size,
            dynamic_batching=self.dynamic_batching,
            preferred_batch_sizes=tuple(
                _csv_ints(self.preferred_batch_sizes, "--preferred-batch-sizes")
            ),
            max_queue_delay_microseconds=self.max_queue_delay_us,
            instance_count=self.instances,
            instance_kind=self.instance_kind,
        )

    def tfs_batching_settings(self) -> TfsBatching | None:
        from model_zoo.export.tfs_batching import TfsBatching

        if not self.tfs_batching:
            return None
        return TfsBatching(
            max_batch_size=self.max_batch_size,
            batch_timeout_micros=self.tfs_batch_timeout_us,
            num_batch_threads=self.tfs_batch_threads,
        )


@app.command()
@with_options(ExportOptions)
def export(options: ExportOptions) -> None:
    """Export a family to a Triton repository (ONNX + python-backend twin) and/or TF Serving."""
    from model_zoo.export import ExportExistsError, OnnxExportError, TritonSettingsError
    from model_zoo.export.family import FORMATS, export_family
    from model_zoo.parity import ParityError

    o = options
    # `to` is one of the export formats or "both" (the option's type checked it).
    formats = FORMATS if o.to == "both" else (o.to,)
    specs = _family_from(o.source)
    try:
        settings, batching = o.triton_settings(), o.tfs_batching_settings()
    except (TritonSettingsError, ValueError) as err:
        raise fail(str(err)) from None
    try:
        export_family(
            specs, o.out, formats=formats, triton_settings=settings, tfs_batching=batching,
            seed=o.seed, check=o.check, force=o.force, on_model=_exported,
        )  # fmt: skip
    except (ExportExistsError, OnnxExportError, ParityError) as err:
        raise fail(str(err)) from None
    except OSError as err:
        raise cannot_write(err, o.out) from None
    console.print(f"export folder: {o.out}")


def _exported(model: ExportedModel) -> None:
    """One line per model exported: its formats' seconds, and the parity check's figure."""
    seconds = ", ".join(f"{k} {v:.1f}s" for k, v in model.seconds.items())
    parity = f" — parity ok ({max(model.parity.differences.values()):.1e})" if model.parity else ""
    console.print(f"exported {model.spec_id}: {seconds}{parity}", highlight=False)


@app.command("import")
def import_(
    path: Annotated[
        Path,
        typer.Argument(
            help="the model: .onnx, TorchScript .pt, torch.export .pt2, .keras, a SavedModel "
            "or Triton model folder",
            parser=InputPath(),
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="export folder", parser=OutputDir())],
    formats: Annotated[
        str, typer.Option("--to", help="formats to write, comma-separated: triton, tfs")
    ] = "triton,tfs",
    name: Annotated[
        str | None, typer.Option(help="model name (default: the file's or folder's name)")
    ] = None,
    input_shape: Annotated[
        list[str] | None,
        typer.Option(
            help="one sample's shape of an input, NAME=DIMS like input=3x224x224: for dynamic "
            "dims and torch files (repeatable)"
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="replace the model's folders already in the export folder")
    ] = False,
) -> None:
    """Import your own model into a `models export` folder: Triton (ONNX + python twin)
    and/or TF Serving, each conversion checked for parity on random inputs."""
    import signal

    from model_zoo.export.family import FORMATS
    from model_zoo.imports import import_model, parse_input_shapes
    from model_zoo.parity import ParityError

    wanted = [part.strip() for part in formats.split(",") if part.strip()]
    unknown = [part for part in wanted if part not in FORMATS]
    if unknown or not wanted:
        raise fail(f"--to: expected some of {', '.join(FORMATS)}, got {formats!r}")
    try:
        result = import_model(
            path, out, formats=wanted, name=name,
            input_shapes=parse_input_shapes(input_shape or []), force=force,
        )  # fmt: skip
    except (ParityError, ValueError) as err:  # ModelImportError, and a --name Triton refuses
        raise fail(str(err)) from None
    except OSError as err:
        raise cannot_write(err, out) from None
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM (common.staging): staging removed
        name = str(stop) or "SIGINT"
        raise fail(
            f"stopped by {name}; nothing was imported", code=128 + signal.Signals[name]
        ) from None
    shown = ", ".join(f"{n}={'x'.join(map(str, dims))}" for n, dims in result.input_shapes.items())
    console.print(
        f"imported {path} ({result.source_format}) as {result.name!r}: inputs {shown}",
        highlight=False,
    )
    for fmt, folders in result.written.items():
        console.print(f"  {fmt}: {', '.join(folders)}", highlight=False)
    for fmt, how in result.served.items():
        console.print(f"  {fmt} serves: {how}", highlight=False, soft_wrap=True)
    for fmt, why in result.skipped.items():
        console.print(f"  {fmt}: not written: {why}", highlight=False, soft_wrap=True)
    if result.parity is not None:
        console.print(f"  parity ok: {result.parity.describe()}", highlight=False)
    else:
        console.print("  parity: nothing converted (the file is served as it is)")
    seconds = ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds.items())
    console.print(f"  seconds: {seconds}\nexport folder: {out}", highlight=False)


# How `check` marks each model's line.
_CHECK_MARKS = {
    "skip": "[yellow]skip[/yellow]",
    "ok": "[green]ok[/green]  ",
    "fail": "[red]FAIL[/red]",
    "unreadable": "[red]FAIL[/red]",
}


@app.command()
def check(
    export_dir: Annotated[Path, typer.Argument(help="a `models export` folder", parser=InputDir())],
) -> None:
    """Parity: the same seeded input through torch, onnxruntime and TensorFlow.

    Exit 1 when outputs differ, 2 when an exported file cannot be run at all (truncated,
    corrupt): each model gets its own line either way, and the others are still checked.
    """
    from model_zoo.export.check import check_exported
    from model_zoo.export.family import load_family
    from model_zoo.spec import SpecError

    try:
        specs, seed = load_family(export_dir)
    except (FileNotFoundError, SpecError) as err:
        raise fail(str(err)) from None
    failures = unreadable = 0
    for spec in specs:
        checked = check_exported(export_dir, spec, seed)
        console.print(
            f"{_CHECK_MARKS[checked.outcome]} {checked.text}",
            highlight=False,
            soft_wrap=checked.outcome == "unreadable",
        )
        failures += checked.outcome == "fail"
        unreadable += checked.outcome == "unreadable"
    if unreadable:
        raise typer.Exit(code=2)
    if failures:
        raise typer.Exit(code=1)


@app.command()
def serve(
    repository: Annotated[
        Path, typer.Argument(help="export folder or Triton repository", parser=InputDir())
    ],
    models: Annotated[str, typer.Option(help="models to load, comma-separated (default all)")] = "",
    once: Annotated[
        bool, typer.Option(help="load, answer one inference per model, print, and stop")
    ] = False,
    run_dir: Annotated[
        Path | None, typer.Option(help="where the server log goes", parser=OutputDir())
    ] = None,
    http_port: Annotated[
        int | None, typer.Option(help="HTTP port (default: a free one)", parser=Port())
    ] = None,
    grpc_port: Annotated[
        int | None, typer.Option(help="gRPC port (default: a free one)", parser=Port())
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="metrics port (default: a free one)", parser=Port())
    ] = None,
) -> None:
    """Start the local Triton on an exported repository and print its URLs until Ctrl-C.

    Exits 0 after Ctrl-C (or SIGTERM); 1, with the end of the server's log, when the
    tritonserver process dies on its own, so a supervisor or CI job sees the failure.
    """
    from servebench.servers.base import ServerError
    from servebench.servers.kinds import create_server
    from servebench.servers.local_serve import runnable_repository, smoke_infer

    try:
        repo = runnable_repository(repository)
    except ServerError as err:
        raise fail(str(err)) from None
    names = [n for n in models.split(",") if n] or sorted(
        p.parent.name for p in repo.glob("*/config.pbtxt")
    )
    died = ""
    try:
        ports = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port}
        server = create_server("triton-local", model_repository=repo, run_dir=run_dir, **ports)
        with server:
            ep = server.endpoints
            console.print(
                f"tritonserver (pid {server.pid}) ready in {server.startup_s:.2f} s "
                f"(log {server.log_path})",
                highlight=False,
            )
            table = Table("model", "load s", *(["smoke inference"] if once else []))
            for name in names:
                load_s = server.load_model(name)
                row = [name, f"{load_s:.2f}"]
                if once:
                    row.append(smoke_infer(ep.http_url, name))
                table.add_row(*row)
            console.print(table)
            console.print(
                f"HTTP    {ep.http_url}\ngRPC    {ep.grpc_address}\nmetrics {ep.metrics_url}"
            )
            if names:
                console.print(f"load    {_load_command(ep, names[0])}", soft_wrap=True)
            if not once:
                console.print("serving; press Ctrl-C to stop")
                if not _wait_for_interrupt(server):
                    # Read now: stopping removes a temporary run dir, log included.
                    died = (
                        f"tritonserver (pid {server.pid}) exited on its own; "
                        f"the end of its log:\n{server.log_tail()}"
                    )
    except (ServerError, FileNotFoundError) as err:
        raise fail(str(err)) from None
    if died:
        console.print(f"[red]error:[/red] {escape(died)}", highlight=False)
        raise typer.Exit(code=1)
    console.print("stopped")


def _load_command(endpoints: Endpoints, model: str) -> str:
    """A `servebench load` line for `model` on this server, ready to paste: the server's
    ports are picked free, so its metrics page is named (`load` would try Triton's default
    :8002, another server's or none), and so is the protocol."""
    import shlex

    from servebench.clients.registry import for_server

    metrics = ["--metrics-url", endpoints.metrics_url] if endpoints.metrics_url else []
    return shlex.join(
        [
            *("servebench", "load", "--url", endpoints.http_url),
            *("--protocol", for_server(endpoints.api, "http").name, "--model", model),
            *metrics,
            *("--concurrency", "4", "--duration", "10"),
        ]
    )


def _wait_for_interrupt(server: LocalTritonServer) -> bool:
    """Block until Ctrl-C or SIGTERM (True) or until the server dies on its own (False)."""
    import signal
    import time

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        while server.is_running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        return True
    return False
