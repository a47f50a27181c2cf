"""The one builder of a setting's settings.csv row: what its R replicates say together.

A replicate is one trial row (trials.csv); a setting's row puts its replicates side by
side: per figure (each latency percentile, the SLO's percentile, throughput, rate, the
max rate of an SLO search, cost) the median over replicates, an interval for that median
from the replicates' order statistics, the re-run range and the between-replicate
coefficient of variation (`common.replicates`). Its SLO decision rests on the interval
over replicates, so what moves a p99 from one trial to the next is in it; with R = 1 there
is no such interval, the decision is the one replicate's (its request-level interval)
and the row says so with the judge's warning code (`single_run`).

Which replicates count: those that ran to the end (`ok`), were VALID, and were not
measured again because something disturbed them (their re-measurement counts instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from servebench.common.quantiles import CONFIDENCE
from servebench.common.replicates import cv_band, summarize
from servebench.common.slo_judge import Judgement, judge_slo
from servebench.common.verdict_codes import VerdictCode, join_codes
from servebench.results import SETTING_COLUMNS, SETTING_FIGURES, TrialRow

# A setting row's coordinates, copied from its replicates (they share them).
_COPIED = (
    "server", "api", "setting", "model", "batch_size", "link", "load_kind",
    "load_level", "launch", "protocol", "settings_json", "instance", "usd_per_hour",
    "slo_percentile", "slo_bound_s",
)  # fmt: skip


def counted(row: TrialRow) -> bool:
    """Whether a replicate counts in its setting's row."""
    return row.status == "ok" and row.verdict == "VALID" and not row.remeasured


def build_setting_row(
    trial_id: str,
    replicates: Sequence[TrialRow],
    *,
    planned: int,
    level: float = CONFIDENCE,
) -> dict[str, Any]:
    """The settings.csv row of the setting `trial_id` from all its replicate rows
    (re-measured and failed ones included: they are counted as such)."""
    kept = sorted((r for r in replicates if counted(r)), key=lambda r: r.replicate or 1)
    failed = [r for r in replicates if not r.remeasured and not counted(r)]
    source = kept[0] if kept else replicates[0]
    row: dict[str, Any] = {name: source.get(name) for name in _COPIED}
    row.update(
        trial_id=trial_id,
        replicates_planned=planned,
        replicates=len(kept),
        replicates_failed=len(failed),
        replicates_remeasured=sum(1 for r in replicates if r.remeasured),
        count=sum(r.count or 0 for r in kept),
        errors=sum(r.errors or 0 for r in kept),
        replicate_ids=";".join(r.trial_id for r in kept),
    )
    summaries = {}
    for figure in SETTING_FIGURES:
        values = [_number(r.get(figure)) for r in kept]
        summary = summarize(values, level)
        summaries[figure] = summary
        row.update(
            {
                figure: _cell(summary.median),
                f"{figure}_low": _cell(summary.low),
                f"{figure}_high": _cell(summary.high),
                f"{figure}_rerun_low": _cell(summary.rerun_low),
                f"{figure}_rerun_high": _cell(summary.rerun_high),
                f"{figure}_cv": _cell(summary.cv),
            }
        )
    # What the setting is judged on: the SLO's own percentile, else p99 (an SLO search:
    # its max rate).
    key = (
        "max_rate"
        if source.load_kind == "search"
        else ("slo_latency_s" if source.slo_percentile is not None else "latency_p99")
    )
    main = summaries[key]
    row.update(
        interval_coverage=_cell(main.coverage),
        rerun_coverage=_cell(main.rerun_coverage),
        cv_band=cv_band(main.cv),
    )
    warnings: list[str] = []
    if not kept:
        row["status"] = "failed"
    elif len(kept) < planned:
        row["status"] = "partial"
        warnings.append(VerdictCode.REPLICATES_MISSING)
    else:
        row["status"] = "ok"
    if len(kept) > 1 and main.coverage < level:
        warnings.append(VerdictCode.LOW_COVERAGE)
    if cv_band(main.cv) == "unstable":
        warnings.append(VerdictCode.UNSTABLE_REPLICATES)
    if row["replicates_remeasured"]:
        warnings.append(VerdictCode.REMEASURED)
    judgement = _slo_judgement(kept, row)
    if judgement is not None:
        row["slo_met"] = judgement.verdict
        warnings += [code for code in judgement.codes if code not in warnings]
    elif len(kept) == 1:
        warnings.append(VerdictCode.SINGLE_RUN)
    row["warning_codes"] = join_codes(warnings)
    unknown = set(row) - set(SETTING_COLUMNS)
    assert not unknown, unknown  # the schema and this builder are written together
    return row


def _slo_judgement(kept: Sequence[TrialRow], row: dict[str, Any]) -> Judgement | None:
    """The setting's SLO judgement (`common.slo_judge`), on the SLO percentile's interval
    over replicates — or, with one replicate, on that replicate's request-level interval
    (its trial row's), which says nothing about a re-run (`single_run`). None without an
    SLO, without a counted replicate (nothing valid was measured) or for an SLO search
    (its decision is its max rate's)."""
    bound, percentile = row.get("slo_bound_s"), row.get("slo_percentile")
    if bound is None or percentile is None or not kept or row.get("load_kind") == "search":
        return None
    if len(kept) == 1:
        low, high = kept[0].slo_latency_low, kept[0].slo_latency_high
    else:
        low, high = row.get("slo_latency_s_low"), row.get("slo_latency_s_high")
    return judge_slo(
        _number(low), _number(high), percentile=percentile, bound_s=bound, replicates=len(kept)
    )


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _cell(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)
