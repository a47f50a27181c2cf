"""The recommendation as a person reads it in a terminal (`servebench recommend` without
`--json`): the question, the runs and their prices, then per model and batch size the
headline, the ranked options with their cost and latency lines and why each loses to the
first, and the options without a candidate, grouped by why.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

from servebench.analysis.labels import money
from servebench.analysis.recommend import (
    CLOSED,
    NO_VALID,
    OPEN,
    SEARCH,
    Candidate,
    Query,
    Ranking,
    Recommendation,
    headline,
)
from servebench.analysis.slo import SLO_MISSED, SLO_UNDECIDED


def print_recommendation(console: Console, result: Recommendation, top: int) -> None:
    """`result` on `console`, the `top` best options of each ranking."""
    q = result.query
    how = "estimated from direct trials" if q.estimate else "measured"
    target = f"{q.qps:,.6g} req/s · " if q.qps is not None else ""
    say = lambda text: console.print(escape(text), highlight=False, soft_wrap=True)  # noqa: E731
    say(
        f"target: {target}p{q.percentile:g} ≤ {q.slo_s * 1e3:,.6g} ms · link {q.link} ({how})"
        f" · headroom {q.headroom:.0%}"
    )
    for run in result.runs:
        say(f"run {run.run_id}: {run.instance} at {money(run.usd_per_hour)}/h ({run.price_source})")
    several = len({c.option.run_id for c in result.ranked}) > 1
    for ranking in result.rankings:
        say("")
        if len(result.rankings) > 1:
            say(f"── {ranking.model}, batch {ranking.batch_size} ──")
        bold = escape(headline(ranking, q))
        console.print(f"[bold]{bold}[/bold]", highlight=False, soft_wrap=True)
        tied = {id(c) for c, _ in ranking.tied}
        for n, c in enumerate(ranking.ranked[:top], start=1):
            say(f"#{n} {c.option.label(run=several)}")
            say(f"   {_cost_line(c, q)}")
            say(f"   {_latency_line(c, q.percentile)}")
            if c.loses_because:
                say(f"   {'' if id(c) in tied else 'loses to #1: '}{c.loses_because}")
        if len(ranking.ranked) > top:
            say(f"{len(ranking.ranked) - top} more options meet the SLO (--top shows more)")
        _print_without_candidates(ranking, q, several, say)
    if len(result.rankings) > 1:
        say("")
        say("(each model and batch size is ranked on its own: --model and --batch-size pick one)")
    unanswered = [r for r in result.rankings if r.best is None]
    if not result.ranked:
        kinds = {r.unanswered()[0] for r in unanswered}
        line = (
            "no measured option meets the SLO"
            if kinds == {SLO_MISSED}
            else "no recommendation: no option is shown to meet the SLO (see above: "
            "undecided or without a valid measurement is not a failure to meet it)"
        )
        console.print(f"[red]{escape(line)}[/red]", highlight=False)
    for warning in result.warnings:
        console.print(
            f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True
        )


def _print_without_candidates(
    ranking: Ranking, q: Query, several: bool, say: Callable[[str], None]
) -> None:
    """The options of `ranking` without a candidate, by why: measured over the SLO
    (cannot meet it at any replica count), undecided, or no valid measurement."""
    slo = f"p{q.percentile:g} ≤ {q.slo_s * 1e3:,.6g} ms"
    titles = (
        (SLO_MISSED, f"cannot meet {slo} at any replica count:"),
        (SLO_UNDECIDED, f"undecided at {slo}:"),
        (NO_VALID, "no valid measurement:"),
    )
    for kind, title in titles:
        items = [i for i in ranking.infeasible if i.kind == kind]
        if items:
            say(title)
            for item in items:
                say(f"  {item.option.label(run=several)}: {item.reason}")


def _cost_line(c: Candidate, q: Query) -> str:
    if c.replicas is None:
        return (
            f"{money(c.usd_per_million)} per million inferences at {c.per_replica_rate:,.4g} "
            "req/s per replica"
        )
    plural = "replica" if c.replicas == 1 else "replicas"
    return (
        f"{c.replicas} {plural} × {money(c.option.usd_per_hour)}/h = "
        f"{money(c.usd_per_hour_total)}/h · {money(c.usd_per_million)} per million "
        f"inferences at {q.qps:,.6g} req/s"
    )


def _latency_line(c: Candidate, percentile: float) -> str:
    trial = {SEARCH: "search step", OPEN: "open-loop trial", CLOSED: "closed-loop trial"}
    source = f"the {c.max_rate_source} of {trial[c.max_rate_kind]} {c.max_rate_trial}"
    if c.highest_measured:
        source += "; the highest rate measured: the SLO may hold above it"
    usable = (
        f", {c.usable_rate:,.4g} req/s usable after headroom" if c.usable_rate != c.max_rate else ""
    )
    return (
        f"max {c.max_rate:,.4g} req/s per replica within the SLO ({source}){usable}; "
        f"at {c.per_replica_rate:,.4g} req/s each p{percentile:g} "
        f"{c.expected_latency_s * 1e3:,.1f} ms ({c.expected_how}), "
        f"{c.margin_s * 1e3:,.1f} ms under the SLO"
    )
