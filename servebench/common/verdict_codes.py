"""The checks behind a load's verdict, as stable codes.

Every reason that makes a run INVALID and every warning that does not carries one of these
codes beside its text (`servebench.load.summary.judge` makes them). The text is for people
and may change wording or figures; the codes are for programs: trials.csv keeps them in
`verdict_reason_codes` and `verdict_warning_codes`, each SLO search step keeps its reasons'
codes, and `servebench recommend`, the load runner's log and the scenario runner's search
decide on them, never on the text. Defined here, at the bottom, because the producers
(`load`, `scenario`, `locust`) and the readers (`analysis`) both need them.

==================== ======== ===========================================================
code                 kind     when
==================== ======== ===========================================================
stopped_early        reason   the load stopped before its end (a stop asked for, a failed
                              worker, a write error); the stop reason says why
server_unreachable   reason   it stopped because the address refused or dropped every
                              request for a while: nobody serves there any more
no_requests          reason   no request was measured
rate_short           reason   open loop: the generator sent fewer requests than scheduled
                              (more than `rate_tolerance` short)
lag_high             reason   open loop: schedule lag p99 is a large part of latency p99
                              (over `late_threshold` and `lag_ratio` of it)
errors               reason   more than `max_error_share` of the requests failed
unstable             reason   stability mode: the windows did not agree
generator_lost       reason   a generator of a gang (`load.gang`) died or failed mid-run:
                              its share is missing (the run is partial), the others' kept
start_skew           reason   a gang's generators may have started further apart than
                              `start_skew_limit` (clock uncertainty plus late starts)
late_sends           warning  open loop: more than `late_limit` of sends left later than
                              `late_threshold` (charged in the latencies)
slo_decided          warning  early stop: the load ended once its SLO question was decided
                              at the stated confidence (a note, not a fault: the run is
                              VALID unless another check says otherwise)
single_run           warning  an SLO decision rests on one run's requests (R = 1): its
                              interval says nothing about a re-run (`common.slo_judge`);
                              settings.csv's rows of one replicate carry it
low_coverage         setting  too few replicates for the median's interval to reach the
                              confidence level (R < 6 at 95 %): its coverage is stated
unstable_replicates  setting  the replicates' coefficient of variation is over 20 %
replicates_missing   setting  fewer replicates counted than planned (failed, INVALID, or the
                              run stopped)
remeasured           setting  a replicate was measured again because something disturbed it
==================== ======== ===========================================================

Codes of kind "setting" are written in settings.csv's `warning_codes`: they qualify a
setting's figures over its replicates, not one load.

The interference warnings are `telemetry.disturbance.judge_interference`'s, from a
replicate's measured window; a replicate with one is measured again in a later round
(the scenario runner decides that). Each is given over its limit, a constant there:

========================== ==============================================================
code                       when
========================== ==============================================================
interference_other_load    the share of all cores' time used by processes other than the
                           server and the generator
interference_steal         the share of all cores' time the hypervisor took (steal)
interference_generator_lag the load's schedule lag p99: the generator itself was held up
========================== ==============================================================
"""

from __future__ import annotations

from enum import StrEnum


class VerdictCode(StrEnum):
    STOPPED_EARLY = "stopped_early"
    SERVER_UNREACHABLE = "server_unreachable"
    NO_REQUESTS = "no_requests"
    RATE_SHORT = "rate_short"
    LAG_HIGH = "lag_high"
    ERRORS = "errors"
    UNSTABLE = "unstable"
    GENERATOR_LOST = "generator_lost"
    START_SKEW = "start_skew"
    LATE_SENDS = "late_sends"
    SLO_DECIDED = "slo_decided"
    SINGLE_RUN = "single_run"
    LOW_COVERAGE = "low_coverage"
    UNSTABLE_REPLICATES = "unstable_replicates"
    REPLICATES_MISSING = "replicates_missing"
    REMEASURED = "remeasured"
    INTERFERENCE_OTHER_LOAD = "interference_other_load"
    INTERFERENCE_STEAL = "interference_steal"
    INTERFERENCE_GENERATOR_LAG = "interference_generator_lag"


# A step of an SLO search with one of these reasons is not a rate the server sustains (its
# requests failed, or none was measured), so it cannot meet the SLO and its latency says
# nothing. Lateness does not count: it is already charged in the latency, measured from
# the intended send time. The scenario runner's search and `recommend` share this rule.
UNUSABLE_STEP = frozenset({VerdictCode.ERRORS, VerdictCode.NO_REQUESTS})

# What disturbed a measurement from outside: a replicate with one is measured again.
INTERFERENCE_CODES = frozenset(
    {
        VerdictCode.INTERFERENCE_OTHER_LOAD,
        VerdictCode.INTERFERENCE_STEAL,
        VerdictCode.INTERFERENCE_GENERATOR_LAG,
    }
)

# How a list of codes is written in one CSV cell.
SEPARATOR = ";"


def join_codes(codes: list[str] | tuple[str, ...]) -> str:
    """The cell text of a list of codes: 'errors;unstable' ('' for none)."""
    return SEPARATOR.join(codes)


def split_codes(text: object) -> tuple[str, ...]:
    """The codes of one cell (none for an empty or missing cell)."""
    if not isinstance(text, str):
        return ()
    return tuple(code for code in (part.strip() for part in text.split(SEPARATOR)) if code)
