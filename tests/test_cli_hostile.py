"""Every command, driven as a hostile user would: one clear line, exit 2, no traceback, in
bounded time.

The invocations are generated from the CLI itself (tests/hostile.py): each parameter of
each command gets the values just outside what its declared type allows (numbers out of
range or not finite, ports outside 1-65535, URLs without a scheme or host, output paths
that are a folder, under a file or unwritable, inputs that are missing, a folder, empty or
garbage, result directories with a damaged file), one at a time, on top of an invocation
that is otherwise valid. Each runs in a forked child of this process with a time bound, so
a hang is a failure, not a stuck suite.
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import hostile
import pytest
from hostile import (
    Samples,
    commands,
    declared,
    describe,
    guess_kind,
    invocations,
    long_name,
    problems,
    run_all,
)
from server_checks import StubHandler, http_stub

_PRELOAD = (
    "pandas", "pyarrow.parquet", "servebench.analysis.compare", "servebench.analysis.export",
    "servebench.analysis.recommend", "servebench.analysis.report", "servebench.clients.probe",
    "servebench.cli.ui_launcher", "servebench.clients.factory", "servebench.cluster.simulate",
    "servebench.load", "servebench.scenario.runner", "servebench.scenario.validate",
)  # fmt: skip
TIMEOUT_S = float(os.environ.get("SERVEBENCH_HOSTILE_TIMEOUT", 30))
JOBS = int(os.environ.get("SERVEBENCH_HOSTILE_JOBS", 2))


class _Ok(StubHandler):
    """Answers every request 200 with a small JSON body (a server `load` can measure)."""

    def _answer(self) -> None:
        self.read_body()
        self.reply(200, b'{"ok": true}', "application/json")

    do_GET = do_POST = _answer  # http.server's names for them


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_stub(_Ok) as url:
        yield f"{url}/infer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory, http_url: str) -> Samples:
    # What the commands import inside their bodies, imported once here so that each
    # forked child starts with it (the children stay fast).
    for module in _PRELOAD:
        importlib.import_module(module)
    hostile.root()
    root = tmp_path_factory.mktemp("hostile")
    return Samples(root, _free_port(), http_url, (_free_port(), _free_port()))


def test_every_value_parameter_declares_its_type() -> None:
    """Each number, port, address and path names the type that checks it (servebench.cli.
    values): what a parameter's name and annotation suggest it holds is not left to the
    command body to check, or not to check."""
    loose = []
    for path, command in commands():
        for param in command.params:
            guessed = guess_kind(path, param).name
            if guessed in ("text", "choice") or declared(param) is not None:
                continue
            loose.append(f"servebench {' '.join(path)} {long_name(param)} ({guessed})")
    assert not loose, "parameters without a checked type:\n" + "\n".join(loose)


def test_every_command_refuses_hostile_values_in_one_line(samples: Samples) -> None:
    todo = invocations(samples)
    outcomes = run_all(todo, samples, timeout_s=TIMEOUT_S, jobs=JOBS)
    bad = [o for o in outcomes if problems(o, TIMEOUT_S)]
    commands_seen = {o.invocation.command for o in outcomes}
    print(f"{len(outcomes)} hostile invocations over {len(commands_seen)} commands: "
          f"{len(outcomes) - len(bad)} clean, {len(bad)} not")  # fmt: skip
    report = os.environ.get("SERVEBENCH_HOSTILE_REPORT")
    if report:
        Path(report).write_text("\n".join(describe(o, TIMEOUT_S) for o in outcomes) + "\n")
    assert len(outcomes) == len(todo)
    assert not bad, "\n".join(describe(o, TIMEOUT_S) for o in bad[:60])


ENTRY_POINT_CASES = [
    (["load", "--url", "{url}", "--rate", "1e12"], "--rate"),
    (["recommend", "{run}", "--qps", "nan"], "--qps"),
    (["cluster", "status", "--once", "--leader-url", "127.0.0.1:1"], "--leader-url"),
    (["report", "html", "{missing}"], "{missing}"),
]


@pytest.mark.parametrize(("args", "named"), ENTRY_POINT_CASES)
def test_the_entry_point_prints_one_line_on_stderr(samples: Samples, args, named) -> None:
    """Through the installed command itself (a process of its own): the line is on stderr
    and nothing is on stdout."""
    fill = {"url": samples.http_url, "run": str(samples.run), "missing": str(samples.missing)}
    args = [a.format(**fill) for a in args]
    result = subprocess.run(
        [sys.executable, "-m", "servebench.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and named.format(**fill) in line, line
