"""Family generation: grids and seeded mutation are reproducible and deduplicated."""

import pytest

from model_zoo.mutate import grid, mutate_once, random_mutations
from model_zoo.spec import SpecError, parse_spec

BASE = parse_spec({"layer_type": "dense", "depth": 2, "width": 32, "input_shape": [16]})


def test_grid_is_the_full_product_in_order():
    specs = grid(["dense", "conv", "attention"], [1, 2], [16, 32], heads=2)
    assert len(specs) == 12
    assert [(s.layer_type, s.depth, s.width) for s in specs[:4]] == [
        ("dense", 1, 16), ("dense", 1, 32), ("dense", 2, 16), ("dense", 2, 32),
    ]  # fmt: skip
    assert all(s.heads == 2 for s in specs if s.layer_type == "attention")
    assert all(s.heads is None for s in specs if s.layer_type != "attention")
    assert len({s.id for s in specs}) == 12


def test_grid_dedupes_and_names_bad_combinations():
    assert len(grid(["dense"], [1, 1], [8])) == 1
    with pytest.raises(SpecError, match=r"grid\[attention, depth=1, width=6\] heads"):
        grid(["attention"], [1], [6])
    with pytest.raises(SpecError, match="layer_type"):
        grid(["mlp"], [1], [8])


def test_random_mutations_are_reproducible_and_distinct():
    first = random_mutations(BASE, 10, seed=7)
    again = random_mutations(BASE, 10, seed=7)
    other = random_mutations(BASE, 10, seed=8)
    assert [s.id for s in first] == [s.id for s in again]
    assert [s.id for s in first] != [s.id for s in other]
    ids = [s.id for s in first]
    assert len(set(ids)) == 10 and BASE.id not in ids


def test_every_mutation_kind_changes_what_it_says():
    import random

    rng = random.Random(0)
    assert mutate_once(BASE, "deepen", rng).depth == 3
    assert mutate_once(BASE, "shallow", rng).depth == 1
    assert mutate_once(BASE, "widen", rng).width == 64
    assert mutate_once(BASE, "narrow", rng).width == 16
    swapped = mutate_once(BASE, "swap_type", rng)
    assert swapped.layer_type != "dense"
    assert len(swapped.served_input_shape) >= 1


def test_mutation_respects_caps_and_says_when_it_cannot():
    tiny = parse_spec({"layer_type": "dense", "depth": 1, "width": 1, "input_shape": [4]})
    family = random_mutations(tiny, 5, seed=1, max_depth=3, max_width=4)
    assert all(s.depth <= 3 and s.width <= 4 for s in family)
    with pytest.raises(SpecError, match="count: only"):
        random_mutations(tiny, 500, seed=1, max_depth=2, max_width=2, max_attempts=200)


def test_huge_families_are_refused_before_they_are_built(monkeypatch):
    import model_zoo.mutate

    # Refused up front: not one mutant or spec is made (the search for 10^8 mutants would
    # run for hours, the grid's 200,000 specs for minutes).
    monkeypatch.setattr(model_zoo.mutate, "mutate_once", lambda *a, **k: pytest.fail("mutated"))
    monkeypatch.setattr(model_zoo.mutate, "parse_spec", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(SpecError, match=r"^count: 100,000,000 mutants asked for; at most 10,000"):
        random_mutations(BASE, 100_000_000, seed=0)
    with pytest.raises(SpecError, match=r"^grid: 5 types x 200 depths x 200 widths = 200,000"):
        grid(["dense", "conv", "lstm", "gru", "attention"], range(1, 201), range(1, 201))
    with pytest.raises(SpecError, match=r"at most 10$"):
        random_mutations(BASE, 11, seed=0, max_count=10)


def test_models_generate_refuses_a_runaway_mutate_count(tmp_path):
    from typer.testing import CliRunner

    from servebench.cli import app

    out = tmp_path / "family.yaml"
    result = CliRunner().invoke(
        app, ["models", "generate", "--types", "dense", "--mutate", "100000000", "-o", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert "--mutate 100000000: must be <= 9,999" in result.output
    assert not out.exists()
