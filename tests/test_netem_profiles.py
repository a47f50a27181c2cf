"""Link profiles, custom YAML profiles and Mahimahi traces: values and error messages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from servebench.netem import (
    BUILTIN_PROFILES,
    LinkProfile,
    ProfileError,
    UnknownLinkError,
    link_kind,
    resolve_link,
)
from servebench.netem.address import parse_address
from servebench.netem.errors import AddressError
from servebench.netem.profiles import is_profile_file
from servebench.netem.trace import MahimahiTrace


def test_builtin_profiles_match_the_issue_and_cite_a_source():
    expected = {
        # name: (down Mbit/s, up Mbit/s, RTT s, jitter s, loss)
        "wired": (1000, 1000, 0.002, 0.0, 0.0),
        "wifi": (30, 15, 0.020, 0.005, 0.001),
        "lte": (12, 12, 0.070, 0.010, 0.002),
        "4g-slow": (1.44, 0.675, 0.150, 0.0, 0.0),
        "3g": (0.7, 0.7, 0.300, 0.0, 0.0),
    }
    for name, (down, up, rtt, jitter, loss) in expected.items():
        p = BUILTIN_PROFILES[name]
        assert (p.down_mbps, p.up_mbps, p.rtt_s, p.jitter_s, p.loss) == (
            down,
            up,
            rtt,
            jitter,
            loss,
        )
        assert p.source and p.source != "custom profile"
    assert "our assumption" in BUILTIN_PROFILES["wifi"].source
    assert "WebPageTest" in BUILTIN_PROFILES["lte"].source
    direct = BUILTIN_PROFILES["direct"]
    assert not direct.shapes_traffic
    assert direct.rate_bps("down") is None


def test_derived_values():
    lte = BUILTIN_PROFILES["lte"]
    # Linux: RTO = SRTT + max(4 RTTVAR, 200 ms)
    assert lte.effective_rto_s == pytest.approx(0.070 + 0.2)
    # One bandwidth-delay product, at least 64 KiB.
    assert lte.effective_queue_bytes("down") == pytest.approx(12e6 / 8 * 0.070, abs=1)
    assert BUILTIN_PROFILES["3g"].effective_queue_bytes("up") == 64 * 1024
    assert BUILTIN_PROFILES["direct"].effective_queue_bytes("up") is None


def test_custom_yaml_profile(tmp_path: Path):
    path = tmp_path / "office.yaml"
    path.write_text("down_mbps: 50\nup_mbps: 50\nrtt_s: 0.040\njitter_s: 0.002\nloss: 0.001\n")
    p = resolve_link(str(path))
    assert p.name == "office"
    assert p.rate_bps("down") == 50e6
    assert p.rtt_s == 0.040
    assert p.jitter_distribution == "normal"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("rtt_s: -1\n", ["field 'rtt_s'", "greater than or equal to 0", "-1"]),
        ("down_mbps: fast\n", ["field 'down_mbps'", "'fast'"]),
        ("loss: 0.7\n", ["field 'loss'", "0.7"]),
        ("rtt: 0.04\n", ["field 'rtt'", "unknown field", "rtt_s"]),
        ("jitter_distribution: pareto\n", ["field 'jitter_distribution'", "'normal'"]),
        ("- 1\n- 2\n", ["must be a mapping"]),
        ("rtt_s: [\n", ["not valid YAML"]),
    ],
)
def test_yaml_errors_name_the_field(tmp_path: Path, text: str, words: list[str]):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        resolve_link(str(path))
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_unknown_profile_lists_the_builtins():
    with pytest.raises(ProfileError, match=r"link '5g-dream': not a built-in link .*wifi.*lte"):
        resolve_link("5g-dream")
    with pytest.raises(ProfileError, match="cannot read"):
        resolve_link("missing.yaml")


def test_trace_profile_paths_are_relative_to_the_file(tmp_path: Path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "down.mahi").write_text("\n".join(["1"] * 2 + ["2"] * 2) + "\n")
    path = tmp_path / "cell.yaml"
    path.write_text("down_trace: traces/down.mahi\nup_mbps: 5\nrtt_s: 0.05\n")
    p = resolve_link(str(path))
    # two 1500-byte opportunities per millisecond = 24 Mbit/s
    assert p.rate_bps("down") == pytest.approx(24e6)
    path.write_text("down_trace: traces/down.mahi\ndown_mbps: 3\n")
    with pytest.raises(ProfileError, match="down_mbps and down_trace both set"):
        resolve_link(str(path))
    path.write_text("down_trace: traces/nope.mahi\n")
    with pytest.raises(ProfileError, match=r"field 'down_trace'.*cannot read"):
        resolve_link(str(path))


def test_mahimahi_trace_parsing(tmp_path: Path):
    path = tmp_path / "t.mahi"
    path.write_text("0\n5\n5\n10\n")
    trace = MahimahiTrace.load(path)
    assert trace.period_s == 0.010
    assert trace.mean_bps == pytest.approx(4 * 1500 * 8 / 0.010)
    assert [trace.opportunity_time(i) for i in range(6)] == pytest.approx(
        [0, 0.005, 0.005, 0.010, 0.010, 0.015]  # repeats with a 10 ms period
    )
    assert trace.first_index_at_or_after(0.006) == 3
    assert trace.first_index_at_or_after(0.0101) == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\nx\n", r":2: 'x' is not an integer"),
        ("5\n3\n", r":2: timestamp 3 is smaller than the one before it \(5\)"),
        ("-1\n", r":1: timestamp -1 is negative"),
        ("\n\n", "no timestamps"),
        ("0\n0\n", "must be positive"),
    ],
)
def test_mahimahi_trace_errors_name_the_line(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.mahi"
    path.write_text(text)
    with pytest.raises(ProfileError, match=message):
        MahimahiTrace.load(path)


def test_profile_is_frozen():
    with pytest.raises(ValueError, match="frozen"):
        BUILTIN_PROFILES["wifi"].rtt_s = 1.0  # type: ignore[misc]
    assert LinkProfile(name="x", rtt_s=0.01).shapes_traffic


@pytest.mark.parametrize(
    ("value", "expected"),
    [("127.0.0.1:8000", ("127.0.0.1", 8000)), ("[::1]:9", ("::1", 9)), (("h", 1), ("h", 1))],
)
def test_parse_address(value, expected):
    assert parse_address(value, "target") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("localhost", "target: 'localhost' has no port"),
        ("h:http", "target: port 'http'"),
        ("h:70000", "outside 0-65535"),
        (":80", "has no host"),
    ],
)
def test_parse_address_errors(value, message):
    with pytest.raises(AddressError, match=message):
        parse_address(value, "target")


# -- what a link reference means: one function (issue 21, item 6) ----------------------------


def test_one_function_says_what_a_link_reference_means(tmp_path: Path):
    inline = LinkProfile(name="mine", rtt_s=0.01)
    assert link_kind(inline) == "inline" and resolve_link(inline) is inline
    assert link_kind("wifi") == "builtin" and resolve_link("wifi") is BUILTIN_PROFILES["wifi"]
    # Deciding reads nothing: a file that does not exist is still a file reference.
    assert link_kind("nowhere/missing.yml") == "file"
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "office.yaml").write_text("rtt_s: 0.04\n")
    # A relative file is taken from base_dir (the scenario's folder), not the working folder.
    assert resolve_link("links/office.yaml", tmp_path).rtt_s == 0.04
    assert resolve_link(str(tmp_path / "links" / "office.yaml"), Path("/elsewhere")).rtt_s == 0.04
    with pytest.raises(ProfileError, match=r"other/links/office\.yaml: cannot read"):
        resolve_link("links/office.yaml", tmp_path / "other")
    # A file without the .yaml/.yml end is not a reference, even where it exists.
    (tmp_path / "office.txt").write_text("rtt_s: 0.04\n")
    with pytest.raises(UnknownLinkError) as info:
        resolve_link(str(tmp_path / "office.txt"))
    assert str(info.value).startswith(f"link '{tmp_path / 'office.txt'}': not a built-in link")
    assert info.value.reason.endswith("nor a .yaml profile file")


@pytest.mark.parametrize("entry", ["a.yaml", "b.yml", "/abs/c.yaml"])
def test_profile_file_entries(entry: str):
    assert is_profile_file(entry)


@pytest.mark.parametrize("entry", ["wifi", "5g", "a.txt", 7, None, {"name": "x"}, ["a.yaml"]])
def test_entries_that_are_not_profile_files(entry: object):
    assert not is_profile_file(entry)


def _suffix_tests(tree: ast.AST) -> list[int]:
    """Lines that test a name for a YAML end: `x.endswith(".yaml" ...)`, `x.suffix in
    (".yaml", ...)`, `... == ".yml"` (naming a file, `f"{name}.yaml"`, is no test)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "endswith":
            tested = node.args
        elif isinstance(node, ast.Compare):
            tested = [node.left, *node.comparators]
        else:
            continue
        for part in tested:
            if any(
                isinstance(c, ast.Constant) and c.value in (".yaml", ".yml") for c in ast.walk(part)
            ):
                lines.append(node.lineno)
    return lines


def test_suffix_guard_sees_each_way_of_testing():
    code = (
        'a.endswith((".yaml", ".yml"))\nb.endswith(".yml")\nc.suffix in (".yaml",)\n'
        'd == ".yaml"\npath = f"{name}.yaml"\nwith_suffix(".yaml")\n'
    )
    assert _suffix_tests(ast.parse(code)) == [1, 2, 3, 4]


def test_no_other_module_tests_for_a_profile_file_suffix():
    """`link_kind` is the one place that knows a profile file by its end: no other module of
    servebench tests a name for ".yaml"/".yml" (six did, each its own way)."""
    root = Path(__file__).resolve().parents[1]
    owner = root / "servebench" / "netem" / "profiles.py"
    found = [
        f"{path.relative_to(root)}:{line}"
        for path in sorted((root / "servebench").rglob("*.py"))
        if path != owner
        for line in _suffix_tests(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], found
