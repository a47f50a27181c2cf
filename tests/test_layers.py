"""The layers DESIGN.md draws, kept by the code: no package imports one above it, no
module reaches itself through its imports (an import circle), and every error servebench
raises on purpose derives from `ServebenchError`.

Read from the source (ast), so a lazy import inside a function counts as much as one at the
top of a module: it is the same dependency, only paid later. An import under
`if TYPE_CHECKING:` counts too: it never runs, but the module still names the other's
types, so a circle through it is a circle of the design (two modules that each need the
other), only hidden from the interpreter.

A package's `__init__` is a module of its own (`servebench.load`), with the imports it
writes; importing `servebench.load.in_process` runs that `__init__` first, but that implicit
step is no edge here (a package whose `__init__` gathers its modules would otherwise be a
circle with each of them). Imports by a name in a string (`importlib.import_module`: the
protocol registry, `servebench.load`'s lazy names) are not seen.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What each layer may import besides itself (docs/architecture.md, "Layers"). `common` is
# the bottom: every layer may take it, and it takes nothing.
BOTTOM = {"common"}
# Everything the scenario runner builds on; the application packages take it and the runner.
UNDER_SCENARIO = {
    "clients", "netem", "load", "telemetry", "servers", "model_zoo", "results", "pricing",
    "trial_row", "setting_row",
}  # fmt: skip
MAY_IMPORT: dict[str, set[str]] = {
    "common": set(),
    "results": BOTTOM,
    "pricing": BOTTOM,
    "clients": BOTTOM,
    "netem": BOTTOM,
    "telemetry": BOTTOM | {"results"},
    "load": BOTTOM | {"clients", "results"},
    "model_zoo": BOTTOM,
    "servers": BOTTOM | {"model_zoo", "results", "telemetry"},
    # The one trial-row builder: what a load, its telemetry, its link and its price say.
    "trial_row": BOTTOM | {"load", "netem", "telemetry", "pricing", "results"},
    # The one setting-row builder: a setting's replicates (trial rows) side by side.
    "setting_row": BOTTOM | {"results"},
    "locust": BOTTOM | {"clients", "netem", "load", "results", "pricing", "trial_row"},
    # telemetry: its one reduction of a telemetry file's counters (a search step's share).
    "analysis": BOTTOM | {"results", "pricing", "telemetry"},
    "scenario": BOTTOM | UNDER_SCENARIO,
    "overhead": BOTTOM | UNDER_SCENARIO | {"scenario", "servebench"},
    "cluster": BOTTOM | UNDER_SCENARIO | {"scenario"},
}


def _layer(module: str) -> str | None:
    """The layer a dotted module name belongs to; None outside the project."""
    parts = module.split(".")
    if parts[0] == "model_zoo":
        return "model_zoo"
    if parts[0] != "servebench":
        return None
    return parts[1] if len(parts) > 1 else "servebench"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _sources(root: Path = ROOT) -> list[Path]:
    return sorted([*(root / "servebench").rglob("*.py"), *(root / "model_zoo").rglob("*.py")])


def _module_of(path: Path, root: Path = ROOT) -> str:
    """The dotted name a source file imports as (a package: its `__init__`)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_layer_imports_one_above_it() -> None:
    wrong = []
    for path in _sources():
        here = _layer(_module_of(path))
        if here in ("cli", "servebench") or here not in MAY_IMPORT:
            assert here in ("cli", "servebench"), f"{path}: layer {here!r} is not in MAY_IMPORT"
            continue
        for name in _imports(path):
            there = _layer(name)
            if there is None or there == here or there in MAY_IMPORT[here]:
                continue
            if there not in MAY_IMPORT and name.count(".") > 1:
                continue  # `from servebench.x import name`: the module itself is checked
            wrong.append(f"{path.relative_to(ROOT)}: {here} imports {name}")
    assert not wrong, "\n".join(wrong)


def _import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of the project under `root` and the project modules it imports anywhere
    in its source (`from package import name` is the module `package.name` where there is
    one, else `package`)."""
    paths = {_module_of(path, root): path for path in _sources(root)}

    def module(name: str) -> str | None:  # the project module `name` is, or lies in
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {module(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    inner = f"{node.module}.{alias.name}"
                    found.add(inner if inner in paths else module(node.module))
        graph[name] = {m for m in found if m is not None and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of `graph`, as one shortest path from a module back to itself (the first
    of its members, by name); one per group of modules that reach one another."""
    reach = {start: _reachable(graph, start) for start in graph}
    groups = {
        frozenset({m, *(n for n in reach[m] if m in reach[n])}) for m in graph if m in reach[m]
    }
    return sorted(_shortest_loop(graph, min(group)) for group in groups)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def _shortest_loop(graph: dict[str, set[str]], start: str) -> list[str]:
    """start -> ... -> start, breadth first."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for name in frontier:
            for there in sorted(graph.get(name, ())):
                if there == start:
                    path = [name]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if there not in came_from:
                    came_from[there] = name
                    following.append(there)
        frontier = following
    raise AssertionError(f"{start} does not reach itself")


def test_no_import_circle() -> None:
    circles = _circles(_import_graph())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_a_circle_through_a_lazy_or_type_checking_import_is_found(tmp_path: Path) -> None:
    """The check sees what it must: an import inside a function and one under
    TYPE_CHECKING close a circle; implicit parent packages do not."""
    package = tmp_path / "servebench" / "part"
    package.mkdir(parents=True)
    (tmp_path / "servebench" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from servebench.part.low import X\n")
    (package / "low.py").write_text("X = 1\n")
    (package / "a.py").write_text("def f():\n    from servebench.part import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import servebench.part.a\n"
    )
    (package / "c.py").write_text("import servebench.part.low\n")
    assert _circles(_import_graph(tmp_path)) == [
        ["servebench.part.a", "servebench.part.b", "servebench.part.a"]
    ]


# Run in child processes: Locust's gevent patches the socket and selectors modules of the
# process that imports it, so the Locust adapter's modules are walked in a process of their
# own (as Locust runs them) and everything else in another.
_FIND_STRAY_ERRORS = """
import sys
LOCUST = sys.argv[1] == "locust"
if LOCUST:
    import locust  # first, as in a Locust process: it patches before anything else loads
import importlib, inspect, pkgutil
import model_zoo, servebench
from servebench.common.errors import ServebenchError
names, stray = [], []
for package in (servebench, model_zoo):
    names.append(package.__name__)
    names += [i.name for i in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
# __main__ runs the command; the Triton model runs inside Triton's python backend only.
SKIP = {"model_zoo.export.triton_python_model"}
seen = 0
for name in names:
    if name in SKIP or name.endswith(".__main__") or name.startswith("servebench.locust") != LOCUST:
        continue
    seen += 1
    module = importlib.import_module(name)
    for _, value in inspect.getmembers(module, inspect.isclass):
        if issubclass(value, BaseException) and value.__module__ == name:
            if value.__name__.startswith("_"):
                continue
            if not issubclass(value, ServebenchError):
                stray.append(name + "." + value.__name__)
print(seen)
print(" ".join(stray))
"""


@pytest.mark.parametrize("part", ["locust", "the rest"])
def test_every_error_of_the_project_is_a_servebench_error(part: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FIND_STRAY_ERRORS, part],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen, stray = [*done.stdout.splitlines(), "", ""][:2]
    assert int(seen) > (5 if part == "locust" else 100)  # modules walked
    assert not stray, f"not derived from ServebenchError: {stray}"


def test_reading_and_running_a_scenario_does_not_import_torch() -> None:
    """torch takes 3 s or more to import: validating a scenario, planning it and starting
    its runner must not pay that (exporting a generated model does, when it runs)."""
    code = (
        "import sys\n"
        "import servebench.cli.scenario, servebench.scenario.validate, servebench.scenario.runner\n"
        "print(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
