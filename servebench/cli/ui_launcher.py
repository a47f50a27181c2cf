"""`servebench ui`: Locust's web UI (or a headless Locust run), preconfigured for a model.

Application work, not the Locust adapter's (`servebench.locust` only holds the users and
their hooks): this module reads a scenario, exports a model, starts a server and runs
Locust on the adapter's locustfile.

From a scenario file it takes the first trial of its first server (or `--server NAME`),
as `servebench.scenario.plan.expand` orders them: the first model, settings combination,
link and a batch size that combination serves, and the scenario's input data
(`workload.inputs`, which its validation has fitted to the model). A server servebench starts (any kind whose
launch starts one: the local Triton, a container) is exported and built by its server kind
exactly as a scenario run builds it (`servebench.scenario.deploy`), started here, and
stopped when Locust ends; a remote one is only addressed. Without a scenario, `--host` and
`--model` say where to send. Anything given on the command line wins.

Locust runs as a subprocess (`python -m locust -f servebench/locust/locustfile.py ...`),
not as a library in this process, because:
- importing Locust monkey-patches sockets, threads and subprocesses with gevent, and this
  process exports models with torch / ONNX / TensorFlow and supervises tritonserver,
  none of which should run on a patched standard library;
- the child is exactly `locust -f`, so every Locust option passes through unchanged
  (`servebench ui scenario.yaml -- --processes 2 --csv out`), and the results come from
  the same hooks as any `locust -f` run of servebench's users.

This module imports no Locust. The child gets its own session, so a Ctrl-C here reaches it
once, forwarded: Locust then stops the swarm, writes the results and exits, and this
process stops the server it started after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

import servebench.locust as adapter
from servebench.clients.registry import PROTOCOLS as REGISTRY
from servebench.common.errors import ServebenchError
from servebench.locust.facts import TrialFacts
from servebench.locust.results import check_run_id
from servebench.locust.settings import DEFAULT_PROTOCOL, PROTOCOLS
from servebench.netem import BUILTIN_PROFILES, LinkProfile, ProfileError, resolve_link
from servebench.results import (
    RUN_FILE,
    RunDirectory,
    new_run_id,
    read_run_json,
    unused_run_id,
)
from servebench.servers.ports import LOOPBACK, bind_error, free_ports, port_accepts

if TYPE_CHECKING:
    from model_zoo.imports import ServedModel
    from servebench.clients.input_data import InputData
    from servebench.scenario.plan import ServerSetting
    from servebench.scenario.schema import Scenario

LOCUSTFILE = Path(adapter.__file__).with_name("locustfile.py")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
UI_START_TIMEOUT_S = 60.0


class LaunchError(ServebenchError):
    """`servebench ui` cannot start; the message says which input and why."""


@dataclass
class Target:
    """Where the users send and what: the values the Locust options start with."""

    host: str = ""
    grpc_host: str = ""
    model: str = ""
    version: str = ""
    protocol: str = DEFAULT_PROTOCOL
    batch_size: int = 1
    link: str = "direct"
    input_data: str = ""  # a file of samples the users send; "" for a random payload


@dataclass
class ServerToStart:
    """What `servebench ui` starts for a scenario's server: its first trial's model on that
    trial's setting, which the server's kind builds as a scenario run does."""

    spec: ServedModel
    setting: ServerSetting
    seed: int = 0


@dataclass(frozen=True)
class UiSetup:
    """What `launch` starts: the users' target, and the server to start, if any.

    One trial's worth of a scenario (`servebench.scenario.plan.Plan` lists them all),
    plus what `servebench ui` needs around it: where results go, under which name, and
    what the scenario says that the load cannot (`facts`: cost instance, SLO, model FLOP
    counts, for the trial rows).
    """

    target: Target
    to_start: ServerToStart | None = None
    scenario: Path | None = None
    run_prefix: str = "locust"
    results_dir: Path = Path("results")
    server_name: str = ""
    facts: TrialFacts | None = None


def setup_from_scenario(path: Path, server_name: str | None, workdir: Path) -> UiSetup:
    """The first trial of a scenario's first (or named) server (ScenarioError if invalid)."""
    from servebench.scenario.plan import ModelMix, expand
    from servebench.scenario.validate import load_scenario

    scenario = load_scenario(path)
    servers = scenario.servers
    if server_name is not None:
        servers = [s for s in servers if s.name == server_name]
        if not servers:
            names = ", ".join(s.name for s in scenario.servers)
            raise LaunchError(f"--server: {path} has no server {server_name!r} (it has: {names})")
    server = servers[0]
    # Validation refuses a batch size no settings combination serves: every server has trials.
    plan = expand(scenario, path.parent)
    trial = next(t for t in plan.trials if t.setting.server is server)
    if isinstance(trial.model, ModelMix):
        raise LaunchError(
            f"{path}: workload.mix: Locust users send to one model; "
            "`servebench scenario run` measures a mix"
        )
    inputs = scenario.workload.inputs
    target = Target(
        model=trial.model.id,
        protocol=server.client_protocol.name,
        batch_size=trial.batch_size,
        link=_link_argument(trial.link, workdir),
        # Absolute: relative to the scenario's folder, as a scenario run reads it.
        input_data=str((path.parent / inputs).resolve()) if inputs is not None else "",
    )
    to_start = None
    if server.server_kind.launch.starts:
        to_start = ServerToStart(trial.model, trial.setting, scenario.seed)
    else:
        target.host = server.url or ""
        target.grpc_host = server.grpc_url or ""
    return UiSetup(
        target,
        to_start,
        scenario=path,
        run_prefix=f"{scenario.name}-locust",
        results_dir=scenario.output,
        server_name=server.name,
        facts=scenario_facts(scenario, plan.models),
    )


def scenario_facts(scenario: Scenario, models: list[ServedModel]) -> TrialFacts:
    """The scenario's cost instance and price (`CostSection.price`: the scenario runner's
    own), its SLO, and each model's size and FLOP counts."""
    from servebench.scenario.trial import model_columns

    instance, usd_per_hour = "", None
    if scenario.cost is not None:
        price = scenario.cost.price()
        instance, usd_per_hour = price.instance_type, price.usd_per_hour
    slo = scenario.slo
    return TrialFacts(
        instance=instance,
        usd_per_hour=usd_per_hour,
        slo_percentile=slo.percentile if slo else None,
        slo_latency_s=slo.latency_ms / 1e3 if slo else None,
        models={spec.id: model_columns(spec) for spec in models},
    )


def _link_argument(link: LinkProfile, workdir: Path) -> str:
    """What Locust's `--link` takes for a resolved profile: a built-in's name, else the
    profile written out to `workdir` (trace paths absolute), so Locust reads that file and
    not the scenario's again."""
    if BUILTIN_PROFILES.get(link.name) == link:
        return link.name
    data = link.model_dump(mode="json", exclude_none=True)
    for trace in ("down_trace", "up_trace"):
        if trace in data:  # an inline profile's are relative to this process's folder
            data[trace] = str(Path(data[trace]).resolve())
    path = workdir / f"link-{link.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def resolve(setup: UiSetup, overrides: dict[str, Any]) -> UiSetup:
    """Apply command-line values (None: keep the scenario's) and check the result."""
    target = replace(setup.target, **{k: v for k, v in overrides.items() if v is not None})
    if target.host or target.grpc_host:
        setup = replace(setup, to_start=None)  # an address given: talk to it, start nothing
    if target.protocol not in PROTOCOLS:
        raise LaunchError(f"--protocol: {target.protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if not target.model:
        raise LaunchError("--model: give the served model's name (or a scenario file)")
    if setup.to_start is None and not (target.host or target.grpc_host):
        raise LaunchError("--host: give the server's address (or a scenario file)")
    if target.batch_size < 1:
        raise LaunchError(f"--batch-size: must be >= 1, got {target.batch_size}")
    if overrides.get("link") is not None:
        # Checked here, so a bad --link is one line before Locust starts; Locust's process
        # then resolves it once for all its users (servebench.locust.settings.link_profile).
        try:
            resolve_link(target.link)
        except ProfileError as err:
            raise LaunchError(f"--link: {err}") from None
    if overrides.get("input_data") is not None:
        input_data(target)  # a file that cannot be read is one line before Locust starts
    return replace(setup, target=target)


def input_data(target: Target) -> InputData | None:
    """The target's input-data file read (None without one); LaunchError naming it."""
    from servebench.clients.input_data import read_input_data

    if not target.input_data:
        return None
    try:
        return read_input_data(target.input_data)
    except ValueError as err:  # InputDataError, or the text reader's TextFileError
        raise LaunchError(f"--input-data {err}") from None


def locust_argv(
    target: Target,
    *,
    results_dir: Path,
    run_id: str,
    scenario: Path | None,
    port: int,
    headless: bool,
    users: int,
    spawn_rate: float,
    run_time: str | None,
    extra: list[str],
    trial_facts: Path | None = None,
) -> list[str]:
    """The `locust` command line for `target` (web UI on 127.0.0.1:port, or headless)."""
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    if target.host:
        argv += ["--host", target.host]
    argv += [
        "--grpc-host", target.grpc_host,
        "--model", target.model,
        "--model-version", target.version,
        "--protocol", target.protocol,
        "--batch-size", str(target.batch_size),
        "--link", target.link,
        "--input-data", target.input_data,
        "--results-dir", str(results_dir),
        "--run-id", run_id,
        "-u", str(users),
        "-r", f"{spawn_rate:g}",
    ]  # fmt: skip
    if scenario is not None:
        argv += ["--scenario-file", str(scenario)]
    if trial_facts is not None:
        argv += ["--trial-facts", str(trial_facts)]
    if headless:
        argv += ["--headless"]
        if run_time:
            argv += ["-t", run_time]
    else:
        argv += ["--web-host", LOOPBACK, "--web-port", str(port)]
        if run_time:
            argv += ["-t", run_time]
    return argv + extra


@contextlib.contextmanager
def started_server(
    to_start: ServerToStart, workdir: Path, say: Callable[[str], None]
) -> Iterator[tuple[str, str]]:
    """Export the model, have its server kind build the server as a scenario run does, start
    it with the model loaded; yields (http url, grpc address) and stops it after."""
    from servebench.scenario.deploy import build_server, export_for, start_serving

    kind = to_start.setting.server.server_kind
    label = f"{kind.launch.name} {kind.api.title}"
    say(f"exporting {to_start.spec.id} for the {label} ...")
    export_for([kind], [to_start.spec], workdir, seed=to_start.seed)
    server = build_server(to_start.setting, 0, [to_start.spec], workdir)
    say(f"starting the {label} ...")
    try:
        start_serving(server, [to_start.spec.id])
        ep = server.endpoints
        say(f"{label} ready: {ep.http_url} (gRPC {ep.grpc_address})")
        yield ep.http_url, ep.grpc_address or ""
    finally:
        server.stop()
        say(f"{label} stopped")


def own_options(extra: list[str]) -> tuple[str | None, list[str]]:
    """Split a `--run-id` off the options passed through to Locust, checked as a name.

    The launcher names the run directory itself (it closes the run if Locust dies), so a
    run id given after `--` becomes the launcher's. `--results-dir` there is refused: it
    would send the results somewhere `--results` does not say.
    """
    run_id, rest = None, []
    items = iter(extra)
    for item in items:
        name, sep, value = item.partition("=")
        if name == "--results-dir":
            raise LaunchError("--results-dir: give the results folder as servebench ui --results")
        if name != "--run-id":
            rest.append(item)
            continue
        run_id = value if sep else next(items, "")
        try:
            check_run_id(run_id)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
    return run_id, rest


def check_port_free(port: int) -> None:
    """Refuse a web UI port that is taken before anything starts (Locust would fail late,
    with a traceback, after a server was exported and started)."""
    if not 1 <= port <= 65535:
        raise LaunchError(f"--port: {port} is outside 1-65535")
    error = bind_error(port)
    if error is not None:
        raise LaunchError(
            f"--port {port}: {LOOPBACK}:{port} is not free ({error.strerror}); "
            "choose another, or leave --port out for a free one"
        )


def check_target(setup: UiSetup) -> None:
    """What `servebench load` checks before it starts, checked before Locust starts: a
    server given by address answers for the model, its version, protocol and batch size,
    and the input data fits its signature (a server servebench starts is checked when it
    starts, its scenario's input data by the scenario's validation; `--link` is checked by
    `resolve`). LaunchError
    if not: otherwise the mistake would surface in Locust's own output, after the swarm
    started."""
    import asyncio
    import functools

    from servebench.cli.load_server import checked_connect
    from servebench.clients.factory import create_client
    from servebench.clients.input_data import InputDataError

    target = setup.target
    if setup.to_start is not None:
        return
    grpc = REGISTRY[target.protocol].transport == "grpc"
    option, address = ("--grpc-host", target.grpc_host) if grpc else ("--host", target.host)
    if not address:
        raise LaunchError(f"{option}: protocol {target.protocol} needs the server's address")
    factory = functools.partial(
        create_client, target.protocol, address, target.model, version=target.version or None
    )
    try:
        asyncio.run(
            checked_connect(
                factory,
                target.protocol,
                address,
                target.model,
                target.batch_size,
                0,
                input_data(target),
            )
        )
    except InputDataError as err:
        raise LaunchError(f"--input-data {err}") from None
    except ValueError as err:
        raise LaunchError(str(err)) from None


def wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float) -> bool:
    """True once 127.0.0.1:port accepts; False if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if port_accepts(port):
            return True
        time.sleep(0.1)
    return False


def run_locust(argv: list[str], *, port: int | None, say: Callable[[str], None]) -> int:
    """Run Locust until it exits; Ctrl-C or SIGTERM here asks it to stop, once.

    Locust is asked with SIGTERM (its graceful shutdown: stop the swarm, fire the events
    that write the results, exit), because a child started from a background job
    inherits an ignored SIGINT. A second interrupt here kills it.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    previous = {
        sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    escalation = [signal.SIGTERM, signal.SIGKILL]
    try:
        if port is not None:
            if wait_for_port(port, proc, UI_START_TIMEOUT_S):
                say(f"Locust web UI: http://{LOOPBACK}:{port}  (Ctrl-C stops it)")
            elif proc.poll() is None:
                say(
                    f"Locust's web UI did not open on port {port} within {UI_START_TIMEOUT_S:.0f} s"
                )
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                if not escalation:
                    continue
                sig = escalation.pop(0)
                if sig == signal.SIGTERM:
                    say("stopping Locust (it writes the results first) ...")
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def finish_run(path: Path, returncode: int) -> dict[str, Any] | None:
    """Close a run Locust left open (it died): status interrupted, records merged."""
    run_file = path / RUN_FILE
    if not run_file.is_file():
        return None
    run = read_run_json(run_file)
    if run.get("status") == "running":
        RunDirectory(path, run=run).finish(
            "interrupted", f"Locust exited with status {returncode} before closing the run"
        )
    return run


def launch(
    setup: UiSetup,
    workdir: Path,
    *,
    port: int | None,
    headless: bool,
    users: int,
    spawn_rate: float | None,
    run_time: str | None,
    extra: list[str],
    say: Callable[[str], None] = print,
) -> tuple[int, Path]:
    """Start what the setup needs, run Locust, stop it all; returns (exit code, run dir).

    `workdir` holds the export and the started server's folder (the caller removes it).
    """
    target = setup.target
    given, extra = own_options(extra)
    results = Path(setup.results_dir)
    if given and (results / given).exists():
        raise LaunchError(f"--run-id {given}: {results / given} exists; choose another name")
    run_id = given or unused_run_id(results, new_run_id(setup.run_prefix))
    run_path = results / run_id
    if port is not None and not headless:
        check_port_free(port)
    check_target(setup)
    ui_port = None if headless else (port or free_ports(1)[0])
    facts_file = None
    if setup.facts is not None:
        facts_file = workdir / "trial-facts.json"
        facts_file.write_text(setup.facts.to_json())
    with contextlib.ExitStack() as stack:
        if setup.to_start is not None:
            started = started_server(setup.to_start, workdir, say)
            http_url, grpc_address = stack.enter_context(started)
            target = replace(target, host=http_url, grpc_host=grpc_address)
            if target.input_data:  # the file against the model as the server reports it
                check_target(UiSetup(target))
        argv = locust_argv(
            target,
            results_dir=results,
            run_id=run_id,
            scenario=setup.scenario,
            port=ui_port or 0,
            headless=headless,
            users=users,
            spawn_rate=spawn_rate or users,
            run_time=run_time,
            extra=extra,
            trial_facts=facts_file,
        )
        address = (
            target.grpc_host or target.host
            if REGISTRY[target.protocol].transport == "grpc"
            else target.host
        )
        data = f", input data {target.input_data}" if target.input_data else ""
        say(
            f"Locust users: {target.protocol} to {address}, model {target.model}, "
            f"batch {target.batch_size}, link {target.link}{data}; results: {run_path}"
        )
        code = run_locust(argv, port=ui_port, say=say)
    finish_run(run_path, code)
    return code, run_path
