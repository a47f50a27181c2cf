"""What the tests that act on a running trial share: finding the Triton a run started, and
waiting until that server has answered requests, instead of sleeping "well inside" a trial.

A test that kills a server or interrupts a run mid-trial needs the trial to be measuring at
that moment. A fixed sleep after the trial's records file appears assumes how long the
set-up between the two takes (link emulator, client connect, warm-up), which a loaded
machine stretches past any sleep. The server's own success counter says it: once it has
grown by more than the requests the warm-up sends, measured requests have been answered.
Triton counts a request once its answer has left (servebench.telemetry.prometheus,
`wait_until_quiet`), so an answer counted here is already on its way to the client.
"""

from __future__ import annotations

import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
from conftest import until

from servebench.common.wellknown import TRITON_METRICS_PORT
from servebench.telemetry.prometheus import TRITON_PREFIXES, parse_metrics

SUCCESS = "nv_inference_request_success"


def tritonservers(under: Path) -> list[psutil.Process]:
    """Live tritonserver processes below this one serving a repository below `under` (a
    test's own; other tests' session-scoped servers must be left alone)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if (
                process.name() == "tritonserver"
                and process.status() != psutil.STATUS_ZOMBIE
                and str(under) in " ".join(process.cmdline())
            ):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def metrics_url(process: psutil.Process) -> str:
    """The metrics page of a local tritonserver, from its command line."""
    (flag,) = [a for a in process.cmdline() if a.startswith("--metrics-port=")]
    return f"http://127.0.0.1:{flag.split('=', 1)[1]}/metrics"


def container_metrics_url(container) -> str:  # docker.models.containers.Container
    """The loopback metrics page a Triton container publishes (its port 8002)."""
    container.reload()
    (published,) = container.ports[f"{TRITON_METRICS_PORT}/tcp"]
    return f"http://127.0.0.1:{published['HostPort']}/metrics"


def answered(url: str) -> int:
    """Requests the server has answered successfully, all models together; 0 while its
    page cannot be read (not up yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            page = response.read().decode()
    except (OSError, urllib.error.URLError):
        return 0
    return int(sum(r.value for r in parse_metrics(page, TRITON_PREFIXES) if r.metric == SUCCESS))


def wait_for_answers(url: str, count: int, what: str, timeout_s: float = 120.0) -> None:
    """Wait until the server at `url` has answered `count` requests in all."""
    until(lambda: answered(url) >= count, timeout_s, what)


# Measured answers a test waits for before it acts mid-trial: enough that some were
# received and recorded by the client well before (each answer is counted as it leaves).
MEASURED_FIRST = 10


def wait_for_a_trial(
    results: Path, run: subprocess.Popen | None = None, timeout_s: float = 240.0
) -> None:
    """Wait until a run writing below `results` has begun a trial: its records file exists
    (the load starts right after; the server's cold-start probes are done). A `run` in a
    subprocess that exits meanwhile fails the wait with its output."""

    def begun() -> bool:
        if run is not None and run.poll() is not None:
            output = run.communicate()[0] if run.stdout else ""
            raise AssertionError(f"the run exited ({run.returncode}) before a trial:\n{output}")
        return bool(list(results.glob("*/records/*.parquet")))

    until(begun, timeout_s, "a trial to begin")


def wait_for_measured_answers(url: str, warmup_requests: int) -> None:
    """Called once a trial has begun (`wait_for_a_trial`): wait until the server at `url`
    has answered MEASURED_FIRST more requests than the trial's warm-up sends."""
    before = answered(url)  # the cold-start probes' requests, from before the trial
    wait_for_answers(url, before + warmup_requests + MEASURED_FIRST, "measured answers")


class Background:
    """Runs `action` in a thread beside the code under test (which runs in the test's own
    thread); `join` waits for it and raises what it raised, so a failed wait in the thread
    fails the test with its own message."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(action,), daemon=True)
        self._thread.start()

    def _run(self, action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:  # handed to the test's thread by join
            self._error = exc

    def join(self, timeout_s: float = 30.0) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the background action still runs after {timeout_s} s"
        if self._error is not None:
            raise self._error


class StubHandler(BaseHTTPRequestHandler):
    """A handler for the tests' small HTTP stand-ins: reads the body it is sent (so the
    client's send completes), answers with `reply` and keeps the test output clean."""

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(self, status: int, body: bytes, content_type: str | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_stub(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served on a free loopback port from a thread; yields http://127.0.0.1:PORT."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# -- python-backend test models (Triton's stub runs them; no export needed) -------------------


def scaling_model(scale: int) -> str:
    """The `model.py` of a python-backend model answering each request's float32 `x` with
    `y = scale * x`: the smallest model whose answers a test can predict exactly."""
    return f"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "x").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", {scale} * x)]) for x in inputs]
"""


def python_config(max_batch_size: int, input_size: int, output_size: int) -> str:
    """The `config.pbtxt` of a python-backend model with one float32 input `x` of
    `input_size` and one float32 output `y` of `output_size` per sample."""
    return f"""
backend: "python"
max_batch_size: {max_batch_size}
input {{ name: "x" data_type: TYPE_FP32 dims: [ {input_size} ] }}
output {{ name: "y" data_type: TYPE_FP32 dims: [ {output_size} ] }}
"""


def write_python_model(folder: Path, code: str, config: str) -> None:
    """A Triton model folder: `code` as version 1's `model.py`, `config` as its config."""
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(code)
    (folder / "config.pbtxt").write_text(config)
