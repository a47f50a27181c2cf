"""One percentile in servebench: every quantile comes from `servebench.common.quantiles`.

Read from the source (ast): a call of numpy's, pandas' or `statistics`' percentile and
quantile functions anywhere else in servebench/ fails, and so does a function of its own
named like one (a hand-rolled interpolation is a second definition too). Medians stay what
they say (`np.median`, `statistics.median`: the middle value, or the mean of the middle
two): they are named as medians, and no latency percentile column is one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from servebench.common.quantiles import percentile, percentiles

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "servebench" / "common" / "quantiles.py"
# numpy.percentile/quantile/nanpercentile/nanquantile, pandas' Series.quantile,
# statistics.quantiles: called as attributes (np.percentile, frame.quantile, ...).
FOREIGN = {"percentile", "quantile", "nanpercentile", "nanquantile", "quantiles"}
OWN_NAME = re.compile(r"_*(nan)?(percentile|quantile)s?", re.IGNORECASE)


def _other_percentiles(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in FOREIGN:
                found.append(f"{where}: .{node.func.attr}(...)")
        elif isinstance(node, ast.ImportFrom) and node.module in ("numpy", "statistics", "pandas"):
            found += [
                f"{where}: from {node.module} import {a.name}"
                for a in node.names
                if a.name in FOREIGN
            ]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and OWN_NAME.fullmatch(
            node.name
        ):
            found.append(f"{where}: def {node.name}")
    return found


def test_no_percentile_is_computed_outside_the_one_module() -> None:
    sources = [p for p in sorted((ROOT / "servebench").rglob("*.py")) if p != HOME]
    assert len(sources) > 100
    found = [hit for path in sources for hit in _other_percentiles(path)]
    assert not found, "compute it with servebench.common.quantiles:\n" + "\n".join(found)


def test_the_guard_sees_what_it_forbids(tmp_path: Path) -> None:
    probe = tmp_path / "x.py"
    probe.write_text(
        "import numpy as np\nimport statistics\nfrom numpy import quantile\n"
        "a = np.percentile([1], 50)\nb = frame['x'].quantile(0.9)\n"
        "c = statistics.quantiles([1, 2], n=4)\n"
        "def _percentile(values, q):\n    return 0\n"
        "d = np.median([1])\ne = slo.percentile\nf = percentile([1], 50)\n"
    )
    hits = sorted(_other_percentiles(probe, tmp_path), key=lambda h: int(h.split(":")[1]))
    assert [h.split(": ", 1)[1] for h in hits] == [
        "from numpy import quantile", ".percentile(...)", ".quantile(...)", ".quantiles(...)",
        "def _percentile",
    ]  # fmt: skip


def test_nearest_rank_is_an_observed_value() -> None:
    values = np.arange(1.0, 101.0)  # 1 … 100
    assert percentile(values, 50) == 50.0  # rank ceil(0.5 × 100) = 50
    assert percentile(values, 99) == 99.0
    assert percentile(values, 99.5) == 100.0
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 100.0
    assert percentile(values[:4], 95) == 4.0  # ceil(3.8) = 4: never between two values
    assert np.isnan(percentile([], 50))


@pytest.mark.parametrize("shape", [(7,), (3, 11)])
def test_the_vector_form_is_the_scalar_form(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(0).lognormal(size=shape)
    qs = [0, 12.5, 50, 90, 99, 99.9, 100]
    many = percentiles(values, qs, axis=-1)
    assert many.shape == (len(qs), *shape[:-1])
    rows = values.reshape(-1, shape[-1])
    for i, q in enumerate(qs):
        assert list(np.atleast_1d(many[i])) == [percentile(row, q) for row in rows]
    assert np.isnan(percentiles(np.empty((2, 0)), [50, 99])).all()
