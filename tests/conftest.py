"""Shared fixtures: the real local Triton, started on free loopback ports in tmp dirs.

`local_triton` / `local_triton_module` are factories: call them with a model repository
(and any `LocalTritonServer` keyword) to get a started `triton-local` server; every server
a factory started is stopped when the fixture's scope ends. Tests that need Triton skip,
with the reason, where the nvidia-pytriton wheel is missing.

`triton_dense_model` is one small dense model, exported from the real torch builder and
served for the whole session, for tests that just need "a Triton model to talk to" (clients,
load engine). Do not unload it.

`until` / `until_async` (imported from conftest) wait for a condition instead of sleeping a
fixed time and then counting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from servebench.servers.kinds import create_server
from servebench.servers.local import LocalTritonServer
from servebench.servers.triton_install import TritonInstall, TritonNotInstalledError

if TYPE_CHECKING:
    from aiohttp import web


# A test run started from a background job (`make test &`, a CI runner's non-interactive
# shell) inherits an ignored SIGINT (POSIX: such jobs ignore SIGINT), and so does every
# process a test starts: a Ctrl-C test's child then never stops (measured: 2 of 2 full runs
# started that way failed test_hostile_files' SIGINT case, 0 of 5 in the foreground).
# Python's own handler, as in a terminal, is what the tests are written for.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> Iterator[None]:
    """No test leaves this process's SIGINT or SIGTERM handled otherwise than it found
    them: a command or load run in-process that forgets to put a handler back changes
    every later test of the worker, and the processes those start inherit it."""
    watched = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.getsignal(sig) for sig in watched}
    yield
    left = {
        signal.Signals(sig).name: signal.getsignal(sig)
        for sig in watched
        if signal.getsignal(sig) != before[sig]
    }
    for sig in watched:
        signal.signal(sig, before[sig])  # the next tests run as they should
    assert not left, f"the test left signal handlers changed: {left}"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The host-roof cache of the runs tests start goes to a temporary folder, not the
    user's ~/.cache (the first run of a session measures the roofs once), and so does an
    export cache: the first run to export a model keeps its export for every later run of
    the session, in this process or another (scenario.export_cache), instead
    of each paying seconds of ONNX export and parity check for the same tiny model. The
    export itself is tested where it is the subject (test_triton_export,
    test_export_family, test_cli_models).

    Under pytest-xdist both folders are the session's, shared by its workers (each has a
    base temp folder of its own below it): what one worker measured or exported, the
    others copy. Both caches are safe between processes (an entry appears by an atomic
    rename)."""
    from servebench.scenario.export_cache import EXPORT_CACHE_ENV
    from servebench.telemetry.host_peak import CACHE_ENV

    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent
    patch = pytest.MonkeyPatch()
    for variable, name in (
        (CACHE_ENV, "servebench-cache"),
        (EXPORT_CACHE_ENV, "servebench-exports"),
    ):
        (session / name).mkdir(exist_ok=True)
        patch.setenv(variable, str(session / name))
    yield
    patch.undo()


class TritonFactory:
    """Starts `triton-local` servers with run dirs under pytest's tmp dir; stops them on close."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._servers: list[LocalTritonServer] = []

    def __call__(self, repository: Path, **kwargs: Any) -> LocalTritonServer:
        kwargs.setdefault("run_dir", self._tmp.mktemp("triton-run"))
        server = create_server("triton-local", model_repository=repository, **kwargs)
        assert isinstance(server, LocalTritonServer)
        self._servers.append(server)
        server.start()
        return server

    def close(self) -> None:
        for server in reversed(self._servers):
            server.stop()


@pytest.fixture(scope="session")
def triton_install() -> TritonInstall:
    try:
        return TritonInstall.locate()
    except TritonNotInstalledError as err:
        pytest.skip(f"local Triton unavailable: {err}")


def _triton_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonFactory]:
    factory = TritonFactory(tmp_path_factory)
    yield factory
    factory.close()


@pytest.fixture
def local_triton(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonFactory]:
    yield from _triton_factory(tmp_path_factory)


@pytest.fixture(scope="module")
def local_triton_module(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonFactory]:
    """`local_triton` shared by a module's tests (servers started once for all of them)."""
    yield from _triton_factory(tmp_path_factory)


@dataclass(frozen=True)
class ServedModel:
    server: LocalTritonServer
    name: str
    spec: Any  # model_zoo.spec.ModelSpec
    module: Any  # the torch module the export came from, for reference outputs


@pytest.fixture(scope="session")
def triton_dense_model(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedModel]:
    # Imported here so that test sessions that never use the model do not pay for torch.
    from model_zoo.export import TritonSettings, export_triton
    from model_zoo.spec import ModelSpec
    from model_zoo.torch_builder import build_torch

    spec = ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4)
    module = build_torch(spec, seed=0)
    out = tmp_path_factory.mktemp("triton-dense-export")
    export = export_triton(module, spec, out, TritonSettings(max_batch_size=64))
    factory = TritonFactory(tmp_path_factory)
    try:
        server = factory(out / "triton-python", load_models=[export.name])
        yield ServedModel(server=server, name=export.name, spec=spec, module=module)
    finally:
        factory.close()


# -- TF Serving protocol double and socket fixtures for the inference client tests ---------


@dataclass(frozen=True)
class TfsFamily:
    """A small family exported as SavedModels and served by the TF Serving protocol double."""

    double: Any  # tests.tfs_protocol_server.TfsProtocolDouble
    export_dir: Path
    specs: dict[str, Any]  # model name -> model_zoo.spec.ModelSpec
    modules: dict[str, Any]  # model name -> the torch module, for reference outputs


@pytest.fixture(scope="session")
def tfs_family(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TfsFamily]:
    """A dense and a conv model (2-D and 4-D inputs), exported with seed 0 and served.

    Only the `tfs` format is exported: these tests need no ONNX, which costs far more
    export time than the SavedModels (pass formats=("triton", "tfs") to add it).
    """
    from tfs_protocol_server import TfsProtocolDouble

    from model_zoo.export.family import export_family
    from model_zoo.spec import ModelSpec
    from model_zoo.torch_builder import build_torch

    specs = [
        ModelSpec(layer_type="dense", depth=2, width=16, input_shape=(8,), num_outputs=4),
        ModelSpec(layer_type="conv", depth=1, width=4, input_shape=(6, 5, 3), num_outputs=3),
    ]
    out = tmp_path_factory.mktemp("tfs-family")
    export_family(specs, out, formats=("tfs",), seed=0)
    double = TfsProtocolDouble({spec.id: out / "tfs" / spec.id for spec in specs})
    with double:
        yield TfsFamily(
            double=double,
            export_dir=out,
            specs={spec.id: spec for spec in specs},
            modules={spec.id: build_torch(spec, seed=0) for spec in specs},
        )


@pytest.fixture
def closed_port() -> str:
    """`127.0.0.1:<port>` where nothing listens (bound once, then closed): connects are refused."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """`127.0.0.1:<port>` of a socket that listens but never accepts nor answers.

    The kernel completes TCP handshakes into the backlog, so clients connect and send,
    then wait forever: what a hung server looks like from outside.
    """
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


# -- a dynamically batching Triton model, exported but not served ---------------------------


@dataclass(frozen=True)
class ExportedTritonModel:
    repository: Path  # the triton-python repository (what the local binary serves)
    name: str
    spec: Any  # model_zoo.spec.ModelSpec


@pytest.fixture(scope="session")
def triton_batching_model(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory
) -> ExportedTritonModel:
    """A small dense model whose config turns on the dynamic batcher with a 10 ms queue
    delay, so concurrent requests get merged. Not served: tests start their own servers on
    it, so the server's counters and processes belong to that test alone."""
    from model_zoo.export import PYTHON_REPOSITORY, TritonSettings, export_triton
    from model_zoo.spec import ModelSpec
    from model_zoo.torch_builder import build_torch

    spec = ModelSpec(layer_type="dense", depth=2, width=32, input_shape=(16,), num_outputs=4)
    out = tmp_path_factory.mktemp("triton-batching-export")
    settings = TritonSettings(
        max_batch_size=32, dynamic_batching=True, max_queue_delay_microseconds=10_000
    )
    export = export_triton(build_torch(spec, seed=0), spec, out, settings)
    return ExportedTritonModel(repository=out / PYTHON_REPOSITORY, name=export.name, spec=spec)


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium through Playwright (no browser download); skips, saying
    why, where Chromium is not installed. The flags keep it off the closed network."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} missing: install Debian's chromium (apt-get install -y chromium)"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# -- waiting on a condition instead of sleeping a fixed time --------------------------------


@pytest.fixture
def quick_context(tmp_path: Path) -> Any:
    """An overhead probe's quick-mode context, its scratch and overlay folders made."""
    from servebench.overhead.probes import ProbeContext

    context = ProbeContext(scratch=tmp_path / "s", overlay=tmp_path / "o", quick=True)
    context.scratch.mkdir()
    context.overlay.mkdir()
    return context


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """An aiohttp app served on a free loopback port for the block; yields the port."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


# How often `until` asks. A condition that reads a database, scans the process table or asks
# a server over HTTP passes EXPENSIVE_POLL_S: asked every 10 ms it takes a core's worth of
# CPU from the processes it waits for on this 2-core machine (one cluster test: 7.9 s of
# CPU against 5.1 s at 0.2 s), and what it waits for takes seconds anyway.
CHEAP_POLL_S = 0.01
EXPENSIVE_POLL_S = 0.2


def until(
    condition: Callable[[], object],
    timeout_s: float = 30.0,
    what: str = "",
    every_s: float = CHEAP_POLL_S,
) -> None:
    """Poll `condition` every `every_s` until it is true; fail, saying `what` was awaited,
    after `timeout_s`.

    Tests wait for what they need to see rather than sleep a fixed time and count: on a busy
    machine a fixed sleep is sometimes too short, and a generous one makes every run slow.
    The timeout only bounds a broken test; it is not a measurement.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up after {timeout_s:g} s waiting for {what}"
        time.sleep(every_s)


async def until_async(
    condition: Callable[[], object],
    timeout_s: float = 30.0,
    what: str = "",
    every_s: float = CHEAP_POLL_S,
) -> None:
    """`until` for a test running in an event loop: it sleeps with the loop running."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(every_s)
