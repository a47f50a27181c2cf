"""The common server interface: the registry, the triton-local adapter, remote attach."""

from __future__ import annotations

import socket
import time

import pytest

from servebench.scenario.serving import client_probe
from servebench.servers.base import Server, ServerModelError, ServerStartError
from servebench.servers.kinds import KINDS, create_server, server_kind
from servebench.servers.local import LocalTritonServer
from servebench.servers.remote import RemoteServer


@pytest.fixture(scope="module")
def local(triton_batching_model, tmp_path_factory) -> LocalTritonServer:
    server = create_server(
        "triton-local",
        model_repository=triton_batching_model.repository,
        run_dir=tmp_path_factory.mktemp("triton-base"),
    )
    server.start()
    yield server
    server.stop()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_registry_names_every_kind() -> None:
    assert set(KINDS) == {"triton-local", "triton-docker", "tfs-docker", "triton-remote",
                          "tfs-remote"}  # fmt: skip
    assert all(issubclass(kind.server_class(), Server) for kind in KINDS.values())
    assert "model_repository" in server_kind("triton-docker").accepted_settings()
    with pytest.raises(ValueError, match="unknown 'tfs-local'; expected one of triton-local"):
        create_server("tfs-local")
    # A remote kind fixes its API: the caller gives only where it is.
    with pytest.raises(ValueError, match=r"unknown setting\(s\) colour; accepted: http_url"):
        create_server("triton-remote", http_url="http://127.0.0.1:1", colour="red")
    with pytest.raises(ValueError, match=r"missing setting\(s\) http_url"):
        create_server("tfs-remote")
    assert create_server("tfs-remote", http_url="http://127.0.0.1:1").api == "tfs"


def test_remote_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="http_url: expected http://host:port"):
        RemoteServer("triton", "127.0.0.1:8000")
    with pytest.raises(ValueError, match="http_url: bad port"):
        RemoteServer("triton", "http://127.0.0.1:99999")
    with pytest.raises(ValueError, match="grpc_address: expected host:port"):
        RemoteServer("triton", "http://127.0.0.1:8000", grpc_address="127.0.0.1")
    with pytest.raises(ValueError, match="api: must be one of triton, tfs"):
        RemoteServer("torchserve", "http://127.0.0.1:8000")  # type: ignore[arg-type]


def test_local_adapter_reports_endpoints_pid_and_models(local, triton_batching_model) -> None:
    ep = local.endpoints
    assert ep.api == "triton"
    assert ep.http_url.startswith("http://127.0.0.1:")
    assert ep.grpc_address.startswith("127.0.0.1:")
    assert ep.metrics_url.endswith("/metrics")
    assert local.pid and local.owns_process and 0 < local.startup_s < 60
    assert local.is_ready()
    with pytest.raises(ServerModelError, match="no-such-model"):
        local.load_model("no-such-model", timeout_s=30)


def test_remote_attaches_to_a_running_triton(local, triton_batching_model) -> None:
    name = triton_batching_model.name
    ep = local.endpoints
    remote = create_server(
        "triton-remote", http_url=ep.http_url + "/", grpc_address=ep.grpc_address,
        metrics_url=ep.metrics_url, ready_timeout_s=10,
    )  # fmt: skip
    with remote:
        assert remote.endpoints.http_url == ep.http_url  # trailing slash dropped
        assert remote.pid is None and not remote.owns_process
        assert remote.startup_s < 10
        # Model control goes through the remote's repository API, on the real server.
        load_s = remote.load_model(name)
        assert 0 < load_s < 120 and local.is_model_ready(name)
        assert client_probe("triton", "http", timeout_s=30.0)(remote, name, 1)[0] > 0
        remote.unload_model(name)
        assert not local.is_model_ready(name)
    # Leaving the context did not stop the server it attached to.
    assert local.is_ready()
    # Listing a model makes attach wait for it; an unloaded one is a clear failure.
    waiting = RemoteServer("triton", ep.http_url, models=[name], ready_timeout_s=0.5)
    with pytest.raises(ServerStartError, match=f"model '{name}' not ready"):
        waiting.start()


def test_remote_that_does_not_answer_fails_with_the_address() -> None:
    port = _closed_port()
    remote = RemoteServer("triton", f"http://127.0.0.1:{port}", ready_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(
        ServerStartError,
        match=rf"remote triton at http://127.0.0.1:{port} is not ready after 0.3 s \(.*refused",
    ):
        remote.start()
    # It waited the 0.3 s asked for, not the default 30 s (any wait under that is the former).
    assert time.monotonic() - started < 30


def test_remote_tfs_does_not_load_models() -> None:
    remote = RemoteServer("tfs", "http://127.0.0.1:8501")
    with pytest.raises(ServerModelError, match="loads models from its own config"):
        remote.load_model("m")
    with pytest.raises(ServerModelError, match="only through its own config"):
        remote.unload_model("m")
