"""The hpcc probe: its summary parser on a real hpccoutf.txt, its problem sizes, and a
live quick run whose figures must lie below the machine's computed ceilings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from overhead_bounds import cache_bandwidth_gbs, fp64_peak_gflops, updates_gups

from servebench.overhead.probes import ProbeContext, ProbeUnavailable, hpcc

# Captured here: Debian's hpcc 1.5.0 on hpcc.input_file(2000), one process.
CAPTURED = Path(__file__).parent / "data" / "hpccoutf.txt"


def test_parse_summary_reads_the_captured_output() -> None:
    summary = hpcc.parse_summary(CAPTURED.read_text())
    assert summary["Success"] == "1"
    assert summary["HPL_N"] == "2000"
    assert summary["HPL_Tflops"] == "0.00608559"
    assert summary["SingleSTREAM_Triad"] == "53.4649"
    assert "End of Summary section." not in summary


def test_summary_measurements_convert_units_and_keep_sizes() -> None:
    summary = hpcc.parse_summary(CAPTURED.read_text())
    found = {m.metric: m for m in hpcc.summary_measurements(summary, cpu_s=1.5, wall_s=2.0)}
    assert set(found) == {metric for _, metric, _, _ in hpcc.METRICS}
    assert found["hpl_gflops"].value == pytest.approx(6.08559)  # TFLOP/s to GFLOP/s
    assert found["hpl_gflops"].unit == "GFLOP/s"
    assert found["dgemm_gflops"].value == pytest.approx(float(summary["SingleDGEMM_Gflops"]))
    assert found["random_access_gups"].value == pytest.approx(
        float(summary["SingleRandomAccess_GUPs"])
    )
    assert all(m.better == "higher" and m.cpu_s == 1.5 and m.wall_s == 2.0 for m in found.values())
    assert found["stream_triad_gbs"].detail["STREAM_VectorSize"] == 1333333


def test_output_without_summary_is_refused() -> None:
    text = CAPTURED.read_text().split("Begin of Summary section.")[0]
    with pytest.raises(ValueError, match="no summary section"):
        hpcc.parse_summary(text)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Success": "0"}, "failed test"),
        ({"SingleFFT_Gflops": "-1"}, "not a measured rate"),
        ({"HPL_Tflops": None}, "no HPL_Tflops"),
    ],
)
def test_failed_or_missing_figures_are_refused(change: dict, message: str) -> None:
    summary = hpcc.parse_summary(CAPTURED.read_text())
    for key, value in change.items():
        if value is None:
            del summary[key]
        else:
            summary[key] = value
    with pytest.raises(ValueError, match=message):
        hpcc.summary_measurements(summary)


def test_problem_size_follows_mode_and_memory() -> None:
    plenty = 64 * 2**30
    assert hpcc.problem_size(True, plenty) == hpcc.QUICK_N
    assert hpcc.problem_size(False, plenty) == hpcc.FULL_N
    # A quarter of 128 MiB holds a 2048² matrix of doubles: N is lowered to fit.
    assert hpcc.problem_size(False, 128 * 2**20) == 2048
    with pytest.raises(ProbeUnavailable, match="free memory"):
        hpcc.problem_size(True, 2**20)


def test_missing_binary_makes_the_probe_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProbeUnavailable, match="hpcc is not installed"):
        hpcc.run(ProbeContext(scratch=tmp_path, overlay=tmp_path, quick=True))


@pytest.mark.skipif(shutil.which("hpcc") is None, reason="Debian's hpcc is not installed")
def test_quick_run_gives_plausible_figures(quick_context) -> None:
    found = {m.metric: m for m in hpcc.run(quick_context)}
    assert set(found) == {metric for _, metric, _, _ in hpcc.METRICS}
    for metric in ("hpl_gflops", "dgemm_gflops", "fft_gflops"):
        assert 0 < found[metric].value < fp64_peak_gflops(), metric
    for metric in ("stream_copy_gbs", "stream_triad_gbs"):
        assert 0 < found[metric].value < cache_bandwidth_gbs(), metric
    assert 0 < found["random_access_gups"].value < updates_gups()
    hpl = found["hpl_gflops"]
    assert hpl.detail["HPL_N"] == hpcc.QUICK_N  # hpcc read the input the probe wrote
    assert hpl.cpu_s is not None and hpl.cpu_s > 0
    assert hpl.wall_s is not None and hpl.wall_s >= float(hpl.detail["HPL_time"])
    assert "libblas" in str(hpl.detail["blas"])
    assert list(quick_context.overlay.iterdir()) == []  # its work folder is gone
