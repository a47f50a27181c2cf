"""Locust as a child process on this package's locustfile: its command line, the run it
writes, and the process itself (what `servebench ui` runs once its server is up).

Locust runs as a subprocess (`python -m locust -f servebench/locust/locustfile.py ...`),
not as a library in the launching process, because:
- importing Locust monkey-patches sockets, threads and subprocesses with gevent, and the
  launcher exports models with torch / ONNX / TensorFlow and supervises tritonserver,
  none of which should run on a patched standard library;
- the child is exactly `locust -f`, so every Locust option passes through unchanged
  (`servebench ui scenario.yaml -- --processes 2 --csv out`), and the results come from
  the same hooks as any `locust -f` run of servebench's users.

This module imports no Locust. The child gets its own session, so a Ctrl-C here reaches it
once, forwarded: Locust then stops the swarm, writes the results and exits, and the
launcher stops the server it started after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.clients.registry import PROTOCOLS as REGISTRY
from servebench.common.errors import ServebenchError
from servebench.common.ports import LOOPBACK, bind_error, free_ports, port_accepts
from servebench.locust.results import check_run_id
from servebench.locust.settings import DEFAULT_PROTOCOL
from servebench.results import RUN_FILE, RunDirectory, new_run_id, read_run_json, unused_run_id

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
UI_START_TIMEOUT_S = 60.0


class LaunchError(ServebenchError):
    """`servebench ui` cannot start; the message says which input and why."""


@dataclass
class Target:
    """Where the users send and what: the values the Locust options start with."""

    host: str = ""
    grpc_host: str = ""
    model: str = ""  # one model's name, or a mix's id (`settings.mix_members`)
    version: str = ""
    protocol: str = DEFAULT_PROTOCOL
    batch_size: int = 1
    link: str = "direct"
    input_data: str = ""  # a file of samples the users send; "" for a random payload
    seed: int = 0  # a mix's draw of models (the scenario's seed)


@dataclass(frozen=True)
class Session:
    """One Locust process to run: its run directory, its web UI port (None: headless), its
    users and the options passed through to Locust."""

    results_dir: Path
    run_id: str
    ui_port: int | None
    users: int
    spawn_rate: float
    run_time: str | None
    extra: list[str]

    @property
    def run_path(self) -> Path:
        return self.results_dir / self.run_id


def plan_session(
    results_dir: Path,
    run_prefix: str,
    *,
    port: int | None,
    headless: bool,
    users: int,
    spawn_rate: float | None,
    run_time: str | None,
    extra: list[str],
) -> Session:
    """The session the options ask for, checked before anything starts: a `--run-id` after
    `--` names a folder not yet there, a web UI port given is free (LaunchError if not)."""
    given, extra = own_options(extra)
    results = Path(results_dir)
    if given and (results / given).exists():
        raise LaunchError(f"--run-id {given}: {results / given} exists; choose another name")
    run_id = given or unused_run_id(results, new_run_id(run_prefix))
    if port is not None and not headless:
        check_port_free(port)
    ui_port = None if headless else (port or free_ports(1)[0])
    return Session(results, run_id, ui_port, users, spawn_rate or users, run_time, extra)


def run_session(
    session: Session,
    target: Target,
    *,
    scenario: Path | None,
    trial_facts: Path | None,
    say: Callable[[str], None],
) -> int:
    """Run Locust for `target` until it exits; its exit code."""
    argv = locust_argv(
        target,
        results_dir=session.results_dir,
        run_id=session.run_id,
        scenario=scenario,
        port=session.ui_port or 0,
        headless=session.ui_port is None,
        users=session.users,
        spawn_rate=session.spawn_rate,
        run_time=session.run_time,
        extra=session.extra,
        trial_facts=trial_facts,
    )
    grpc = REGISTRY[target.protocol].transport == "grpc"
    address = target.grpc_host or target.host if grpc else target.host
    data = f", input data {target.input_data}" if target.input_data else ""
    say(
        f"Locust users: {target.protocol} to {address}, model {target.model}, "
        f"batch {target.batch_size}, link {target.link}{data}; results: {session.run_path}"
    )
    return run_locust(argv, port=session.ui_port, say=say)


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
        "--seed", str(target.seed),
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
