"""The numbers behind the report: transfer vs inference, roofline, host peak."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_analysis_rundir import (
    COMPUTE_FIXED_S,
    COMPUTE_PER_SAMPLE_S,
    HOST_PEAK_FLOPS,
    MODEL,
    REQUEST_OVERHEAD,
    RESPONSE_BYTES_PER_SAMPLE,
    SAMPLE_BYTES,
    make_run_dir,
)

from servebench.analysis.breakdown import (
    analytic_link_time,
    by_link_and_batch,
    transfer_breakdown,
)
from servebench.analysis.loader import load_run
from servebench.analysis.roofline import (
    Ceiling,
    arithmetic_intensity,
    host_ceiling,
    roofline_points,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    return load_run(make_run_dir(tmp_path_factory.mktemp("numbers")), records=False)


def _wifi_analytic(batch: int) -> float:
    up = (SAMPLE_BYTES * batch + REQUEST_OVERHEAD) * 8 / 15e6
    down = (RESPONSE_BYTES_PER_SAMPLE * batch + REQUEST_OVERHEAD) * 8 / 30e6
    return 0.020 + up + down


def test_analytic_link_time() -> None:
    # 20 ms RTT, 12.5 kB up at 15 Mbit/s (6.67 ms), 1 kB down at 30 Mbit/s (0.27 ms).
    assert analytic_link_time(0.020, 15, 30, 12_500, 1_000) == pytest.approx(0.026933, abs=1e-6)
    # An unlimited direction costs nothing beyond the RTT; direct costs nothing at all.
    assert analytic_link_time(0.070, math.nan, math.nan, 1e6, 1e6) == pytest.approx(0.070)
    assert analytic_link_time(math.nan, math.nan, math.nan, 10, 10) == 0.0


def test_breakdown_per_trial(run) -> None:
    rows = transfer_breakdown(run.trials)
    assert len(rows) == 16  # every ok trial; the failed one is left out
    direct = rows[rows["link"] == "direct"]
    assert (direct["link_measured_s"] == 0).all() and (direct["link_analytic_s"] == 0).all()
    wifi = rows[rows["link"] == "wifi"]
    assert wifi["direct_trial_id"].notna().all()
    trials = run.trials.set_index("trial_id")
    for r in wifi.itertuples():
        # measured = this trial's median minus its direct twin's median, exactly
        expected = (
            trials.loc[r.trial_id, "latency_p50"] - trials.loc[r.direct_trial_id, "latency_p50"]
        )
        assert r.link_measured_s == pytest.approx(expected)
        assert trials.loc[r.direct_trial_id, "setting"] == trials.loc[r.trial_id, "setting"]
        assert trials.loc[r.direct_trial_id, "load_level"] == trials.loc[r.trial_id, "load_level"]
        assert r.link_analytic_s == pytest.approx(_wifi_analytic(r.batch_size), rel=1e-9)
        # The emulated link adds jitter (≈ 4 ms on average) and queueing on top of the
        # analytic figure, never less than ~the analytic figure.
        assert r.link_analytic_s - 0.002 < r.link_measured_s < r.link_analytic_s + 0.015
        assert r.inference_source == "server_compute"
        service = COMPUTE_FIXED_S + COMPUTE_PER_SAMPLE_S * r.batch_size
        assert r.inference_s == pytest.approx(service, rel=0.03)


def test_transfer_rivals_inference_at_small_batch_only(run) -> None:
    """InferBench's network finding, as the report's table shows it."""
    table = by_link_and_batch(transfer_breakdown(run.trials)).set_index("batch_size")
    assert list(table["link"]) == ["wifi", "wifi"] and list(table.index) == [1, 16]
    assert table.loc[1, "trials"] == 4
    assert table.loc[1, "transfer_share"] > 0.7  # the link dominates at batch 1 (~80 %)
    assert table.loc[16, "transfer_share"] < 0.5  # inference dominates at batch 16 (~44 %)
    assert table.loc[1, "link_analytic_s"] == pytest.approx(_wifi_analytic(1))
    assert table.loc[1, "inference_s"] == pytest.approx(
        COMPUTE_FIXED_S + COMPUTE_PER_SAMPLE_S, rel=0.03
    )


def test_breakdown_without_server_compute_uses_direct_latency(tmp_path: Path) -> None:
    data = load_run(make_run_dir(tmp_path, duration=30, server_compute=False), records=False)
    rows = transfer_breakdown(data.trials)
    wifi = rows[rows["link"] == "wifi"]
    assert (wifi["inference_source"] == "direct_latency").all()
    assert (wifi["inference_s"] == wifi["direct_latency_p50"]).all()
    table = by_link_and_batch(rows)
    assert set(table["inference_source"]) == {"direct_latency"}


def test_breakdown_without_direct_twin_falls_back_to_analytic(run) -> None:
    trials = run.trials[run.trials["link"] != "direct"]
    rows = transfer_breakdown(trials)
    assert rows["link_measured_s"].isna().all()
    assert rows["direct_trial_id"].isna().all()
    # Server compute is still there, so the share comes from the analytic link time.
    r = rows.iloc[0]
    share = r.link_analytic_s / (r.link_analytic_s + r.inference_s)
    assert r.transfer_share == pytest.approx(share)


def test_arithmetic_intensity() -> None:
    # 1 GFLOP/sample, 10 MB of weights, 1 MB of activations per sample.
    assert arithmetic_intensity(1e9, 10e6, 1e6, 1) == pytest.approx(1e9 / 11e6)
    assert arithmetic_intensity(1e9, 10e6, 1e6, 10) == pytest.approx(10e9 / 20e6)
    assert math.isnan(arithmetic_intensity(1e9, 0, 0, 4))


def test_roofline_points(run) -> None:
    points = roofline_points(run.trials).set_index("trial_id")
    trials = run.trials.set_index("trial_id")
    assert len(points) == 16
    for trial_id, p in points.iterrows():
        t = trials.loc[trial_id]
        b = t["batch_size"]
        assert p["intensity"] == pytest.approx(
            MODEL["flops_per_sample"] * b / (MODEL["weight_bytes"] + MODEL["activation_bytes"] * b)
        )
        assert p["achieved_flops"] == pytest.approx(t["throughput_ips"] * MODEL["flops_per_sample"])
        assert p["attainable_flops"] == HOST_PEAK_FLOPS
        assert p["efficiency"] == pytest.approx(p["achieved_flops"] / HOST_PEAK_FLOPS)
    # Batching raises both intensity and achieved FLOP/s.
    by_batch = points.groupby("batch_size")[["intensity", "achieved_flops"]].max()
    assert (by_batch.loc[16] > by_batch.loc[1]).all()
    assert host_ceiling(run.trials) == Ceiling(HOST_PEAK_FLOPS, None)


def test_roofline_with_bandwidth_slope(tmp_path: Path) -> None:
    data = load_run(make_run_dir(tmp_path, duration=20, host_peak_bw=5e9), records=False)
    ceiling = host_ceiling(data.trials, data.run)
    assert ceiling == Ceiling(HOST_PEAK_FLOPS, 5e9) and ceiling.ridge == pytest.approx(12.0)
    points = roofline_points(data.trials)
    expected = np.minimum(HOST_PEAK_FLOPS, 5e9 * points["intensity"])
    assert np.allclose(points["attainable_flops"], expected)
    assert ceiling.attainable(np.array([1.0, 100.0])).tolist() == [5e9, HOST_PEAK_FLOPS]


def test_roofline_skips_trials_without_counts(run) -> None:
    trials = run.trials.copy()
    trials.loc[trials.index[:4], "flops_per_sample"] = np.nan
    assert len(roofline_points(trials)) == 12
    assert roofline_points(trials.assign(status="failed")).empty
    no_peak = roofline_points(trials.drop(columns="host_peak_flops").assign(host_peak_flops=np.nan))
    assert no_peak["attainable_flops"].isna().all()


def test_breakdown_of_empty_run_is_empty() -> None:
    empty = pd.DataFrame({c: [] for c in ("trial_id", "status", "latency_p50")})
    assert transfer_breakdown(empty).empty
    assert by_link_and_batch(transfer_breakdown(empty)).empty
