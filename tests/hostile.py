"""Hostile invocations of every `servebench` command, generated from its own parameters.

`invocations(samples)` walks the typer command tree and, for each parameter, derives the
values a hostile (or careless) user gives from what the parameter is: a number outside its
range or not finite, a port outside 1-65535, a URL without a scheme, an output path that is
a file, a folder or under a file, an input that is missing, a folder, empty or garbage, a
result directory with a damaged file. What a parameter is comes from the value type the CLI
declares for it (`servebench.cli.values`); `guess_kind` says what its name and annotation
suggest, so that a parameter the CLI left unchecked is found (the test asserts none is).

`run_all` runs each invocation in a forked child (the parent has imported the CLI and its
heavy libraries once), with a wall-clock bound, and returns what each printed and how it
ended; `problems` says what is wrong with one outcome (empty: clean).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer.main

from servebench.cli import app, values


@dataclass(frozen=True)
class Kind:
    """What a parameter holds, as far as hostile values go."""

    name: str  # number, port, url, address, scheduler, out_file, out_dir, in_file, in_dir,
    # run_dir, scenario, choice, text (and the other kinds of servebench.cli.values)
    number: values.Number | None = None
    value: Any = None  # the declared type, if any


@dataclass
class Invocation:
    command: tuple[str, ...]
    param: str  # the option as typed (--rate) or the argument's name
    label: str  # what the hostile value is
    argv: list[str]
    names: tuple[str, ...]  # the error line must contain one of these
    lines: str = "one"  # "one": one line; "some": one or more, each an error line


@dataclass
class Outcome:
    invocation: Invocation
    exit_code: int | None  # None: killed at the time bound
    stdout: str
    stderr: str
    traceback: str | None
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@functools.cache
def root() -> Any:
    """The `servebench` command tree, built once, each parameter's parser made: typer builds
    them per invocation otherwise (a pydantic adapter each, 0.5 s for `load` alone), and the
    forked children share this one."""
    tree = typer.main.get_command(app)
    for _, command in _walk(tree, ()):
        for param in command.params:
            param.get_runtime_param()
    return tree


def commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf command of `servebench`, with its path of names."""
    yield from _walk(root(), ())


def _walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = getattr(command, "commands", None)
    if subs is None:
        yield path, command
        return
    for name, sub in sorted(subs.items()):
        yield from _walk(sub, (*path, name))


def long_name(param: Any) -> str:
    if param.param_type_name == "argument":
        return param.name
    longs = [o for o in param.opts if o.startswith("--")]
    return (longs or param.opts)[0]


def declared(param: Any) -> Any:
    """The `servebench.cli.values` type the CLI declared for `param`, if any."""
    parser = param.type_descriptor.parameter_info.parser
    return parser if isinstance(parser, values.Value) else None


_OUT_FILES = {"records", "json_out", "save_trace", "output", "out"}
_OUT_DIRS = {"results", "state_dir", "cache_dir", "run_dir", "out_dir"}
_RUN_DIRS = {"run_dir", "run_dirs", "run_a", "run_b", "resume"}
_ADDRESSES = {"to", "listen", "grpc_host"}
_URLS = {"url", "host", "leader_url", "metrics_url"}
_SCHEDULERS = {"scheduler", "leader"}


def guess_kind(command: tuple[str, ...], param: Any) -> Kind:
    """What a parameter's name and annotation say it holds (the CLI may say more)."""
    annotation = param.type_descriptor.annotation
    name = param.name
    inner = getattr(annotation, "__args__", (annotation,))[0] if param.multiple else annotation
    if inner is bool:
        return Kind("text")
    if param.type_descriptor.is_choice:
        return Kind("choice")
    if inner in (int, float):
        if "port" in name:
            return Kind("port")
        info = param.type_descriptor.parameter_info
        number = values.Number(inner, ge=info.min, le=info.max)
        return Kind("number", number)
    if "Path" in str(inner):
        if command in (("models", "generate"),) and name == "out":
            return Kind("out_file")
        if name == "out" and command in (
            ("models", "export"),
            ("overhead", "run"),
            ("cluster", "results"),
        ):
            return Kind("out_dir")
        if (name in _RUN_DIRS and param.param_type_name == "argument") or name == "resume":
            return Kind("run_dir")
        if name in ("file", "files", "scenario"):
            return Kind("scenario")
        if command == ("export",) and name == "output":
            return Kind("out_dir")
        if name in _OUT_FILES:
            return Kind("out_file")
        if name in _OUT_DIRS:
            return Kind("out_dir")
        return Kind("in_dir" if name in ("export_dir", "repository") else "in_file")
    if name in _URLS and not (command == ("cluster", "up") or command == ("cluster", "leader")):
        return Kind("url")
    if name in _ADDRESSES or (name == "host" and command[0] == "cluster"):
        return Kind("address" if name != "host" else "text")
    if name in _SCHEDULERS:
        return Kind("scheduler")
    return Kind("text")


def kind_of(command: tuple[str, ...], param: Any) -> Kind:
    value = declared(param)
    if isinstance(value, values.Number) and value.kind == "number":
        return Kind("number", value, value)
    if value is not None:
        return Kind(value.kind, value=value)
    return guess_kind(command, param)


@dataclass
class Samples:
    """Paths and files the hostile values point at (made once, read-only to the commands
    except for `fresh`, a new empty folder per invocation for their outputs)."""

    root: Path
    closed_port: int
    http_url: str  # a live HTTP endpoint that answers 200 (for `load`)
    free_ports: tuple[int, int]  # where a leader the baseline starts would listen
    run: Path = field(init=False)
    scenario: Path = field(init=False)
    spec: Path = field(init=False)
    repository: Path = field(init=False)
    onnx: Path = field(init=False)
    a_file: Path = field(init=False)
    a_dir: Path = field(init=False)
    empty_file: Path = field(init=False)
    binary_file: Path = field(init=False)
    missing: Path = field(init=False)
    damaged_runs: dict[str, Path] = field(init=False)

    def __post_init__(self) -> None:
        root = self.root
        self.a_file = root / "a-file.txt"
        self.a_file.write_text("not a folder\n")
        self.a_dir = root / "a-folder"
        self.a_dir.mkdir()
        self.empty_file = root / "empty.yaml"
        self.empty_file.write_text("")
        self.binary_file = root / "garbage.bin"
        self.binary_file.write_bytes(bytes(range(256)) * 4)
        self.missing = root / "no-such-thing"
        self.scenario = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
        self.spec = root / "spec.yaml"
        self.spec.write_text(
            "- {layer_type: dense, depth: 1, width: 8, input_shape: [4], num_outputs: 2}\n"
        )
        self.repository = root / "repository"
        (self.repository / "m").mkdir(parents=True)
        (self.repository / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
        self.onnx = root / "identity.onnx"
        self.onnx.write_bytes(_identity_onnx())
        self.run = self._run("run", _TRIALS)
        self.damaged_runs = {
            "empty trials.csv": self._run("empty-trials", ""),
            "trials.csv without trial_id": self._run("no-trial-id", "status,setting\nok,A\n"),
            "a word in a number column": self._run(
                "word-in-number", _TRIALS.replace(",0.01,", ",fast,", 1)
            ),
            "run.json a list": self._run("list-run-json", _TRIALS, run_json="[1, 2]"),
            "run.json not JSON": self._run("torn-run-json", _TRIALS, run_json='{"run_id": '),
            "run.json binary": self._run("binary-run-json", _TRIALS, run_json=b"\xff\xfe\x00"),
            "run.json fields of the wrong type": self._run(
                "typed-run-json", _TRIALS, run_json='{"run_id": ["x"], "warnings": 5}'
            ),
            "no run.json": self._run("no-run-json", _TRIALS, run_json=None),
        }

    def _run(self, name: str, trials: str, run_json: str | bytes | None = "") -> Path:
        path = self.root / "runs" / name
        path.mkdir(parents=True)
        if run_json == "":
            run_json = json.dumps({"run_id": name, "status": "complete"})
        if isinstance(run_json, bytes):
            (path / "run.json").write_bytes(run_json)
        elif run_json is not None:
            (path / "run.json").write_text(run_json)
        (path / "trials.csv").write_text(trials)
        return path

    @property
    def under_file(self) -> Path:
        """A path no one can create, root included: its parent is a file."""
        return self.a_file / "sub" / "out"

    unwritable = Path("/proc/servebench-hostile/out")  # /proc takes no new entries


_TRIALS = (
    "trial_id,status,verdict,server,setting,protocol,model,batch_size,link,load_kind,"
    "load_level,mode,achieved_rate,latency_p99,slo_percentile,slo_bound_s,instance,usd_per_hour\n"
    + "".join(
        f"t{rate},ok,VALID,triton,A,http,conv-d2-w32-abcdef,1,direct,rate,{rate},open,{rate},"
        f"{p99},99.0,0.05,c6i.xlarge,0.17\n"
        for rate, p99 in ((100, 0.01), (200, 0.02), (300, 0.03), (400, 0.06))
    )
)


def _identity_onnx() -> bytes:
    """The smallest model `models import` takes: y = x, a batch of 4 floats."""
    from onnx import TensorProto, helper

    def value(name: str):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 4])

    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph([node], "identity", [value("x")], [value("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def baselines(s: Samples) -> dict[tuple[str, ...], list[str]]:
    """A valid invocation of every command; `{tmp}` is a fresh folder per invocation.

    Each hostile value replaces one parameter of it, so the error can only be about that
    parameter. The ones that start something long-lived (a leader, a proxy, a server) would
    run until stopped: a hostile value that gets through shows up as a hang. (No path here
    holds a space: each line is split on them.)"""
    closed = f"127.0.0.1:{s.closed_port}"
    leader = "--state-dir {tmp}/state --results {tmp}/results --port"
    lines = {
        ("cluster", "cancel"): f"j1 --leader-url http://{closed}",
        ("cluster", "follower"): f"--leader tcp://{closed}",
        ("cluster", "leader"): f"--scheduler tcp://{closed} {leader} {s.free_ports[0]}",
        ("cluster", "results"): f"j1 --out {{tmp}} --leader-url http://{closed}",
        ("cluster", "simulate"): "--synthetic --jobs 20 --followers 3",
        ("cluster", "status"): f"--once --leader-url http://{closed}",
        ("cluster", "submit"): f"{s.scenario} --leader-url http://{closed}",
        ("cluster", "up"): f"{leader} {s.free_ports[1]}",
        ("export",): f"{s.run} -o {{tmp}}/export",
        ("load",): f"--url {s.http_url} --count 2 --concurrency 1",
        ("models", "check"): f"{s.repository}",
        ("models", "export"): f"{s.spec} -o {{tmp}}/export --to triton --no-check",
        ("models", "generate"): "-o {tmp}/family.yaml",
        ("models", "import"): f"{s.onnx} --out {{tmp}}/imported --to triton",
        ("models", "list"): f"{s.spec}",
        ("models", "serve"): f"{s.repository} --once",
        ("netem", "check"): "lan --duration 0.1 --pings 4",
        ("netem", "profiles"): "",
        ("netem", "proxy"): f"--profile lan --to {closed}",
        (
            "overhead",
            "run",
        ): "--host-only --quick --probes stream --repeats 1 --out {tmp} --no-report",
        ("recommend",): f"{s.run} --qps 100",
        ("report", "compare"): f"{s.run} {s.run}",
        ("report", "host-peak"): "--cache-dir {tmp}",
        ("report", "html"): f"{s.run} -o {{tmp}}/report.html",
        ("scenario", "plan"): f"{s.scenario}",
        ("scenario", "run"): f"{s.scenario} --output {{tmp}}",
        ("scenario", "validate"): f"{s.scenario}",
        ("ui",): f"--host {s.http_url} --model m --headless -t 1s --results {{tmp}}",
    }
    return {command: line.split() for command, line in lines.items()}


# Options of a baseline that a hostile value of another option would conflict with, for
# reasons that have nothing to do with the value (two kinds of load at once).
_OPEN_LOOP = {"--rate", "--request-intervals", "--load-schedule", "--load-start", "--load-step",
              "--load-end", "--load-step-duration", "--poisson"}  # fmt: skip
_STABILITY = ("--window", "--stability-percentage", "--percentile", "--max-windows")
_DROP = {
    ("load",): {
        **{name: ("--concurrency",) for name in _OPEN_LOOP},
        **{name: ("--count",) for name in (*_STABILITY, "--stability")},
    }
}


def _schedule(kind: str) -> list[str]:
    return f"--load-schedule {kind} --load-start 1 --load-step 1 --load-end 2".split()


# What a hostile value needs beside it to be read at all (a schedule's numbers are read
# only with --load-schedule; stability settings only with --stability).
_WITH = {
    ("load",): {
        **{f"--load-{n}": _schedule("line") for n in ("start", "step", "end")},
        "--load-step-duration": _schedule("step"),
        **{n: ["--stability"] for n in _STABILITY},
    },
}


def _numbers(number: values.Number) -> list[tuple[str, str]]:
    """Values just outside a number's range, and the ones that are no number at all."""
    found = []
    if number.low is not None:
        below = number.low - (1 if number.integer else max(abs(number.low) * 1e-3, 1e-9))
        if number.low_open:
            below = number.low
        found.append((f"below {number.low:g}", _text(below, number.integer)))
    else:
        found.append(("-1", "-1"))
    if number.high is not None:
        above = number.high + (1 if number.integer else max(abs(number.high) * 1e-3, 1e-9))
        if number.high_open:
            above = number.high
        found.append((f"above {number.high:g}", _text(above, number.integer)))
    else:
        found.append(("huge", "1000000000000" if number.integer else "1e308"))
    if not number.integer:
        found += [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf")]
    found.append(("not a number", "ten"))
    return found


def _text(value: float, integer: bool) -> str:
    return str(int(value)) if integer else repr(float(value))


def hostile_values(kind: Kind, s: Samples) -> list[tuple[str, str]]:
    """(label, value) pairs for one kind of parameter."""
    if kind.name == "number":
        assert kind.number is not None
        return _numbers(kind.number)
    if kind.name == "port":
        return [("port -1", "-1"), ("port 65536", "65536"), ("not a number", "http")]
    if kind.name == "url":
        return [
            ("no scheme", f"127.0.0.1:{s.closed_port}"),
            ("no host", "http://"),
            ("another scheme", f"ftp://127.0.0.1:{s.closed_port}"),
            ("port 65536", "http://127.0.0.1:65536"),
        ]
    if kind.name == "address":
        return [("no port", "127.0.0.1"), ("port 65536", "127.0.0.1:65536"),
                ("a URL", "http://127.0.0.1:8000/")]  # fmt: skip
    if kind.name == "host":
        return [("a URL", "http://127.0.0.1/"), ("with a port", "127.0.0.1:80"),
                ("spaces", "no such host")]  # fmt: skip
    if kind.name == "endpoint":
        return [("no host", "http://"), ("another scheme", f"ftp://127.0.0.1:{s.closed_port}"),
                ("port 65536", "http://127.0.0.1:65536")]  # fmt: skip
    if kind.name == "scheduler":
        return [
            ("no scheme", f"127.0.0.1:{s.closed_port}"),
            ("port 65536", "tcp://127.0.0.1:65536"),
        ]
    if kind.name == "out_file":
        return [("a folder", str(s.a_dir)), ("under a file", str(s.under_file)),
                ("unwritable", str(s.unwritable))]  # fmt: skip
    if kind.name == "out_dir":
        return [("a file", str(s.a_file)), ("under a file", str(s.under_file)),
                ("unwritable", str(s.unwritable))]  # fmt: skip
    if kind.name == "out_path":
        return [("under a file", str(s.under_file)), ("unwritable", str(s.unwritable))]
    if kind.name == "in_path":
        return [("missing", str(s.missing)), ("binary", str(s.binary_file)),
                ("empty folder", str(s.a_dir))]  # fmt: skip
    if kind.name == "timespan":
        return [("not a duration", "soon"), ("zero", "0s"), ("negative", "-5s"),
                ("a year", "8760h")]  # fmt: skip
    if kind.name == "in_file":
        found = [("missing", str(s.missing)), ("a folder", str(s.a_dir))]
        text = kind.value is None or getattr(kind.value, "text", True)
        return found + ([("binary", str(s.binary_file))] if text else [])
    if kind.name == "in_dir":
        return [("missing", str(s.missing)), ("a file", str(s.a_file)),
                ("empty folder", str(s.a_dir))]  # fmt: skip
    if kind.name == "scenario":
        return [("missing", str(s.missing)), ("a folder", str(s.a_dir)),
                ("empty", str(s.empty_file)), ("binary", str(s.binary_file))]  # fmt: skip
    if kind.name == "run_dir":
        return [("missing", str(s.missing)), ("a file", str(s.a_file)),
                ("empty folder", str(s.a_dir))] + [
            (label, str(path)) for label, path in s.damaged_runs.items()
        ]  # fmt: skip
    if kind.name == "choice":
        return [("not a choice", "nope")]
    return []


def invocations(s: Samples) -> list[Invocation]:
    base = baselines(s)
    found = []
    for path, command in commands():
        assert path in base, f"servebench {' '.join(path)}: no baseline invocation in the test"
        args = base[path]
        for param in command.params:
            if param.name in ("help",) or param.hidden:
                continue
            kind = kind_of(path, param)
            name = long_name(param)
            for label, value in hostile_values(kind, s):
                argv = _replace(path, command, args, param, value)
                # The option, or the value it names (a file's path, say).
                names = (name, value) if kind.name not in ("number", "port") else (name,)
                lines = "some" if kind.name == "scenario" and "binary" not in label else "one"
                found.append(Invocation(path, name, label, [*path, *argv], names, lines))
    return found


def _replace(
    path: tuple[str, ...], command: Any, args: list[str], param: Any, value: str
) -> list[str]:
    """The baseline with `param` given `value`. A baseline lists its positional values
    first, in order; an argument it leaves out (optional) is put in front."""
    args = list(args)
    if param.param_type_name == "argument":
        position = [p.name for p in command.params if p.param_type_name == "argument"]
        index = position.index(param.name)
        given = 0
        while given < len(args) and not args[given].startswith("-"):
            given += 1
        if index < given:
            args[index] = value
        else:
            args.insert(index, value)
        return args
    name = long_name(param)
    for drop in _DROP.get(path, {}).get(name, ()):
        _remove(args, drop)
    for opt in param.opts:
        _remove(args, opt)
    wanted, extra, i = _WITH.get(path, {}).get(name, []), [], 0
    while i < len(wanted):
        width = 1 if wanted[i] in _FLAGS else 2
        if wanted[i] != name:
            _remove(args, wanted[i])
            extra += wanted[i : i + width]
        i += width
    return [*args, *extra, name, value]


def _remove(args: list[str], option: str) -> None:
    """Take `option` (and its value, unless it is a flag) out of `args`."""
    if option in args:
        i = args.index(option)
        del args[i : i + (1 if option in _FLAGS else 2)]


_FLAGS = {"--once", "--synthetic", "--headless", "--host-only", "--quick", "--no-report",
          "--no-check", "--stability", "--poisson"}  # fmt: skip


# -- running them ---------------------------------------------------------------------------


def run_all(
    todo: list[Invocation], samples: Samples, *, timeout_s: float, jobs: int
) -> list[Outcome]:
    """Each invocation in a forked child of this process, `jobs` at a time, killed (with its
    process group) at `timeout_s`."""
    results: list[Outcome | None] = [None] * len(todo)
    pending = list(enumerate(todo))
    running: dict[int, tuple[int, float, Path]] = {}  # pid -> (index, started, result file)
    scratch = Path(tempfile.mkdtemp(prefix="hostile-", dir=samples.root))
    while pending or running:
        while pending and len(running) < jobs:
            index, invocation = pending.pop(0)
            fresh = scratch / f"tmp{index}"
            fresh.mkdir()
            out = scratch / f"out{index}.json"
            argv = [a.replace("{tmp}", str(fresh)) for a in invocation.argv]
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _child(argv, out)
            running[pid] = (index, time.monotonic(), out)
        time.sleep(0.01)
        for pid, (index, started, out) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            elapsed = time.monotonic() - started
            if done == 0 and elapsed < timeout_s:
                continue
            if done == 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                data = _read(out)
                results[index] = Outcome(
                    todo[index], None, data.get("stdout", ""), data.get("stderr", ""), None, elapsed
                )
            else:
                data = _read(out)
                code = data.get("exit_code")
                if code is None:
                    code = os.waitstatus_to_exitcode(status)
                results[index] = Outcome(
                    todo[index], code, data.get("stdout", ""), data.get("stderr", ""),
                    data.get("traceback"), elapsed,
                )  # fmt: skip
            del running[pid]
    return [r for r in results if r is not None]


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


_MEMORY_BYTES = 8 << 30  # a runaway allocation fails instead of taking the machine


def _child(argv: list[str], out: Path) -> None:
    """Run `servebench ARGV` as the entry point does (stdout and stderr apart), write what
    happened to `out`, and leave without running the parent's cleanup."""
    from typer.testing import CliRunner

    code, tb = 1, None
    try:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_BYTES, _MEMORY_BYTES))
        with CliRunner().isolation(env={"COLUMNS": "200"}) as (stdout, stderr, _):
            try:
                root().main(args=argv, prog_name="servebench")
                exit_code = 0
            except SystemExit as exc:
                exit_code = exc.code if isinstance(exc.code, int) else 1
            except Exception:  # a traceback is what the test looks for
                exit_code, tb = 1, traceback.format_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                printed = [s.getvalue().decode(errors="replace") for s in (stdout, stderr)]
        result = {"exit_code": exit_code, "traceback": tb,
                  "stdout": printed[0], "stderr": printed[1]}  # fmt: skip
        out.write_text(json.dumps(result))
        code = 0
    except BaseException:  # the parent reads what happened
        with open(out, "w") as handle:
            json.dump({"exit_code": None, "traceback": traceback.format_exc()}, handle)
    finally:
        os._exit(code)


def problems(outcome: Outcome, timeout_s: float) -> list[str]:
    """What is wrong with one outcome; empty when it is a clean refusal."""
    inv = outcome.invocation
    found = []
    if outcome.exit_code is None:
        return [f"no answer within {timeout_s:g} s (a hang)"]
    if outcome.traceback or "Traceback" in outcome.output:
        found.append("traceback")
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    if outcome.exit_code == 0:
        found.append("exit 0")
    elif outcome.exit_code != 2:
        found.append(f"exit {outcome.exit_code}")
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("error: ")]
    if not errors:
        found.append("no 'error:' line on stderr")
    elif inv.lines == "one" and len(lines) != 1:
        found.append(f"{len(lines)} lines")
    elif inv.lines == "some" and len(errors) != len(lines):
        found.append("lines other than errors")
    if errors and not any(name in errors[0] for name in inv.names):
        found.append("the error names none of " + ", ".join(repr(n) for n in inv.names))
    for bad in ("nan", "inf"):
        if any(_word(line, bad) for line in lines) and not inv.label.endswith(bad):
            found.append(f"prints {bad}")
    return found


def _word(line: str, word: str) -> bool:
    import re

    return re.search(rf"(?<![\w.-]){word}(?![\w-])", line.lower()) is not None


def describe(outcome: Outcome, timeout_s: float) -> str:
    inv = outcome.invocation
    text = " ".join(inv.argv)
    what = ", ".join(problems(outcome, timeout_s)) or "clean"
    first = (outcome.output.strip().splitlines() or [""])[0][:160]
    return f"servebench {text}\n    [{inv.label}] {what}: {first}"
