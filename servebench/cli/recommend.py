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

from servebench.cli.command import with_options
from servebench.cli.usage import fail
from servebench.cli.values import Number, RunDir
from servebench.common.limits import MAX_BATCH, MAX_RATE, MAX_SECONDS

if TYPE_CHECKING:
    from servebench.analysis.loader import RunData
    from servebench.analysis.recommend import LinkCost, Query, Recommendation

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
        from servebench.analysis.recommend_query import check_measured, instance_list
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
            instances=instance_list(self.instances),
            model=self.model,
            batch_size=self.batch_size,
        )
        check_measured(runs, query)
        return query


@with_options(RecommendOptions)
def recommend(options: RecommendOptions) -> None:
    """The cheapest measured setting × instance × replica count that keeps the SLO's
    percentile within its bound at the target load, the runners-up and why they lose, and
    the settings that cannot meet the SLO at any replica count."""
    from servebench.analysis.recommend import to_json
    from servebench.analysis.recommend_text import print_recommendation

    result = _decide(options)
    if options.as_json:
        print(json.dumps(to_json(result), indent=2))
    else:
        print_recommendation(console, result, options.top)
    if not result.ranked:
        raise typer.Exit(code=1)


def _decide(o: RecommendOptions) -> Recommendation:
    """The runs read and priced, and the recommendation for the options' question; a
    run, an option or a price that cannot be used is one line, exit 2."""
    from servebench.analysis.loader import ResultDirError, load_run
    from servebench.analysis.recommend import RecommendError, price_run, recommend
    from servebench.analysis.recommend_query import instance_mapping
    from servebench.pricing import PriceError, load_prices

    try:
        runs = [load_run(path, records=False, trials=True) for path in o.run_dirs]
    except ResultDirError as err:
        raise fail(str(err)) from None
    try:
        mapping = instance_mapping(o.as_instance or [], o.run_dirs, runs)
        prices = load_prices()
        priced = [price_run(run, prices, mapping.get(n)) for n, run in enumerate(runs)]
        return recommend(priced, o.query(runs))
    except (RecommendError, PriceError) as err:
        raise fail(str(err)) from None


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
