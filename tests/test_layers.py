"""The layers DESIGN.md draws, kept by the code: no package imports one above it, and every
error servebench raises on purpose derives from `ServebenchError`.

Read from the source (ast), so a lazy import inside a function counts as much as one at the
top of a module: it is the same dependency, only paid later.
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


def _sources() -> list[Path]:
    return sorted([*(ROOT / "servebench").rglob("*.py"), *(ROOT / "model_zoo").rglob("*.py")])


def test_no_layer_imports_one_above_it() -> None:
    wrong = []
    for path in _sources():
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = _layer(module)
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
