"""`servebench recommend`: the cheapest measured deployment that serves a target load
within a p99 SLO, from one or more run directories (servebench.analysis.recommend).

Exit status: 0 a recommendation, 1 no measured option meets the SLO (the reasons are
printed), 2 bad input (a run directory, an option, a run without the needed columns).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape

from servebench.cli.command import with_options
from servebench.cli.usage import fail
from servebench.cli.values import Number, RunDir
from servebench.common.limits import MAX_BATCH, MAX_RATE, MAX_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from servebench.analysis.loader import RunData
    from servebench.analysis.recommend import (
        Candidate,
        LinkCost,
        Query,
        Ranking,
        Recommendation,
    )

console = Console(width=None if sys.stdout.isatty() else 160)

# A target load is served by many replicas, each within a scenario's max_rate: a million of
# them is past any deployment (and past what the replica search tries).
MAX_QPS = MAX_RATE * 10_000


@dataclass(frozen=True)
class RecommendOptions:
    """`servebench recommend`'s arguments and options, as parsed (`cli.command`)."""

    run_dirs: Annotated[
        list[Path],
        typer.Argument(help="run directories (results/<run-id>); one per machine", parser=RunDir()),
    ]
    qps: Annotated[
        float | None,
        typer.Option(
            "--qps",
            help="requests per second to serve (default: rank by cost per million inferences)",
            parser=Number(float, gt=0, le=MAX_QPS, why="10,000 replicas at a scenario's max_rate"),
        ),
    ] = None
    slo_p99_ms: Annotated[
        float | None,
        typer.Option(
            "--slo-p99-ms",
            help="a p99 bound to decide on (default: the runs' SLO, on its own percentile)",
            parser=Number(float, gt=0, le=MAX_SECONDS * 1e3, unit=" ms"),
        ),
    ] = None
    link: Annotated[
        str, typer.Option(help="the link clients reach the server over (a profile name)")
    ] = "direct"
    link_model: Annotated[
        Literal["measured", "analytic"],
        typer.Option(
            help="measured: trials over --link; analytic: direct trials + the link's RTT and "
            "transfer time (an estimate)"
        ),
    ] = "measured"
    headroom: Annotated[
        float,
        typer.Option(
            help="share of each replica's max rate kept free, 0 to 0.99",
            parser=Number(float, ge=0, le=0.99),
        ),
    ] = 0.0
    instances: Annotated[
        str | None,
        typer.Option(help="only these instance types, comma-separated (g4dn.xlarge,c6i.xlarge)"),
    ] = None
    model: Annotated[
        str | None,
        typer.Option(help="only this model (its id, or its name without the hash: conv-d2-w32)"),
    ] = None
    batch_size: Annotated[
        int | None,
        typer.Option(
            help="only requests of this batch size", parser=Number(int, ge=1, le=MAX_BATCH)
        ),
    ] = None
    as_instance: Annotated[
        list[str] | None,
        typer.Option(
            "--as-instance",
            help="RUN=TYPE: the instance type a run's machine stands for (repeatable)",
        ),
    ] = None
    top: Annotated[
        int, typer.Option(help="how many options to print", parser=Number(int, ge=1, le=10_000))
    ] = 5
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for machines")] = False

    def query(self, runs: list[RunData]) -> Query:
        """The question these options ask of `runs`: their SLO unless `--slo-p99-ms` gives
        a p99 bound; RecommendError where an option names what the runs did not measure."""
        from servebench.analysis.recommend import Query, runs_slo
        from servebench.analysis.slo import RunSlo

        slo_ms = self.slo_p99_ms
        slo = RunSlo(99.0, slo_ms / 1e3) if slo_ms is not None else runs_slo(runs)
        query = Query(
            slo_s=slo.bound_s,
            percentile=slo.percentile,
            qps=self.qps,
            link=self.link,
            headroom=self.headroom,
            link_cost=_link_cost(self.link) if self.link_model == "analytic" else None,
            instances=_instance_list(self.instances),
            model=self.model,
            batch_size=self.batch_size,
        )
        _check_measured(runs, query)
        return query


@with_options(RecommendOptions)
def recommend(options: RecommendOptions) -> None:
    """The cheapest measured setting × instance × replica count that keeps the SLO's
    percentile within its bound at the target load, the runners-up and why they lose, and
    the settings that cannot meet the SLO at any replica count."""
    from servebench.analysis.recommend import to_json

    result = _decide(options)
    if options.as_json:
        print(json.dumps(to_json(result), indent=2))
    else:
        _print(result, options.top)
    if not result.ranked:
        raise typer.Exit(code=1)


def _decide(o: RecommendOptions) -> Recommendation:
    """The runs read and priced, and the recommendation for the options' question; a
    run, an option or a price that cannot be used is one line, exit 2."""
    from servebench.analysis.loader import ResultDirError, load_run
    from servebench.analysis.recommend import RecommendError, price_run, recommend
    from servebench.pricing import PriceError, load_prices

    try:
        runs = [load_run(path, records=False, trials=True) for path in o.run_dirs]
    except ResultDirError as err:
        raise fail(str(err)) from None
    try:
        mapping = _as_instance(o.as_instance or [], o.run_dirs, runs)
        prices = load_prices()
        priced = [price_run(run, prices, mapping.get(n)) for n, run in enumerate(runs)]
        return recommend(priced, o.query(runs))
    except (RecommendError, PriceError) as err:
        raise fail(str(err)) from None


def _as_instance(pairs: list[str], paths: list[Path], runs: list[RunData]) -> dict[int, str]:
    """--as-instance RUN=TYPE, by the run's index: RUN is the path as given, the folder's
    name or the run id."""
    from servebench.analysis.recommend import RecommendError

    mapping: dict[int, str] = {}
    for pair in pairs:
        key, sep, instance = pair.partition("=")
        if not sep or not key or not instance:
            raise RecommendError(f"--as-instance {pair!r}: write RUN=TYPE, e.g. run-a=g4dn.xlarge")
        matches = [
            n
            for n, (path, run) in enumerate(zip(paths, runs, strict=True))
            if key in (str(path), str(path).rstrip("/"), path.name, run.run_id)
        ]
        if not matches:
            names = ", ".join(run.run_id for run in runs)
            raise RecommendError(f"--as-instance {pair!r}: {key} is none of the runs ({names})")
        for n in matches:
            mapping[n] = instance
    return mapping


def _check_measured(runs: list[RunData], query: Query) -> None:
    """--model, --batch-size and --link name something the runs measured: otherwise no
    option is left, and the answer ("no trial over link direct") would blame another option."""
    from servebench.analysis.recommend import DIRECT, RecommendError

    ok = [run.ok_decisions for run in runs]
    models = sorted({str(m) for trials in ok for m in trials["model"].dropna()})
    if query.model is not None and not any(query.wants_model(m) for m in models):
        raise RecommendError(
            f"--model {query.model}: no run measured that model "
            f"(measured: {', '.join(models) or 'none'})"
        )
    if query.batch_size is not None:
        sizes = sorted({int(b) for trials in ok for b in trials["batch_size"].fillna(1)})
        if query.batch_size not in sizes:
            raise RecommendError(
                f"--batch-size {query.batch_size}: no run measured that batch size "
                f"(measured: {', '.join(map(str, sizes)) or 'none'})"
            )
    links = sorted({str(x) for trials in ok for x in trials["link"].dropna()})
    wanted = DIRECT if query.estimate else query.link
    if links and wanted not in links:
        hint = (
            f"; --link-model analytic estimates {query.link} from direct trials"
            if not query.estimate and DIRECT in links
            else ""
        )
        option = f"--link {query.link}" if not query.estimate else "--link-model analytic"
        raise RecommendError(
            f"{option}: no run measured a trial over link {wanted} "
            f"(measured: {', '.join(links)}){hint}"
        )


def _link_cost(link: str) -> LinkCost:
    from servebench.analysis.recommend import DIRECT, LinkCost, RecommendError
    from servebench.netem.errors import ProfileError
    from servebench.netem.profiles import resolve_link

    if link == DIRECT:
        raise RecommendError(
            "--link-model analytic estimates an emulated link from direct trials: "
            "give --link NAME (wifi, lte, a profile file)"
        )
    try:
        profile = resolve_link(link)
    except ProfileError as err:
        raise RecommendError(f"--link {link}: {err}") from None
    return LinkCost(profile.name, profile.rtt_s, profile.up_mbps, profile.down_mbps)


def _instance_list(text: str | None) -> tuple[str, ...] | None:
    from servebench.analysis.recommend import RecommendError

    if text is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise RecommendError(f"--instances {text!r}: name at least one instance type")
    return names


def _print(result: Recommendation, top: int) -> None:
    from servebench.analysis.labels import money
    from servebench.analysis.recommend import headline
    from servebench.analysis.slo import SLO_MISSED

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
    from servebench.analysis.recommend import NO_VALID
    from servebench.analysis.slo import SLO_MISSED, SLO_UNDECIDED

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
    from servebench.analysis.labels import money

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
    from servebench.analysis.recommend import CLOSED, OPEN, SEARCH

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
