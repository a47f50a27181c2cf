"""When generator lateness invalidates a run, and when it is only a warning.

Open-loop latency is measured from the intended send time, so lateness is charged to the
latency; it invalidates a run only when the generator sent short of its schedule or its lag
is a large part of what it measured. Synthetic records: no network, exact numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from servebench.common.verdict_codes import VerdictCode
from servebench.load import LoadSettings, constant, summarize
from servebench.load.stats import Columns
from servebench.load.summary import INVALID, VALID, judge

DEFAULTS = {"late_threshold": 1e-3, "late_limit": 0.01, "max_error_share": 0.01}


def open_run(latency: float, lag: np.ndarray, gap: float = 0.01) -> Columns:
    """Sends scheduled every `gap` s, each leaving `lag` s after its intended time."""
    n = len(lag)
    intended = np.arange(n) * gap
    send = intended + lag
    return Columns(
        latency=np.full(n, latency) + lag,  # from the intended time: the lag is in it
        lag=lag,
        send=send,
        completion=send + latency,
        code=np.zeros(n, np.int8),
        batch_size=np.ones(n, np.int32),
    )


def test_a_few_late_sends_next_to_long_latencies_only_warn() -> None:
    lag = np.zeros(2000)
    lag[::40] = 0.004  # 2.5 % of sends 4 ms late, next to ~50 ms latencies (an LTE link)
    s = judge(summarize(open_run(0.05, lag), mode="open", target_rate=100.0), **DEFAULTS)
    assert s.verdict == VALID and s.reasons == [] and s.reason_codes == []
    assert len(s.warnings) == 1 and s.warnings[0].startswith("generator lag: 2.5% of requests")
    assert s.warning_codes == [VerdictCode.LATE_SENDS]
    assert "4.00 ms" in s.warnings[0]


def test_lag_large_next_to_the_latencies_is_invalid() -> None:
    lag = np.zeros(2000)
    lag[::40] = 0.004  # the same lateness next to 2 ms latencies: the tail is the generator's
    s = judge(summarize(open_run(0.002, lag), mode="open", target_rate=100.0), **DEFAULTS)
    assert s.verdict == INVALID
    assert s.reasons[0].startswith("generator fell behind: schedule lag p99 4.00 ms")
    assert s.reason_codes[0] == VerdictCode.LAG_HIGH


def test_sending_short_of_the_schedule_is_invalid() -> None:
    lag = np.linspace(0, 4.0, 2000)  # drifts 4 s behind a 20 s schedule: 17 % short
    s = judge(summarize(open_run(0.05, lag), mode="open", target_rate=100.0), **DEFAULTS)
    assert s.scheduled_rate == pytest.approx(100.0)
    assert s.achieved_rate == pytest.approx(100.0 / 1.2, rel=1e-3)
    assert s.verdict == INVALID
    assert any(
        r.startswith("generator fell behind: sent 83.3 req/s of the 100.0") for r in s.reasons
    )
    assert VerdictCode.RATE_SHORT in s.reason_codes


def test_thresholds_are_the_callers() -> None:
    lag = np.zeros(2000)
    lag[::40] = 0.004
    relaxed = {**DEFAULTS, "late_threshold": 5e-3, "lag_ratio": 0.5}
    measured = summarize(open_run(0.002, lag), mode="open", target_rate=100.0, late_threshold=5e-3)
    s = judge(measured, **relaxed)
    assert s.verdict == VALID and s.warnings == []  # nothing counts as late past 5 ms
    strict = {**DEFAULTS, "rate_tolerance": 0.0}
    drift = np.linspace(0, 0.2, 2000)  # 1 % short
    s = judge(summarize(open_run(0.5, drift), mode="open", target_rate=100.0), **strict)
    assert s.verdict == INVALID


def test_closed_loop_has_no_schedule_to_fall_behind() -> None:
    lag = np.full(2000, 0.004)
    s = judge(summarize(open_run(0.002, lag), mode="closed", target_rate=None), **DEFAULTS)
    assert s.verdict == VALID and s.warnings == [] and s.scheduled_rate is None


@pytest.mark.parametrize(
    ("option", "field"),
    [({"rate_tolerance": 1.0}, "load.rate_tolerance"), ({"lag_ratio": 0.0}, "load.lag_ratio")],
)
def test_settings_refuse_thresholds_out_of_range(option: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LoadSettings(arrivals=constant(10), duration=1, **option)


def test_cli_takes_the_thresholds_and_names_a_bad_one() -> None:
    from servebench.cli import app

    result = CliRunner().invoke(
        app,
        ["load", "--url", "http://127.0.0.1:9/x", "--rate", "10", "--duration", "1",
         "--lag-ratio", "-1"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.output == "error: --lag-ratio -1: must be > 0\n"


def test_every_reason_and_warning_has_its_code_beside_its_text() -> None:
    """One run that trips every check: each text sits at the same place as its code."""
    lag = np.linspace(0, 4.0, 2000)  # falls behind, and its lag is the tail
    cols = open_run(0.002, lag)
    cols.code[:100] = 1  # 5 % failed
    s = summarize(cols, mode="open", target_rate=100.0)
    s.stable = False
    judge(
        s,
        **DEFAULTS,
        stop_reason="server unreachable for 5 s",
        stop_code=VerdictCode.SERVER_UNREACHABLE,
    )
    assert s.reason_codes == [
        VerdictCode.SERVER_UNREACHABLE, VerdictCode.RATE_SHORT, VerdictCode.LAG_HIGH,
        VerdictCode.ERRORS, VerdictCode.UNSTABLE,
    ]  # fmt: skip
    texts = ["stopped early", "generator fell behind: sent", "generator fell behind: schedule",
             "errors:", "unstable"]  # fmt: skip
    assert all(r.startswith(t) for r, t in zip(s.reasons, texts, strict=True))
    assert s.warning_codes == [VerdictCode.LATE_SENDS] and len(s.warnings) == 1
    empty = judge(summarize(open_run(0.01, np.zeros(0)), mode="open", target_rate=1.0), **DEFAULTS)
    assert empty.reason_codes == [VerdictCode.NO_REQUESTS]
    assert s.to_dict()["reason_codes"] == [str(c) for c in s.reason_codes]  # plain strings


def test_the_load_log_follows_the_codes(caplog: pytest.LogCaptureFixture) -> None:
    """The runner logs what the generator did wrong by code: a reason worded otherwise is
    still logged, and another check's reason is not."""
    from servebench.load import LoadPlan, OneClient
    from servebench.load.combine import summarize_reports
    from servebench.load.engine import EngineReport
    from servebench.load.rules import RulesOutcome

    lag = np.linspace(0, 4.0, 2000)
    plan = LoadPlan(LoadSettings(arrivals=constant(100.0), duration=20.0), OneClient(object))
    with caplog.at_level("WARNING", logger="servebench.load.combine"):
        reports = [EngineReport(columns=open_run(0.05, lag))]
        summary = summarize_reports(plan, reports, RulesOutcome())
    logged = [r.getMessage() for r in caplog.records]
    assert VerdictCode.RATE_SHORT in summary.reason_codes
    assert logged == [f"load {text}" for text in summary.reasons + summary.warnings]
