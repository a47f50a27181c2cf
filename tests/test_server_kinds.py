"""The server-kind registry is the one list of server kinds, and everything goes through it.

Every kind is one `ServerKind` entry (`servebench.servers.kinds.KINDS`); the scenario
schema's `kind`/`launch` words, its per-kind rules, the settings each kind takes and the
protocols it speaks are read off the entries. Two guards keep it so, read from the source
(ast): no module compares a value with an API name ("triton", "tfs") — a branch on the API
belongs in an entry — and no module outside `servebench.servers` constructs a server class
itself: every path that starts a server (the scenario runner, `servebench ui`, `models
serve`, cluster jobs and the overhead probe, which run the scenario runner) builds it
through its kind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest
import yaml

from model_zoo.export.family import FORMATS
from model_zoo.spec import ModelSpec
from servebench.clients.registry import PROTOCOLS, for_server
from servebench.common.serving_apis import SERVING_APIS
from servebench.overhead.serving import SIDE_KINDS, serving_scenario
from servebench.scenario.plan import expand
from servebench.scenario.schema import ServerSection
from servebench.scenario.validate import ScenarioError, load_scenario
from servebench.servers.base import Server
from servebench.servers.control import CONTROL_PLANES
from servebench.servers.docker_tfs import TfsDocker
from servebench.servers.errors import ServerKindError
from servebench.servers.kinds import (
    KINDS,
    LAUNCHES,
    Deployment,
    api_names,
    scenario_kind,
    server_kind,
)
from servebench.servers.local import LocalTritonServer
from servebench.servers.remote import MODEL_CONTROL_MODES, RemoteServer

ROOT = Path(__file__).resolve().parents[1]
API_NAMES = set(SERVING_APIS)
# Where the source is read: the packages and the scripts that drive them.
SOURCES = [
    p for folder in ("servebench", "model_zoo", "benchmarks") for p in (ROOT / folder).rglob("*.py")
]
SERVER_CLASSES = {kind.server_class().__name__ for kind in KINDS.values()}


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- the guards ----------------------------------------------------------------------------


def _names_an_api(node: ast.AST) -> bool:
    """A literal API name, or a tuple/list/set display holding one."""
    if isinstance(node, ast.Constant):
        return node.value in API_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_an_api(element) for element in node.elts)
    return False


def test_no_module_branches_on_an_api_name():
    """`x == "triton"`, `x != "tfs"`, `x in ("triton", "tfs")`, `"tfs" in x`: each is a
    per-kind decision the registry's entries make instead."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if any(_names_an_api(operand) for operand in operands):
                found.append(f"{_relative(path)}:{node.lineno}")
    assert not found, "compare with an API name (use servers.kinds instead): " + ", ".join(found)


def test_the_guard_sees_every_form_of_branch():
    """The check above is only as good as what it recognises."""
    branches = ['k == "triton"', 'k != "tfs"', 'k in ("triton", "tfs")', '"tfs" not in k',
                'k in ["x", "tfs"]', '"triton" == k']  # fmt: skip
    for source in branches:
        (compare,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Compare)]
        assert any(_names_an_api(o) for o in [compare.left, *compare.comparators]), source
    for source in ['k == "triton-local"', "k == TRITON.name", "k.launch.starts"]:
        compares = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Compare)]
        assert not any(_names_an_api(o) for c in compares for o in [c.left, *c.comparators])


def test_servers_are_built_only_through_their_kind():
    """Outside servebench.servers no code calls a server class: it asks the registry
    (`ServerKind.build` from a scenario's section, `kinds.create_server` by kind name)."""
    found = []
    servers = ROOT / "servebench" / "servers"
    for path in SOURCES:
        if servers in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in SERVER_CLASSES:
                    found.append(f"{_relative(path)}:{node.lineno} {name}(...)")
    assert not found, "\n".join(found)


# -- the entries agree with their code -----------------------------------------------------


@pytest.mark.parametrize("name", list(KINDS))
def test_each_entry_agrees_with_its_server(name):
    kind = server_kind(name)
    cls = kind.server_class()
    assert issubclass(cls, Server)
    # A kind servebench starts is one it stops, sets up and exports for; one it attaches
    # to has none of these.
    assert cls.owns_process == kind.launch.starts
    assert (kind.settings is not None) == kind.launch.starts
    assert (kind.export_format is not None) == kind.launch.starts
    assert kind.export_format is None or kind.export_format in FORMATS
    assert kind.api.name in CONTROL_PLANES
    assert set(kind.model_control) <= {"none", *MODEL_CONTROL_MODES}
    # Its protocols are the clients registry's for its API: one per scenario transport.
    transports = get_args(ServerSection.model_fields["protocol"].annotation)
    for transport in transports:
        assert for_server(kind.api.name, transport).server == kind.api.name
    assert kind.scenario_fields() == {"api": kind.api.name, "launch": kind.launch.name}
    assert scenario_kind(kind.api.name, kind.launch.name) is kind


def test_every_protocol_names_an_api_the_registry_serves():
    served = {spec.server for spec in PROTOCOLS.values() if spec.server is not None}
    assert served == set(api_names()) == API_NAMES


def test_the_scenario_words_are_the_registrys():
    fields = ServerSection.model_fields
    assert get_args(fields["api"].annotation) == api_names() == ("triton", "tfs")
    assert get_args(fields["launch"].annotation) == tuple(LAUNCHES) == ("local", "docker", "remote")
    assert set(get_args(fields["model_control"].annotation)) == {
        mode for kind in KINDS.values() for mode in kind.model_control
    }
    # Each (kind, launch) means exactly one entry or is refused with the launches offered.
    for api in api_names():
        for launch in LAUNCHES:
            offered = [k for k in KINDS.values() if (k.api.name, k.launch.name) == (api, launch)]
            if offered:
                assert [scenario_kind(api, launch)] == offered
            else:
                with pytest.raises(ServerKindError, match=f"has no {launch} launcher here"):
                    scenario_kind(api, launch)


def test_every_shipped_scenario_maps_to_a_kind():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        for server in load_scenario(path).servers:
            kind = server.server_kind
            assert (kind.api.name, kind.launch.name) == (server.api, server.launch), path


def test_the_overhead_probe_runs_the_registrys_kinds(tmp_path):
    for side, name in SIDE_KINDS.items():
        path = tmp_path / f"{side}.yaml"
        path.write_text(yaml.safe_dump(serving_scenario(side, "s", tmp_path, quick=True)))
        assert load_scenario(path).servers[0].server_kind.name == name, side


# -- the schema reads its rules off the entries --------------------------------------------


def _problems(tmp_path: Path, server: str) -> list[str]:
    text = (
        "name: k\n"
        "models: {specs: [{layer_type: dense, depth: 1, width: 8, input_shape: [4]}]}\n"
        f"servers: [{server}]\n"
        "workload: {mode: closed, concurrency: [1], duration_s: 1}\n"
    )
    path = tmp_path / "k.yaml"
    path.write_text(text)
    try:
        load_scenario(path)
    except ScenarioError as err:
        return [re.sub(r"^\S+ ", "", p) for p in err.problems]
    return []


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("{name: t, api: tfs}",
         "servers[0].launch: TF Serving has no local launcher here; use docker (a Docker "
         "engine) or remote (url of a running server)"),
        ("{name: t, api: triton, launch: remote, url: 'http://h:1', settings: {a: 1}}",
         "servers[0].settings: {'a': 1} — a remote server's settings cannot be changed"),
        ("{name: t, api: tfs, launch: remote, url: 'http://h:1', model_control: explicit}",
         "servers[0].model_control: 'explicit' — explicit is Triton's mode; TF Serving has none"),
        ("{name: t, api: triton, model_control: explicit}",
         "servers[0].model_control: 'explicit' — only for remote servers (servebench loads "
         "its own)"),
        ("{name: t, api: triton, launch: docker, url: 'http://h:1'}",
         "servers[0].url: 'http://h:1' — only remote servers take an address"),
        ("{name: t, api: triton, image: 'x:1'}",
         "servers[0].image: 'x:1' — only docker servers take an image"),
        ("{name: t, api: tfs, launch: docker, settings: {max_queue_delay_us: 5}}",
         "servers[0].settings.max_queue_delay_us: 5 — unknown key (allowed: enable_batching,"),
    ],
)  # fmt: skip
def test_per_kind_rules_come_from_the_entry(tmp_path, server, expected):
    problems = _problems(tmp_path, server)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_settings_are_the_kinds(tmp_path):
    for kind in KINDS.values():
        if kind.settings is None:
            continue
        server = f"{{name: t, api: {kind.api.name}, launch: {kind.launch.name}}}"
        assert _problems(tmp_path, server) == []
        path = tmp_path / "k.yaml"
        section = load_scenario(path).servers[0]
        assert section.settings_type is kind.settings
        assert section.settings_model.combinations() == kind.settings().combinations()


# -- building from a scenario's section, without starting ----------------------------------

SPEC = ModelSpec(layer_type="dense", depth=1, width=8, input_shape=(4,), num_outputs=3)


def _plan(tmp_path: Path, server: str):
    path = tmp_path / "b.yaml"
    path.write_text(
        "name: b\n"
        "models: {specs: [{layer_type: dense, depth: 1, width: 8, input_shape: [4], "
        "num_outputs: 3}]}\n"
        f"servers: [{server}]\n"
        "workload: {mode: closed, concurrency: [1], duration_s: 1}\n"
    )
    return expand(load_scenario(path), tmp_path)


@pytest.fixture(scope="module")
def triton_export(tmp_path_factory) -> Path:
    from model_zoo.export.family import export_family

    out = tmp_path_factory.mktemp("kinds-export")
    export_family([SPEC], out, formats=("triton",), check=False)
    return out


def test_triton_local_builds_its_repository_from_the_setting(tmp_path, triton_export):
    plan = _plan(tmp_path, "{name: t, api: triton, settings: {max_batch_size: 4, "
                           "dynamic_batching: false, instance_count: 2}}")  # fmt: skip
    (setting,) = plan.settings
    kind = setting.server.server_kind
    server = kind.build(
        Deployment(setting.server, setting.values, plan.models, triton_export, tmp_path / "w")
    )
    assert isinstance(server, LocalTritonServer) and server.run_dir is None
    config = (tmp_path / "w" / "models" / SPEC.id / "config.pbtxt").read_text()
    assert "max_batch_size: 4" in config and "count: 2" in config
    assert "python" in config and "dynamic_batching" not in config


def test_tfs_docker_builds_with_the_settings_batching(tmp_path, tfs_family):
    spec = next(iter(tfs_family.specs.values()))
    server = "{name: t, api: tfs, launch: docker, gpus: 0, settings: {enable_batching: true, "
    server += "max_batch_size: 8, batch_timeout_us: 250, inter_op_threads: 3}}"
    plan = _plan(tmp_path, server)
    (setting,) = plan.settings
    built = setting.server.server_kind.build(
        Deployment(setting.server, setting.values, [spec], tfs_family.export_dir, tmp_path)
    )
    assert isinstance(built, TfsDocker) and built.served == [spec.id]
    assert built.enable_batching and built.batching.max_batch_size == 8
    assert built.batching.batch_timeout_micros == 250 and built.inter_op == 3
    assert built.intra_op is None and built.gpus is None


@pytest.mark.parametrize("api", ["triton", "tfs"])
def test_remote_kinds_build_from_the_address(tmp_path, api):
    plan = _plan(tmp_path, f"{{name: r, api: {api}, launch: remote, url: 'http://h:8'}}")
    (setting,) = plan.settings
    built = setting.server.server_kind.build(
        Deployment(setting.server, setting.values, plan.models, tmp_path, tmp_path)
    )
    assert isinstance(built, RemoteServer) and built.endpoints.api == api
    assert built.endpoints.http_url == "http://h:8" and built.models == (SPEC.id,)
    assert not built.manages_models and built.ready_timeout_s == 30.0
