"""The ioping probe: its parser on real ioping JSON, the percentile arithmetic, and a
live quick run in which O_DIRECT reads are slower than cached reads of the same file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servebench.overhead.probes import ioping
from servebench.overhead.probes.folders import filesystem_type

# Captured here: `ioping -J -c 12 -i 0 -s 4096 -e 1 -D FILE` (ioping 1.3).
CAPTURED = Path(__file__).parent / "data" / "ioping_direct.json"


def test_parse_output_leaves_out_the_warm_up() -> None:
    times, stat = ioping.parse_output(CAPTURED.read_text())
    assert len(times) == 11  # 12 requests, the first one ignored by ioping
    assert times[0] == 362470 and 465124 not in times
    assert stat["count"] == 11 and sum(times) == stat["time"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("not json", "not JSON"), ("{}", "not a JSON array"), ("[]", "no measured")],
)
def test_parse_output_refuses_other_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ioping.parse_output(text)


def test_latency_measurements_are_percentiles_in_microseconds() -> None:
    times = [1000 * k for k in range(1, 101)]  # 1 … 100 µs
    found = {
        m.metric: m
        for m in ioping.latency_measurements("scratch_random_direct", times, {"iops": 19801.98})
    }
    # Nearest rank, as every percentile in servebench: the 50th, 90th and 99th of 100 times.
    assert found["scratch_random_direct_p50_s"].value == pytest.approx(50e-6)
    assert found["scratch_random_direct_p90_s"].value == pytest.approx(90e-6)
    assert found["scratch_random_direct_p99_s"].value == pytest.approx(99e-6)
    assert found["scratch_random_direct_p50_s"].better == "lower"
    assert found["scratch_random_direct_iops"].value == 19801.98
    assert found["scratch_random_direct_iops"].better == "higher"


@pytest.mark.skipif(shutil.which("ioping") is None, reason="Debian's ioping is not installed")
def test_quick_run_direct_reads_are_slower_than_cached(tmp_path: Path, quick_context) -> None:
    if filesystem_type(tmp_path) == "tmpfs":
        pytest.skip("the temporary folder is tmpfs: O_DIRECT reads memory there too")
    found = {m.metric: m for m in ioping.run(quick_context)}
    assert len(found) == 2 * 2 * 2 * 4
    for folder in ("scratch", "overlay"):
        for pattern in ("sequential", "random"):
            at = f"{folder}_{pattern}"
            direct, cached = found[f"{at}_direct_p50_s"], found[f"{at}_cached_p50_s"]
            assert direct.value > cached.value > 0, at
            assert found[f"{at}_direct_iops"].value < found[f"{at}_cached_iops"].value, at
            for mode in ("direct", "cached"):
                p50, p90, p99 = (found[f"{at}_{mode}_p{q}_s"].value for q in (50, 90, 99))
                assert p50 <= p90 <= p99
            assert direct.detail["requests"] == ioping.QUICK_REQUESTS - 1  # warm-up left out
            assert direct.cpu_s is not None and direct.wall_s is not None
    assert found["overlay_random_direct_p50_s"].detail["filesystem"] == filesystem_type(tmp_path)
    assert list(quick_context.scratch.iterdir()) == list(quick_context.overlay.iterdir()) == []
