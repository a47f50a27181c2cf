"""`servebench ui`: Locust's web UI (or a headless Locust run), preconfigured for a model.

Application work: this module reads a scenario, has its server started and runs Locust on
the adapter's locustfile (`servebench.locust.launch`).

From a scenario file it takes the first trial of its first server (or `--server NAME`),
as `servebench.scenario.plan.expand` orders them: the first model (or the mix, with each
of its models), settings combination, link and a batch size that combination serves, and
the scenario's input data (`workload.inputs`, which its validation has fitted to the
model). A server servebench starts (any kind whose launch starts one: the local Triton, a
container) is exported, built by its server kind and started exactly as a scenario run
does it (`servebench.scenario.deploy.serving`), and stopped when Locust ends; a remote one
is only addressed. Without a scenario, `--host` and `--model` say where to send. Anything
given on the command line wins.

Locust itself runs as a child process (`servebench.locust.launch`, which says why);
this module imports no Locust.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from servebench.clients.registry import PROTOCOLS as REGISTRY
from servebench.locust.facts import TrialFacts
from servebench.locust.launch import LaunchError, Session, Target, finish_run, run_session
from servebench.locust.mix import mix_members
from servebench.locust.settings import PROTOCOLS
from servebench.netem import BUILTIN_PROFILES, LinkProfile, ProfileError, resolve_link

if TYPE_CHECKING:
    from model_zoo.imports import ServedModel
    from servebench.clients.input_data import InputData
    from servebench.scenario.plan import ServerSetting
    from servebench.scenario.schema import Scenario


@dataclass
class ServerToStart:
    """What `servebench ui` starts for a scenario's server: its first trial's model (each
    model of a mix) on that trial's setting, which the server's kind builds as a scenario
    run does."""

    specs: tuple[ServedModel, ...]
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
    from servebench.scenario.plan import expand
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
    inputs = scenario.workload.inputs
    target = Target(
        model=trial.model.id,  # a mix's id names its models and weights (`locust.mix`)
        protocol=server.client_protocol.name,
        batch_size=trial.batch_size,
        link=_link_argument(trial.link, workdir),
        # Absolute: relative to the scenario's folder, as a scenario run reads it.
        input_data=str((path.parent / inputs).resolve()) if inputs is not None else "",
        seed=scenario.seed,
    )
    to_start = None
    if server.server_kind.launch.starts:
        to_start = ServerToStart(tuple(trial.models), trial.setting, scenario.seed)
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
    try:
        mix_members(target.model)
    except ValueError as err:
        raise LaunchError(str(err)) from None
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


def check_target(setup: UiSetup) -> None:
    """What `servebench load` checks before it starts, checked before Locust starts: a
    server given by address answers for the model (each model of a mix), its version,
    protocol and batch size, and the input data fits its signature (a server servebench starts is checked when it
    starts, its scenario's input data by the scenario's validation; `--link` is checked by
    `resolve`). LaunchError
    if not: otherwise the mistake would surface in Locust's own output, after the swarm
    started."""
    import asyncio
    import functools

    from servebench.clients.factory import create_client
    from servebench.clients.input_data import InputDataError
    from servebench.clients.probe import checked_connect

    target = setup.target
    if setup.to_start is not None:
        return
    grpc = REGISTRY[target.protocol].transport == "grpc"
    option, address = ("--grpc-host", target.grpc_host) if grpc else ("--host", target.host)
    if not address:
        raise LaunchError(f"{option}: protocol {target.protocol} needs the server's address")
    try:
        models = mix_members(target.model) or ((target.model, 1.0),)
        data = input_data(target)
        for model, _ in models:
            factory = functools.partial(
                create_client, target.protocol, address, model, version=target.version or None
            )
            asyncio.run(
                checked_connect(
                    factory, target.protocol, address, model, target.batch_size, 0, data
                )
            )
    except InputDataError as err:
        raise LaunchError(f"--input-data {err}") from None
    except ValueError as err:
        raise LaunchError(str(err)) from None


def launch(
    setup: UiSetup, session: Session, workdir: Path, *, say: Callable[[str], None] = print
) -> tuple[int, Path]:
    """Start what the setup needs, run Locust's `session`, stop it all; returns (exit code,
    run dir).

    `workdir` holds the export and the started server's folder (the caller removes it).
    """
    from servebench.scenario.deploy import serving

    target = setup.target
    check_target(setup)
    facts_file = None
    if setup.facts is not None:
        facts_file = workdir / "trial-facts.json"
        facts_file.write_text(setup.facts.to_json())
    with contextlib.ExitStack() as stack:
        if setup.to_start is not None:
            to_start = setup.to_start
            started = serving(to_start.setting, to_start.specs, workdir, to_start.seed, say)
            http_url, grpc_address = stack.enter_context(started)
            target = replace(target, host=http_url, grpc_host=grpc_address)
            if target.input_data:  # the file against the model as the server reports it
                check_target(UiSetup(target))
        code = run_session(
            session, target, scenario=setup.scenario, trial_facts=facts_file, say=say
        )
    finish_run(session.run_path, code)
    return code, session.run_path
