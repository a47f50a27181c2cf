"""Link profiles, custom YAML profiles and Mahimahi traces: values and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.netem import BUILTIN_PROFILES, LinkProfile, ProfileError, get_profile
from servebench.netem.address import parse_address
from servebench.netem.errors import AddressError
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
    p = get_profile(str(path))
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
        get_profile(str(path))
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_unknown_profile_lists_the_builtins():
    with pytest.raises(ProfileError, match=r"not a built-in profile .*wifi.*lte"):
        get_profile("5g-dream")
    with pytest.raises(ProfileError, match="cannot read"):
        get_profile("missing.yaml")


def test_trace_profile_paths_are_relative_to_the_file(tmp_path: Path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "down.mahi").write_text("\n".join(["1"] * 2 + ["2"] * 2) + "\n")
    path = tmp_path / "cell.yaml"
    path.write_text("down_trace: traces/down.mahi\nup_mbps: 5\nrtt_s: 0.05\n")
    p = get_profile(str(path))
    # two 1500-byte opportunities per millisecond = 24 Mbit/s
    assert p.rate_bps("down") == pytest.approx(24e6)
    path.write_text("down_trace: traces/down.mahi\ndown_mbps: 3\n")
    with pytest.raises(ProfileError, match="down_mbps and down_trace both set"):
        get_profile(str(path))
    path.write_text("down_trace: traces/nope.mahi\n")
    with pytest.raises(ProfileError, match=r"field 'down_trace'.*cannot read"):
        get_profile(str(path))


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
