"""Cold start on the real local Triton: fresh servers, timed start, load, first and warm calls."""

from __future__ import annotations

import statistics

import pytest

from servebench.servers.cold_start import METRICS, describe, measure_cold_start
from servebench.servers.local import LocalTritonServer


def test_local_triton_cold_start_is_plausible_and_ordered(
    triton_batching_model, tmp_path_factory
) -> None:
    repository = triton_batching_model.repository
    name = triton_batching_model.name
    seen = []

    def make() -> LocalTritonServer:
        return LocalTritonServer(repository, run_dir=tmp_path_factory.mktemp("cold"))

    result = measure_cold_start(make, name, repeats=2, warm_requests=5, on_sample=seen.append)
    assert result.error is None
    assert result.server == "triton-local" and result.model == name
    assert len(result.samples) == 2 and seen == result.samples
    for sample in result.samples:
        assert 0 < sample.server_start_s < 30
        assert 0 < sample.model_load_s < 120
        assert 0 < sample.warm_median_s < 5
        assert 0 < sample.first_infer_s < 30
        assert sample.to_first_answer_s == pytest.approx(
            sample.server_start_s + sample.model_load_s + sample.first_infer_s
        )
    # In explicit mode the server is up before any model exists, and a model load starts
    # a python-backend process and an onnxruntime session: load takes longer than start.
    assert statistics.median(result.values("model_load_s")) > statistics.median(
        result.values("server_start_s")
    )
    # The first request after a load pays for first-use initialisation.
    assert statistics.median(result.values("first_infer_s")) > statistics.median(
        result.values("warm_median_s")
    )
    dist = result.distribution()
    assert set(dist) == set(METRICS)
    assert dist["model_load_s"]["n"] == 2
    assert (
        dist["model_load_s"]["min"] <= dist["model_load_s"]["median"] <= dist["model_load_s"]["max"]
    )
    rows = result.rows()
    assert rows[0]["server"] == "triton-local" and rows[0]["first_over_warm"] > 0


def test_a_failing_repeat_keeps_what_was_measured(triton_batching_model, tmp_path_factory) -> None:
    repository = triton_batching_model.repository
    result = measure_cold_start(
        lambda: LocalTritonServer(repository, run_dir=tmp_path_factory.mktemp("cold-bad")),
        "no-such-model",
        repeats=3,
    )
    assert result.samples == []
    assert result.error.startswith("repeat 0: ") and "no-such-model" in result.error
    assert result.distribution() == {}


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="repeats: must be >= 1"):
        measure_cold_start(lambda: None, "m", repeats=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="load: must be 'request' or 'at_start'"):
        measure_cold_start(lambda: None, "m", load="lazy")  # type: ignore[arg-type,return-value]
    assert describe([1.0, 2.0, 3.0])["median"] == 2.0
