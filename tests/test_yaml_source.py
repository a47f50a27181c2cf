"""Hostile or unusual input files: clean one-line errors, bounded work, YAML merge semantics.

Issue 10 items 1, 2 and 5: non-UTF-8 bytes in any file servebench reads, alias bombs and
deep nesting, and legitimate YAML (merge overrides, `1:` beside `true:`) that was refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from model_zoo.spec import SpecError, load_specs
from servebench.load.arrivals import TraceArrivals
from servebench.netem.errors import ProfileError
from servebench.netem.profiles import resolve_link
from servebench.netem.trace import MahimahiTrace
from servebench.scenario.validate import ScenarioError, load_scenario

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"

# "caf\xe9" in Latin-1: the byte 0xe9 is not valid UTF-8 where it stands.
LATIN1_NAME = b"name: caf\xe9\n"


def scenario_problems(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return caught.value.problems


def write(tmp_path: Path, data: str | bytes, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


# --- item 1: non-UTF-8 bytes ------------------------------------------------------------


def test_scenario_with_latin1_bytes_names_the_byte_and_offset(tmp_path: Path):
    path = write(tmp_path, b"# ok\n" + LATIN1_NAME)
    assert scenario_problems(path) == [f"{path}:2: not UTF-8 text (byte 0xe9 at offset 14)"]


def test_spec_file_with_latin1_bytes(tmp_path: Path):
    path = write(tmp_path, b"layer_type: dense\n" + LATIN1_NAME, "specs.yaml")
    with pytest.raises(
        SpecError, match=r"specs\.yaml:2: not UTF-8 text \(byte 0xe9 at offset 27\)$"
    ):
        load_specs(path)


def test_profile_file_with_latin1_bytes(tmp_path: Path):
    path = write(tmp_path, b"rtt_s: 0.04\n" + LATIN1_NAME, "office.yaml")
    with pytest.raises(ProfileError, match=r"office\.yaml:2: not UTF-8 text \(byte 0xe9"):
        resolve_link(str(path))


def test_trace_files_with_latin1_bytes(tmp_path: Path):
    path = write(tmp_path, b"1\n2\xe9\n", "down.mahi")
    with pytest.raises(
        ProfileError, match=r"down\.mahi:2: not UTF-8 text \(byte 0xe9 at offset 3\)"
    ):
        MahimahiTrace.load(path)
    path = write(tmp_path, b"100\n\xff200\n", "gaps.txt")
    with pytest.raises(ValueError, match=r"gaps\.txt:2: not UTF-8 text \(byte 0xff at offset 4\)"):
        TraceArrivals.from_file(path)


def test_control_characters_are_one_line_errors(tmp_path: Path):
    path = write(tmp_path, "name: a\x00b\n")
    [problem] = scenario_problems(path)
    assert problem.startswith(f"{path}:1: not valid YAML") and "\n" not in problem


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0x" + "f" * 5000, "an integer of more than 4,300 digits"),
        ("1" * 5000, "an integer of more than 4,300 digits"),
        ("!!int abc", "'abc' cannot be read as int"),
        ("!!bool maybe", "'maybe' cannot be read as bool"),
        ("2001-13-45", "'2001-13-45' cannot be read as timestamp (month must be in 1..12)"),
    ],
)
def test_values_pyyaml_cannot_build_are_one_line_errors(tmp_path: Path, value: str, expected):
    path = write(tmp_path, f"name: x\nseed: {value}\n")
    [problem] = scenario_problems(path)
    assert problem.startswith(f"{path}:2: not valid YAML: {expected}") and "\n" not in problem


# --- item 2: alias bombs, deep nesting, recursive aliases -------------------------------


def billion_laughs(levels: int = 9, fan_out: int = 9) -> str:
    """The classic: each level is a list of `fan_out` aliases of the level before."""
    lines = ["a0: &a0 [lol]"]
    for level in range(1, levels + 1):
        items = ", ".join([f"*a{level - 1}"] * fan_out)
        lines.append(f"a{level}: &a{level} [{items}]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_before_it_is_built_naming_the_line(tmp_path: Path, monkeypatch):
    import servebench.common.textfile

    # Refused while the nodes are composed (an alias is one shared node), before any of
    # the document's 9**9 expanded values is built: the builder is never called.
    monkeypatch.setattr(servebench.common.textfile, "_Builder", lambda *a: pytest.fail("built"))
    path = write(tmp_path, billion_laughs())
    [problem] = scenario_problems(path)
    # a5 (line 6) holds 9**5 = 59,049 copies of a0: the first level past the alias budget
    assert problem.startswith(f"{path}:6: aliases expand the document past 100,000 nodes")


def test_mapping_and_merge_bombs_are_refused(tmp_path: Path):
    lines = ["m0: &m0 {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v}"]
    lines += [
        f"m{i}: &m{i} {{{', '.join(f'x{j}: *m{i - 1}' for j in range(9))}}}" for i in range(1, 9)
    ]
    path = write(tmp_path, "\n".join(lines) + "\n")
    [problem] = scenario_problems(path)
    assert "aliases expand the document past 100,000 nodes" in problem
    lines = ["m0: &m0 {k: [1, 2, 3, 4, 5, 6, 7, 8]}"]
    lines += [f"m{i}: &m{i} {{<<: *m{i - 1}, k{i}: [*m{i - 1}, *m{i - 1}]}}" for i in range(1, 20)]
    [problem] = scenario_problems(write(tmp_path, "\n".join(lines) + "\n"))
    assert "aliases expand the document past 100,000 nodes" in problem


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused(tmp_path: Path, opening: str, closing: str):
    path = write(tmp_path, "name: " + opening * 5000 + "1" + closing * 5000 + "\n")
    [problem] = scenario_problems(path)
    assert problem.startswith(f"{path}:1: nested deeper than 100 levels")


def test_block_style_deep_nesting_is_refused(tmp_path: Path):
    text = "".join(f"{'  ' * i}k{i}:\n" for i in range(300)) + "  " * 300 + "x: 1\n"
    [problem] = scenario_problems(write(tmp_path, text))
    assert ":101: nested deeper than 100 levels" in problem


def test_aliases_cannot_nest_past_the_depth_limit(tmp_path: Path):
    lines = ["d0: &d0 " + "[" * 60 + "1" + "]" * 60]
    lines += [f"d{i}: &d{i} " + "[" * 60 + f"*d{i - 1}" + "]" * 60 for i in range(1, 3)]
    [problem] = scenario_problems(write(tmp_path, "\n".join(lines) + "\n"))
    assert ":2: nested deeper than 100 levels (through aliases)" in problem


@pytest.mark.parametrize(
    "text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a {<<: *a}\n", "a: &a [1, [2, *a]]\n"]
)
def test_recursive_alias_is_refused(tmp_path: Path, text: str):
    [problem] = scenario_problems(write(tmp_path, text))
    assert problem.startswith(f"{tmp_path / 'bad.yaml'}:1: recursive alias *a")


def test_spec_and_profile_files_share_the_limits(tmp_path: Path):
    path = write(tmp_path, billion_laughs(), "specs.yaml")
    with pytest.raises(SpecError, match="past 100,000 nodes"):
        load_specs(path)
    path = write(tmp_path, "a: &a [*a]\n", "link.yaml")
    with pytest.raises(ProfileError, match="recursive alias"):
        resolve_link(str(path))


# --- item 5: legitimate YAML that was refused --------------------------------------------


def test_merge_key_with_an_explicit_override(tmp_path: Path):
    text = (
        QUICKSTART.read_text()
        .replace("  - name: triton\n", "  - &srv\n    name: triton\n")
        .replace("workload:\n", "  - <<: *srv\n    name: triton2\nworkload:\n")
    )
    scenario = load_scenario(write(tmp_path, text))
    assert [s.name for s in scenario.servers] == ["triton", "triton2"]
    assert scenario.servers[1].settings == scenario.servers[0].settings


def test_explicit_keys_still_cannot_repeat_next_to_a_merge(tmp_path: Path):
    text = "base: &b {x: 1}\nname: n\nother:\n  <<: *b\n  y: 2\n  y: 3\n"
    [problem] = scenario_problems(write(tmp_path, text))
    assert problem == f"{tmp_path / 'bad.yaml'}:6 other.y: duplicate key"


def test_earlier_merge_sources_win_and_lines_follow_the_winner(tmp_path: Path):
    from servebench.scenario.source import load_source

    text = "a: &a {x: 1, y: 1}\nb: &b {x: 2, z: 2}\nc:\n  <<: [*a, *b]\n  y: 3\n"
    source = load_source(write(tmp_path, text, "ok.yaml"))
    assert source.data["c"] == {"x": 1, "y": 3, "z": 2}
    assert source.line_of(("c", "y")) == 5 and source.line_of(("c", "x")) == 1


def test_int_and_bool_keys_are_different_keys(tmp_path: Path):
    from servebench.scenario.source import load_source

    load_source(write(tmp_path, "m:\n  1: one\n  true: yes\n  1.0: also\n", "ok.yaml"))
    [problem] = scenario_problems(write(tmp_path, "m: {1: a, 0x1: b}\n"))
    assert problem == f"{tmp_path / 'bad.yaml'}:1 m[1]: duplicate key"


# --- end to end: the CLI prints one line and exits 2 ------------------------------------


def test_cli_scenario_validate_prints_one_line_per_bad_file_and_exits_2(tmp_path: Path):
    bad = {
        "latin1.yaml": b"name: caf\xe9\n",
        "laughs.yaml": billion_laughs().encode(),
        "recursive.yaml": b"a: &a [*a]\n",
        "deep.yaml": b"x: " + b"[" * 5000,
    }
    for name, content in bad.items():
        write(tmp_path, content, name)
    result = subprocess.run(
        [sys.executable, "-m", "servebench.cli", "scenario", "validate", *bad],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    assert [line.split(":")[1].strip() for line in output.splitlines()] == list(bad), output
