"""The roofline's roofs: measured once per machine (both of them), cached with their date,
re-measured on request, and shown in the report with a note on any point above them.

Each run used to measure a best-of-3 GEMM in-process: on a shared 2-core machine that
read 58-241 GFLOP/s, and models plotted at 124-170 % of "the roof" with no word why.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from test_analysis_report import sections
from test_analysis_rundir import HOST_PEAK_FLOPS, MODEL, make_run_dir

from servebench.analysis.report import write_report
from servebench.telemetry import host_peak
from servebench.telemetry.host_peak import (
    CACHE_ENV,
    HostPeaks,
    PeakMeasurement,
    cache_path,
    host_peaks,
    measure_host_peak_bw,
    measure_host_peak_flops,
    record_host_peaks,
)


def _fake(value: float) -> HostPeaks:
    return HostPeaks(
        flops=PeakMeasurement(value, 2048, 3, 2 * 2048**3 / value),
        bw=PeakMeasurement(value / 10, 2**27, 5, 2**28 / (value / 10)),
        threads=2,
        machine="fake",
        measured_at="2026-11-30T12:00:00+00:00",
        flops_rounds=(value * 0.5, value),
        bw_rounds=(value / 10,),
        load_average=0.3,
    )


def test_host_peak_flops_is_measured() -> None:
    peak = measure_host_peak_flops(n=256, repeats=2)
    assert peak.value == pytest.approx(2 * 256**3 / peak.best_seconds)
    # Any CPU of the last 20 years multiplies float32 faster than 100 MFLOP/s and no
    # single host reaches 1 PFLOP/s: a wrong FLOP count or timer would fall outside.
    assert 1e8 < peak.value < 1e15
    with pytest.raises(ValueError, match="n=8"):
        measure_host_peak_flops(n=8)
    with pytest.raises(ValueError, match="repeats=0"):
        measure_host_peak_flops(n=128, repeats=0)


def test_host_peak_bandwidth_is_measured() -> None:
    bw = measure_host_peak_bw(nbytes=16 * 2**20, repeats=2)
    assert bw.value == pytest.approx(2 * bw.size / bw.best_seconds)
    assert 1e8 < bw.value < 1e13
    with pytest.raises(ValueError, match="nbytes=1024"):
        measure_host_peak_bw(nbytes=1024)


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Replace the measuring process; records (threads, rounds) of each measurement."""
    calls: list[tuple[int, int]] = []

    def measure(threads: int, rounds: int, key: str) -> HostPeaks:
        calls.append((threads, rounds))
        peaks = _fake(100e9 + len(calls) * 1e9)
        return HostPeaks(**{**peaks.__dict__, "threads": threads, "machine": key})

    monkeypatch.setattr(host_peak, "_measure_in_subprocess", measure)
    return calls


def test_real_measurement_in_a_fresh_process(tmp_path: Path) -> None:
    peaks = host_peaks(cache_dir=tmp_path, threads=1, rounds=1)
    assert not peaks.cached and peaks.threads == 1
    assert 1e8 < peaks.flops.value < 1e15 and 1e8 < peaks.bw.value < 1e13
    assert peaks.flops.value == max(peaks.flops_rounds)
    assert "| 1 threads" in peaks.machine
    entry = json.loads((tmp_path / "host_peak.json").read_text())[peaks.machine]
    assert entry["flops"]["value"] == peaks.flops.value and entry["measured_at"]


def test_thread_count_is_fixed_for_blas(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, str] = {}

    def run(command, *, env, **kwargs):
        seen.update(env)
        body = {
            "flops": {"value": 1e11, "size": 2048, "repeats": 3, "best_seconds": 0.17},
            "bw": {"value": 1e10, "size": 2**27, "repeats": 5, "best_seconds": 0.027},
            "measured_at": "2026-11-30T12:00:00+00:00",
            "flops_rounds": [1e11],
            "bw_rounds": [1e10],
            "load_average": 0.1,
        }
        return subprocess.CompletedProcess(command, 0, json.dumps(body), "")

    monkeypatch.setattr(host_peak.subprocess, "run", run)
    host_peaks(cache_dir=tmp_path, threads=3)
    assert seen["OPENBLAS_NUM_THREADS"] == seen["OMP_NUM_THREADS"] == "3"


def test_cached_per_machine_and_remeasured_on_request(measured, tmp_path: Path) -> None:
    first = host_peaks(cache_dir=tmp_path, threads=2)
    again = host_peaks(cache_dir=tmp_path, threads=2)
    assert measured == [(2, host_peak.ROUNDS)]
    assert again.cached and not first.cached
    assert (again.flops, again.bw, again.measured_at) == (first.flops, first.bw, first.measured_at)
    other = host_peaks(cache_dir=tmp_path, threads=1)  # another thread count: another key
    assert len(measured) == 2 and other.machine != first.machine
    fresh = host_peaks(cache_dir=tmp_path, threads=2, remeasure=True)
    assert len(measured) == 3 and fresh.flops.value != first.flops.value
    assert host_peaks(cache_dir=tmp_path, threads=2).flops == fresh.flops  # replaced
    keys = json.loads((tmp_path / "host_peak.json").read_text())
    assert set(keys) == {first.machine, other.machine}


def test_cache_dir_from_environment_and_corrupt_cache(
    measured, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_path() == tmp_path / "c" / "host_peak.json"
    host_peaks(threads=2)
    assert cache_path().is_file()
    cache_path().write_text("{not json")
    assert not host_peaks(threads=2).cached and len(measured) == 2


def test_record_host_peaks_fills_run_json(measured, tmp_path: Path) -> None:
    run: dict = {"run_id": "r"}
    peak = record_host_peaks(run, cache_dir=tmp_path, threads=2)
    assert run["host_peak_flops"] == peak.value and run["host_peak_bw"] > 0
    assert run["host_peak"]["threads"] == 2 and run["host_peak"]["measured_at"]
    json.dumps(run)  # run.json can hold it


def _run_with_peaks(root: Path, flops: float, bw: float | None) -> Path:
    """The fixture run as the runner writes it now: peaks in run.json (and flops per row)."""
    run = make_run_dir(root, duration=20)
    trials = pd.read_csv(run / "trials.csv")
    trials["host_peak_flops"] = flops
    trials.to_csv(run / "trials.csv", index=False)
    meta = json.loads((run / "run.json").read_text())
    fields = _fake(flops).run_fields()
    fields["host_peak_bw"] = bw
    (run / "run.json").write_text(json.dumps({**meta, **fields}))
    return run


def test_report_shows_both_roofs(tmp_path: Path) -> None:
    run = _run_with_peaks(tmp_path, HOST_PEAK_FLOPS, 5e9)
    roofline = sections(write_report(run).path.read_text())["roofline"]
    assert "60 GFLOP/s" in roofline and "5 GB/s" in roofline
    assert "compute roof: GEMM peak 60 GFLOP/s" in roofline
    assert "bandwidth roof: copy 5 GB/s" in roofline
    assert "measured 2026-11-30 with 2 BLAS threads" in roofline
    assert "above-roof" not in roofline  # every point is under the roof: no note


def test_points_above_the_roof_get_a_note(tmp_path: Path) -> None:
    # The fixture's batch-16 trials reach ~30 GFLOP/s; a 20 GFLOP/s roof is too low.
    run = _run_with_peaks(tmp_path, 20e9, 40e9)
    roofline = sections(write_report(run).path.read_text())["roofline"]
    shares = [int(v) for v in re.findall(r"<td>(\d+)\.\d%</td>", roofline)]
    assert max(shares) > 100
    note = re.search(r'<p class="roof-note" id="above-roof">(.*?)</p>', roofline, re.DOTALL)
    assert note, "a point above the measured roof without a note"
    assert "plot above the measured roof" in note[1] and MODEL["model"] in note[1]
    assert "servebench report host-peak --remeasure" in note[1]
    assert "above the measured roof (" in roofline  # ringed in the figure too


def test_busy_host_is_said(tmp_path: Path) -> None:
    from servebench.analysis.roofline import host_ceiling

    meta = {**_fake(50e9).run_fields()["host_peak"], "load_average": 4.7}
    ceiling = host_ceiling(pd.DataFrame({"host_peak_flops": [50e9]}), {"host_peak": meta})
    assert "load average 4.7 on 2 threads then: the host was busy" in ceiling.provenance


def test_cli_host_peak(measured, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from servebench.cli import app

    runner = CliRunner()
    first = runner.invoke(app, ["report", "host-peak", "--cache-dir", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert "GEMM peak        101 GFLOP/s" in first.output and "just measured" in first.output
    again = runner.invoke(app, ["report", "host-peak", "--cache-dir", str(tmp_path)])
    assert "from the cache" in again.output and len(measured) == 1
    fresh = runner.invoke(app, ["report", "host-peak", "--remeasure", "--cache-dir", str(tmp_path)])
    assert "102 GFLOP/s" in fresh.output and len(measured) == 2
