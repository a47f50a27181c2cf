"""Statistics, verdicts and settings validation, on synthetic records (no network)."""

from __future__ import annotations

import numpy as np
import pytest

from servebench.clients.base import ErrorKind
from servebench.load import LoadSettings, StabilitySettings, constant, summarize
from servebench.load.records import ERROR_CODE
from servebench.load.stats import Columns, Measurements, agree
from servebench.load.summary import INVALID, VALID, WindowStats, judge


def columns(latency, lag=None, send=None, code=None):
    n = len(latency)
    send = np.arange(n) * 0.01 if send is None else np.asarray(send)
    latency = np.asarray(latency, dtype=np.float64)
    return Columns(
        latency=latency,
        lag=np.zeros(n) if lag is None else np.asarray(lag),
        send=send,
        completion=send + latency,
        code=np.zeros(n, np.int8) if code is None else np.asarray(code, np.int8),
        batch_size=np.full(n, 4, np.int32),
    )


def test_percentiles_rates_and_errors():
    latency = np.linspace(0.001, 0.1, 1000)
    code = np.zeros(1000, np.int8)
    code[:10] = ERROR_CODE[ErrorKind.TIMEOUT]
    code[10:13] = ERROR_CODE[ErrorKind.HTTP_STATUS]
    s = summarize(columns(latency, code=code), mode="open", target_rate=100.0)
    ok = latency[13:]
    assert s.count == 1000 and s.ok == 987 and s.errors == 13
    assert s.errors_by_kind == {"timeout": 10, "http_status": 3}
    assert s.latency_p50 == pytest.approx(np.percentile(ok, 50, method="inverted_cdf"))
    assert s.latency_p99_9 == pytest.approx(np.percentile(ok, 99.9, method="inverted_cdf"))
    assert s.latency_max == pytest.approx(0.1)
    assert s.latency_mean == pytest.approx(ok.mean())
    assert s.achieved_rate == pytest.approx(100.0)
    assert s.duration == pytest.approx(9.99 + 0.1)  # first send to last completion
    assert s.throughput_rps == pytest.approx(987 / s.duration)  # successes only
    assert s.error_rate == pytest.approx(0.013)
    assert s.throughput_ips == pytest.approx(4 * s.throughput_rps)
    judge(s, late_threshold=1e-3, late_limit=0.01, max_error_share=0.01)
    assert s.verdict == INVALID
    assert any(r.startswith("errors: 13 of 1000") for r in s.reasons)


def test_late_share_warns_in_open_loop_and_is_ignored_in_closed_loop():
    lag = np.zeros(1000)
    lag[:20] = 0.005  # 2 % sent 5 ms late, next to 10 ms latencies: a warning, not INVALID
    for mode, warned in (("open", True), ("closed", False)):
        s = summarize(columns(np.full(1000, 0.01), lag=lag), mode=mode, target_rate=None)
        assert s.late_share == pytest.approx(0.02)
        assert s.schedule_lag_p99 == pytest.approx(0.005)
        judge(s, late_threshold=1e-3, late_limit=0.01, max_error_share=0.0)
        assert s.verdict == VALID
        assert bool(s.warnings) == warned
    lag[:20] = 0.008  # now the lag is most of the tail: INVALID
    s = summarize(columns(np.full(1000, 0.01), lag=lag), mode="open", target_rate=None)
    judge(s, late_threshold=1e-3, late_limit=0.01, max_error_share=0.0)
    assert s.verdict == INVALID and "generator fell behind" in s.reasons[0]


def test_empty_run_is_invalid_and_serialises():
    s = summarize(columns([]), mode="open", target_rate=None)
    judge(s, late_threshold=1e-3, late_limit=0.01, max_error_share=0.0, stop_reason="boom")
    assert s.verdict == INVALID
    assert s.reasons[:2] == ["stopped early: boom", "no requests measured"]
    assert s.to_dict()["latency_p50"] is None  # NaN → None for JSON


def test_window_agreement():
    def w(i, tp, lat):
        return WindowStats(i, i, i + 1, 100, 0, tp, lat)

    assert agree([w(0, 100, 0.010), w(1, 105, 0.0105), w(2, 98, 0.0099)], 0.1)
    assert not agree([w(0, 100, 0.010), w(1, 150, 0.010), w(2, 100, 0.010)], 0.1)
    assert not agree([w(0, 100, 0.010), w(1, 100, 0.020), w(2, 100, 0.010)], 0.1)
    assert not agree([w(0, 0, float("nan")), w(1, 0, float("nan"))], 0.1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one of arrivals"),
        ({"arrivals": constant(1), "concurrency": 2, "duration": 1}, "exactly one of arrivals"),
        ({"concurrency": 2}, "give duration, count, or both"),
        ({"concurrency": 0, "duration": 1}, "load.concurrency"),
        ({"concurrency": 2, "duration": -1}, "load.duration"),
        ({"concurrency": 2, "count": 0}, "load.count"),
        ({"concurrency": 2, "duration": 1, "timeout": 0}, "load.timeout"),
        ({"arrivals": constant(1), "duration": 1, "think_time": 0.1}, "load.think_time"),
        ({"concurrency": 2, "duration": 1, "stability": StabilitySettings()}, "load.stability"),
        ({"concurrency": 2, "duration": 1, "generators": 3}, "load.generators"),
        ({"concurrency": 2, "duration": 1, "max_in_flight": 0}, "load.max_in_flight"),
        ({"concurrency": 2, "duration": 1, "late_limit": 2}, "load.late_limit"),
    ],
)
def test_settings_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoadSettings(**kwargs)


def test_stability_settings_validation():
    with pytest.raises(ValueError, match=r"stability\.max_windows"):
        StabilitySettings(max_windows=2, agree=3)
    with pytest.raises(ValueError, match=r"stability\.percentile"):
        StabilitySettings(percentile=100)


def test_throughput_counts_successes_over_the_whole_run_after_the_server_dies():
    """2,400 requests at 200 req/s; the server dies after 882 of them and every later request
    is refused at once. Throughput is the successes over the run's span, not over the span
    of the successes (which would still say 200 req/s)."""
    n, alive = 2400, 882
    send = np.arange(n) / 200.0
    latency = np.where(np.arange(n) < alive, 0.002, 0.0001)
    code = np.zeros(n, np.int8)
    code[alive:] = ERROR_CODE[ErrorKind.CONNECTION_REFUSED]
    s = summarize(columns(latency, send=send, code=code), mode="open", target_rate=200.0)
    span = send[-1] + latency[-1] - send[0]
    assert s.duration == pytest.approx(span)
    assert s.throughput_rps == pytest.approx(alive / span)
    assert s.throughput_rps < 75
    assert s.error_rate == pytest.approx(1518 / 2400)
    assert s.to_dict()["error_rate"] == pytest.approx(0.6325)


def test_throughput_of_a_steady_closed_loop_is_concurrency_over_latency():
    """With the run's span from first send to last completion, 4 workers each doing
    back-to-back 10 ms requests give exactly 400 req/s (no n - 1 correction needed)."""
    per_worker = 250
    send = np.repeat(np.arange(per_worker) * 0.01, 4)
    s = summarize(columns(np.full(send.size, 0.01), send=send), mode="closed", target_rate=None)
    assert s.throughput_rps == pytest.approx(400.0)
    assert s.error_rate == 0.0


def test_measurements_since_returns_only_what_a_reader_has_not_seen():
    """The early stop polls `since(seen)`: across a `columns()` merge of the parts and
    new parts added after it, the rows it reads add up to every row once, in order."""
    measurements = Measurements(0.0, batch_size=1, latency_from_send=False)
    seen: list[float] = []

    def add(latencies: list[float]) -> None:
        measurements.extend(columns(latencies))

    add([1.0, 2.0])
    add([3.0])
    got = measurements.since(0)
    seen += got.latency.tolist()
    measurements.columns()  # merges the parts into one
    add([4.0, 5.0])
    got = measurements.since(len(seen))
    seen += got.latency.tolist()
    assert len(measurements.since(len(seen))) == 0
    add([6.0])
    seen += measurements.since(len(seen)).latency.tolist()
    assert seen == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert measurements.columns().latency.tolist() == seen
