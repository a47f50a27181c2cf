"""Early stop (issue 23): a load ends once its SLO question is decided at the stated
confidence, never before its minimum duration and request count, and never while the
interval still straddles the bound. Its looks spend one error budget (issue 34,
tests/test_error_spending.py), and the row decides at the level the deciding look had.

The server is the in-process HTTP stand-in (tests/server_checks.py) because the close
case needs a known service time: every 100th request it answers 150 ms late, the rest at
once, so exactly 1 % of latencies are over a 50 ms p99 bound, a share no request count
decides. The far cases are the same stand-in with a bound far above or below every
latency.
"""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import pytest
from server_checks import StubHandler, http_stub

from servebench.common.quantiles import decides
from servebench.common.verdict_codes import VerdictCode
from servebench.load import (
    EarlyStopSettings,
    LoadPlan,
    LoadSettings,
    OneClient,
    run,
)
from servebench.load.summary import VALID
from servebench.scenario.validate import ScenarioError, load_scenario
from servebench.trial_row import Slo, TrialCoordinates, build_row


class _Fast(StubHandler):
    def do_POST(self) -> None:
        self.read_body()
        self.reply(200, b"{}", "application/json")


class _OnePercentSlow(StubHandler):
    """Every 100th request 150 ms late (counted over the stub's whole life)."""

    seen = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.read_body()
        with _OnePercentSlow.lock:
            _OnePercentSlow.seen += 1
            slow = _OnePercentSlow.seen % 100 == 0
        if slow:
            time.sleep(0.150)
        self.reply(200, b"{}", "application/json")


def _load(url: str, rule: EarlyStopSettings, duration: float, generators: int = 1):
    from servebench.clients.factory import create_client

    factory = functools.partial(create_client, "http", url, "test")
    settings = LoadSettings(
        concurrency=generators, duration=duration, early_stop=rule, generators=generators
    )
    return run(LoadPlan(settings, OneClient(factory)), handle_signals=False)


@pytest.mark.parametrize(
    ("bound_s", "decision", "generators"),
    # 10 s is the request timeout: no latency can be over it, however busy the machine.
    [(10.0, "met", 1), (1e-6, "missed", 1), (10.0, "met", 2)],
    ids=["far-under", "far-over", "far-under-gang"],
)
def test_a_trial_far_from_its_slo_stops_after_the_minimums(
    bound_s: float, decision: str, generators: int
) -> None:
    """One process, or a gang of two whose coordinator decides on both generators' merged
    counts and stops them both."""
    rule = EarlyStopSettings(99.0, bound_s, min_duration=0.5, min_requests=400, every=0.1)
    with http_stub(_Fast) as url:
        summary = _load(url, rule, duration=30.0, generators=generators)
    assert summary.verdict == VALID, summary.reasons
    assert summary.warning_codes == [VerdictCode.SLO_DECIDED]
    assert summary.stop_reason is not None and summary.stop_reason.startswith(f"SLO {decision}")
    # Not before the minimums (the first check waits for both), long before the 30 s end:
    # the error spending lets the looks of the first tenth or so of a load spend almost
    # nothing, then a load this far from its bound is decided at once.
    assert summary.ok >= 400 and summary.duration >= 0.5
    assert summary.duration < 15.0
    # Decided at the level its look could spend, stricter than the load's 95 %.
    assert summary.slo_confidence_level is not None and summary.slo_confidence_level > 0.999
    # The row decides the same way, from the same requests and the one in flight at the stop.
    where = TrialCoordinates(
        "t", 1, "stub", "http", "stub", "m", 1, "direct", "concurrency", 1.0, "local", "http"
    )
    row = build_row(where, summary, slo=Slo(99.0, bound_s))
    assert row.slo_met == decision and row.stop_reason == summary.stop_reason
    assert row.slo_confidence_level == summary.slo_confidence_level


def test_a_trial_at_its_slo_is_never_stopped() -> None:
    """1 % over a p99 bound: the interval straddles it at every count, so the load runs
    its whole duration and the row says undecided, with no count that would decide it."""
    rule = EarlyStopSettings(99.0, 0.050, min_duration=0.2, min_requests=300, every=0.1)
    _OnePercentSlow.seen = 0
    with http_stub(_OnePercentSlow) as url:
        summary = _load(url, rule, duration=4.0)
    assert summary.stop_reason is None and VerdictCode.SLO_DECIDED not in summary.warning_codes
    assert summary.ok >= 300  # the checks ran with enough requests to decide, had it been
    over = int((summary.latencies > 0.050).sum())
    assert decides(summary.ok, summary.ok - over, 99.0) is None
    # The end is the final look: it decides at what the earlier looks left, close to 95 %.
    assert summary.slo_confidence_level is not None
    assert 0.95 <= summary.slo_confidence_level < 0.97
    where = TrialCoordinates(
        "t", 1, "stub", "http", "stub", "m", 1, "direct", "concurrency", 1.0, "local", "http"
    )
    row = build_row(where, summary, slo=Slo(99.0, 0.050))
    assert row.slo_met == "undecided"


def test_the_scenario_asks_for_early_stop_with_an_slo(tmp_path: Path) -> None:
    from scenario_checks import TINY_WORKLOAD, tiny_scenario, write

    from servebench.scenario.plan import expand
    from servebench.scenario.trial import load_settings

    workload = {**TINY_WORKLOAD, "stop": {"confidence": 0.9}}
    slo = {"percentile": 99, "latency_ms": 500}
    path = write(tmp_path, tiny_scenario("tiny", workload=workload, slo=slo), "tiny.yaml")
    scenario = load_scenario(path)
    trial = expand(scenario, tmp_path).trials[0]
    settings = load_settings(scenario, trial, trial.id, tmp_path)
    assert settings.early_stop is not None and settings.confidence == 0.9
    assert settings.early_stop.bound_s == 0.5 and settings.early_stop.min_requests == 500
    without = write(tmp_path, tiny_scenario("tiny", workload=workload), "no-slo.yaml")
    with pytest.raises(ScenarioError, match="slo"):
        load_scenario(without)


def test_early_stop_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"stop\.min_requests"):
        EarlyStopSettings(99.0, 0.05, min_requests=0)


def test_a_scenario_trial_far_under_its_slo_stops_early_on_the_real_triton(
    tmp_path: Path, triton_install
) -> None:
    """The scenario runner's path end to end: a 60 s trial far under a 5 s p99 SLO ends
    after its minimums, VALID, and its row says why and that the SLO was met."""
    from scenario_checks import TINY_WORKLOAD, tiny_scenario, write

    from servebench.analysis.loader import read_trials
    from servebench.results import TRIALS_FILE
    from servebench.scenario.runner import ScenarioRunner

    # Closed loop: the generator's lateness on this shared 2-core machine is not what is
    # tested here (an open-loop trial's verdict would judge it).
    workload = {
        **TINY_WORKLOAD,
        "mode": "closed",
        "rates": [],
        "concurrency": [2],
        "batch_sizes": [1],
        "duration_s": 60.0,
        "stop": {"min_duration_s": 0.5, "min_requests": 400},
    }
    slo = {"percentile": 99, "latency_ms": 5000}
    path = write(tmp_path, tiny_scenario("early", workload=workload, slo=slo), "early.yaml")
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    (row,) = read_trials(outcome.directory.path / TRIALS_FILE).to_dict("records")
    assert row["verdict"] == "VALID", row["verdict_reasons"]
    assert row["verdict_warning_codes"].split(";").count("slo_decided") == 1
    assert row["stop_reason"].startswith("SLO met: p99 within 5000 ms")
    assert row["slo_met"] == "met" and row["ok"] >= 400 and row["duration"] < 60
    assert row["confidence_level"] == 0.95 and row["slo_latency_high"] <= 5.0
