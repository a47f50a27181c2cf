"""`servebench netem profiles | check | proxy` as a user runs them."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from servebench.cli import app
from servebench.netem import BUILTIN_PROFILES
from servebench.netem.address import Address, parse_address
from servebench.netem.probe import measure_rtts, probe_server

runner = CliRunner()


def test_profiles_lists_every_builtin_with_its_source():
    result = runner.invoke(app, ["netem", "profiles"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name, profile in BUILTIN_PROFILES.items():
        assert name in result.output
        assert profile.source[:30] in result.output


def test_check_a_custom_profile_prints_configured_and_measured(tmp_path: Path):
    path = tmp_path / "fast.yaml"
    path.write_text("down_mbps: 100\nup_mbps: 50\nrtt_s: 0.010\n")
    result = runner.invoke(
        app,
        ["netem", "check", str(path), "--duration", "0.5", "--pings", "10"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "10.00" in rows["RTT p50"]  # configured (plus a ping's serialization), in ms
    assert "100.000" in rows["throughput down"]
    assert "50.000" in rows["throughput up"]


def test_check_reports_bad_input():
    result = runner.invoke(app, ["netem", "check", "5g-dream"])
    assert result.exit_code == 2
    assert "link '5g-dream': not a built-in link" in result.output


def test_proxy_rejects_a_bad_target():
    result = runner.invoke(app, ["netem", "proxy", "--profile", "lte", "--to", "nohost"])
    assert result.exit_code == 2
    assert "--to nohost: 'nohost' has no port" in result.output


def run_proxy(*options: str, use: Callable[[Address], None]) -> tuple[int, str]:
    """`servebench netem proxy --to <a probe server> OPTIONS`: `use` gets the address it
    prints, then Ctrl-C stops it; (exit code, stderr)."""
    with probe_server() as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servebench.cli",
                "netem",
                "proxy",
                "--to",
                str(server),
                *options,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        try:
            use(parse_address(proc.stdout.readline().strip(), "printed address"))
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc.returncode, err


def test_proxy_runs_until_interrupted(tmp_path: Path):
    profile = tmp_path / "steady.yaml"
    profile.write_text("rtt_s: 0.030\ndown_mbps: 20\nup_mbps: 20\n")

    def five_pings(address: Address) -> None:
        rtts = measure_rtts(address, 5)
        # The profile's 30 ms is a floor; the median (not the max, which one busy moment
        # can spoil) shows it is this profile's RTT, not some larger one.
        assert min(rtts) > 0.030 and statistics.median(rtts) < 0.060

    code, err = run_proxy("--profile", str(profile), use=five_pings)
    assert code == 0, err
    assert "stopped: 1 connections" in err
