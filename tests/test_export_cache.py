"""The test suite's export cache (scenario.export_cache): a fresh run copies an export made
from the same specs, formats and seed; anything else, or no cache, exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_zoo.spec import ModelSpec
from servebench.scenario import deploy
from servebench.scenario.export_cache import EXPORT_CACHE_ENV, cache_entry, keep
from servebench.servers.kinds import KINDS

DENSE = ModelSpec(layer_type="dense", depth=1, width=8, input_shape=(4,), num_outputs=3)


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Stands in for the exporter (its output is tested elsewhere): each call writes a
    file naming what it exported and is listed here."""
    calls: list[tuple[str, ...]] = []

    def export_family(specs, out: Path, *, formats, seed, **_) -> None:
        calls.append(tuple(s.id for s in specs))
        out.mkdir(parents=True, exist_ok=True)
        (out / "made.txt").write_text(f"{[s.id for s in specs]} {formats} {seed}")

    monkeypatch.setattr(deploy, "export_family", export_family)
    return calls


def test_a_fresh_run_copies_what_an_earlier_run_exported(tmp_path, monkeypatch, exports):
    monkeypatch.setenv(EXPORT_CACHE_ENV, str(tmp_path / "cache"))
    kinds = [KINDS["triton-local"]]
    first = deploy.export_for(kinds, [DENSE], tmp_path / "run1", seed=0)
    second = deploy.export_for(kinds, [DENSE], tmp_path / "run2", seed=0)
    assert exports == [(DENSE.id,)]
    assert (second / "made.txt").read_text() == (first / "made.txt").read_text()
    # Another seed, or another model, is another export.
    deploy.export_for(kinds, [DENSE], tmp_path / "run3", seed=1)
    wider = DENSE.replace(width=16)
    deploy.export_for(kinds, [wider], tmp_path / "run4", seed=0)
    assert exports == [(DENSE.id,), (DENSE.id,), (wider.id,)]


def test_without_a_cache_every_run_exports(tmp_path, monkeypatch, exports):
    monkeypatch.delenv(EXPORT_CACHE_ENV, raising=False)
    kinds = [KINDS["triton-local"]]
    deploy.export_for(kinds, [DENSE], tmp_path / "run1", seed=0)
    deploy.export_for(kinds, [DENSE], tmp_path / "run2", seed=0)
    assert exports == [(DENSE.id,), (DENSE.id,)]
    assert cache_entry([DENSE], ["triton"], 0) is None


def test_the_first_of_two_runs_storing_an_entry_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(EXPORT_CACHE_ENV, str(tmp_path / "cache"))
    entry = cache_entry([DENSE], ["triton"], 0)
    assert entry is not None
    for n in (1, 2):
        (tmp_path / f"export{n}").mkdir()
        (tmp_path / f"export{n}" / "which").write_text(str(n))
        keep(tmp_path / f"export{n}", entry)
    assert (entry / "which").read_text() == "1"
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no staging left
