"""The fio probe: its parser on real fio JSON, and a live quick run on both folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servebench.overhead.probes import fio

# Captured here: fio 3.33, a 4 KiB random-read job (16 MiB file, 4 MiB read, libaio, QD 16).
CAPTURED = Path(__file__).parent / "data" / "fio_randread.json"
RAND_READ, SEQ_READ = fio.JOBS[2], fio.JOBS[1]
# No single device moves 100 GiB/s or serves 10 M IOPS: a figure above is a unit error.
MAX_MIBS, MAX_IOPS = 100 * 1024, 1e7


def test_parse_output_reads_iops_and_bandwidth() -> None:
    text = CAPTURED.read_text()
    iops, section = fio.parse_output(text, RAND_READ)
    assert iops == pytest.approx(73142.857143)
    assert section["io_bytes"] == 4 * 2**20
    mibs, _ = fio.parse_output(text, SEQ_READ)  # same section, bandwidth figure
    assert mibs == pytest.approx(299593142 / 2**20)


def test_parse_output_refuses_failures() -> None:
    report = json.loads(CAPTURED.read_text())
    with pytest.raises(ValueError, match="printed no JSON"):
        fio.parse_output("fio: no such option", RAND_READ)
    with pytest.raises(ValueError, match="did no write I/O"):
        fio.parse_output(json.dumps(report), fio.JOBS[0])
    report["jobs"][0]["error"] = 5
    with pytest.raises(ValueError, match="failed with error 5"):
        fio.parse_output(json.dumps(report), RAND_READ)
    report["jobs"] = []
    with pytest.raises(ValueError, match="0 jobs"):
        fio.parse_output(json.dumps(report), RAND_READ)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_quick_run_gives_plausible_figures(quick_context) -> None:
    found = {m.metric: m for m in fio.run(quick_context)}
    assert set(found) == {
        f"{folder}_{name}"
        for folder in ("scratch", "overlay")
        for name in ("seq_write_mibs", "seq_read_mibs", "rand_read_iops")
    }
    for folder in ("scratch", "overlay"):
        for name in ("seq_write_mibs", "seq_read_mibs"):
            assert 0 < found[f"{folder}_{name}"].value < MAX_MIBS
            assert found[f"{folder}_{name}"].unit == "MiB/s"
        random = found[f"{folder}_rand_read_iops"]
        assert 0 < random.value < MAX_IOPS
        assert random.detail["io_mib"] == fio.QUICK_RANDOM_MIB
        assert random.cpu_s is not None and random.cpu_s > 0
    assert list(quick_context.scratch.iterdir()) == list(quick_context.overlay.iterdir()) == []
