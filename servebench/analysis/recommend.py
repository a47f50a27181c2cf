"""The cheapest deployment that serves a target load within a latency SLO, from measured
trials: what `servebench recommend` prints and the report's Recommendation box shows.

For every (run × server setting × model × batch size) measured over the asked-for link,
the measured operating points (offered rate, latency at the SLO percentile) give the
highest rate one replica sustains within the SLO. A target of Q requests/s then needs
replicas = ceil(Q / (max rate × (1 − headroom))), which cost replicas × the instance's
price per hour; the latency expected at the per-replica load Q / replicas is interpolated
between the measured points around it and never extrapolated past them. Options are
ranked by cost; each one after the first says why it loses (cost, latency margin), and
the settings that cannot meet the SLO at any replica count say why.

Where the points come from, best first: SLO-search steps (open loop, each step one
offered rate), open-loop rate trials (their offered rate when VALID, as LoadGen's
Server scenario reports its target; else their achieved rate), and — only when a setting has
nothing else, with a warning — closed-loop trials (clients in flight; their latency is
measured from the actual send, so it leaves out the queueing a fixed arrival rate sees).
A run stands for one instance type: its scenario's `cost.instance` (in trials.csv) or an
`as_instance` mapping for runs on other hardware. This module reads result files only.

How sure: where a trial row has confidence intervals (`confidence_level`, issue 23), its
point's latency is the interval's high bound, so an option is recommended only where the
SLO is met with that confidence; a row whose high bound could not be found (too few
requests for the percentile) does not meet any SLO. Each point also keeps its low bound,
and each candidate is priced a second time on the low bounds: its cost interval runs from
that optimistic cost to the safe one. When the second candidate's interval reaches the
first's safe cost, the two are a "tie within the noise": more requests could order them
either way. SLO-search steps keep one latency each (the runner's rule), as do older runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servebench.analysis.errors import AnalysisError
from servebench.analysis.loader import RunData
from servebench.analysis.search import search_steps
from servebench.analysis.slo import (
    SLO_MISSED,
    SLO_UNDECIDED,
    RunSlo,
    decide,
    holds,
    requests_needed,
    too_few,
    trial_slos,
)
from servebench.common.paired import HIGHER, Comparison, compare_paired
from servebench.common.readable import missing
from servebench.common.verdict_codes import UNUSABLE_STEP
from servebench.pricing import (
    InstancePrice,
    PriceError,
    cost_per_million,
    price_of,
    replicas_needed,
)

DIRECT = "direct"
# trials.csv's latency columns by percentile: the percentiles an SLO can name here.
LATENCY_COLUMNS = {
    50.0: "latency_p50",
    90.0: "latency_p90",
    95.0: "latency_p95",
    99.0: "latency_p99",
    99.9: "latency_p99_9",
}
SEARCH, OPEN, CLOSED = "search step", "open loop", "closed loop"
# What a point's rate is: the rate offered (an SLO-search step, a VALID open-loop trial),
# or what the trial measured — the successful requests per second the terminal table and
# report call req/s (`throughput_rps`), or, in runs written before it, the sending rate.
OFFERED, THROUGHPUT, SENT = "offered rate", "throughput", "sending rate"
# Replica counts tried beyond the first when measured latency is not monotone in rate.
MAX_REPLICA_STEPS = 1_000_000
CLOSED_LOOP_WARNING = (
    "closed-loop measurements only (a fixed number of clients): the max rate is the "
    "throughput those clients reached — over an emulated link bounded by clients ÷ round "
    "trip, not by the server — and latency is measured from the actual send, so p99 at "
    "the same fixed arrival rate would be higher; measure an open-loop rate grid or "
    "`search: max_rate` to be sure"
)


class RecommendError(AnalysisError, ValueError):
    """Runs or a question that cannot give a recommendation, said in one line."""


@dataclass(frozen=True)
class LinkCost:
    """An emulated link's analytic share of latency: RTT + request bytes / uplink +
    response bytes / downlink (what `link_time_analytic_s` holds for measured links)."""

    name: str
    rtt_s: float
    up_mbps: float | None = None
    down_mbps: float | None = None

    def added_s(self, request_bytes: float, response_bytes: float) -> float:
        added = self.rtt_s
        if self.up_mbps and not missing(request_bytes):
            added += request_bytes * 8 / (self.up_mbps * 1e6)
        if self.down_mbps and not missing(response_bytes):
            added += response_bytes * 8 / (self.down_mbps * 1e6)
        return added


@dataclass(frozen=True)
class Query:
    """What to recommend for.

    `qps`: requests per second to serve (a request carries `batch_size` inferences);
    None ranks by cost per million inferences at each setting's own usable rate (the
    report's question when a scenario names no target load). `link_cost`: estimate the
    link from direct trials (measured latency + the link's analytic time) instead of
    taking trials measured over it."""

    slo_s: float
    qps: float | None = None
    percentile: float = 99.0
    link: str = DIRECT
    headroom: float = 0.0
    link_cost: LinkCost | None = None
    instances: tuple[str, ...] | None = None
    model: str | None = None  # a model id, or its name without the hash (conv-d2-w32)
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slo_s) and self.slo_s > 0):
            raise RecommendError(f"SLO: must be a positive latency, got {self.slo_s!r} s")
        if self.qps is not None and not (math.isfinite(self.qps) and self.qps > 0):
            raise RecommendError(f"qps: must be a positive rate, got {self.qps!r}")
        if not 0 <= self.headroom < 1:
            raise RecommendError(f"headroom: must be in [0, 1), got {self.headroom!r}")
        if self.percentile not in LATENCY_COLUMNS:
            known = ", ".join(f"p{p:g}" for p in LATENCY_COLUMNS)
            raise RecommendError(
                f"percentile {self.percentile:g}: trials.csv has latency columns for {known} only"
            )

    @property
    def estimate(self) -> bool:
        return self.link_cost is not None

    def wants(self, option: Option) -> bool:
        """Whether `option` serves the model and batch size asked for (if any)."""
        if not self.wants_model(option.model):
            return False
        return self.batch_size is None or option.batch_size == self.batch_size

    def wants_model(self, model: str) -> bool:
        """Whether `model` (an id) is the one asked for: its id, or its name without the hash."""
        return self.model is None or model == self.model or model.startswith(f"{self.model}-")


@dataclass(frozen=True)
class PricedRun:
    """One run's trials and the instance type it stands for, with its price."""

    run_id: str
    path: Path
    trials: pd.DataFrame
    instance: str
    usd_per_hour: float
    price_source: str  # "the scenario's price" | "prices.csv" ...
    # A replicated run's replicate rows (trials.csv), for paired comparisons over rounds;
    # None for a run of one round.
    replicates: pd.DataFrame | None = None


@dataclass(frozen=True)
class Point:
    """One measured operating point: a rate and the latency at the SLO percentile there
    (link estimate included when the query asks for one)."""

    rate: float  # requests/s
    latency_s: float  # the safe side: the interval's high bound (inf: none found)
    valid: bool  # counts on the safe side: usable, and its high bound known
    kind: str  # SEARCH | OPEN | CLOSED
    trial_id: str
    note: str = ""  # why not usable
    link_added_s: float = 0.0  # the analytic link time included in latency_s
    # The low bound of latency_s's interval (link included); latency_s where none is known.
    optimistic_s: float = math.nan
    # Whether the point counts on its low bound: `valid`, or left out only for want of a
    # high bound (None: as `valid`).
    optimistic_valid: bool | None = None
    # Measured and not INVALID: a point whose SLO question is met, missed or undecided.
    usable: bool | None = None  # None: as `valid`
    # The SLO decision at the query's bound (`analysis.slo.decide`); None: not usable.
    decision: str | None = None
    answered: int | None = None  # the trial's answered requests, where the row says
    needed: int | None = None  # the answered requests that would decide it (`slo`)
    rate_source: str = ""  # what the rate is: the offered rate, or the throughput
    value_s: float = math.nan  # the percentile itself (link included), between the bounds
    # A replicated run's setting: the percentile in each round, (round, seconds), for
    # paired comparisons with another setting measured in the same rounds.
    rounds: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if math.isnan(self.optimistic_s):
            object.__setattr__(self, "optimistic_s", self.latency_s)
        if self.optimistic_valid is None:
            object.__setattr__(self, "optimistic_valid", self.valid)
        if self.usable is None:
            object.__setattr__(self, "usable", self.valid)


@dataclass
class Option:
    """A deployable setting: one run's server setting × model × batch over one link."""

    run_id: str
    instance: str
    usd_per_hour: float
    setting: str
    protocol: str
    model: str
    batch_size: int
    link: str
    points: list[Point] = field(default_factory=list)

    @property
    def closed_loop(self) -> bool:
        return all(p.kind == CLOSED for p in self.points)

    def label(self, *, run: bool = False) -> str:
        """'triton[dynamic_batching=on] · http · conv-d3-w32-… · b1 on c6i.xlarge'."""
        parts = [self.setting, self.protocol, self.model, f"b{self.batch_size}"]
        text = " · ".join(p for p in parts if p) + f" on {self.instance}"
        return f"{text} ({self.run_id})" if run else text


@dataclass
class Candidate:
    """An option that meets the SLO, priced for the query."""

    option: Option
    max_rate: float  # highest measured rate within the SLO, requests/s per replica
    max_rate_kind: str  # where that point came from
    max_rate_trial: str
    max_rate_source: str  # what that rate is: OFFERED, THROUGHPUT or SENT
    usable_rate: float  # max_rate × (1 − headroom)
    replicas: int | None  # None: no target rate (ranked per unit of work)
    per_replica_rate: float  # the load each replica carries
    expected_latency_s: float  # at per_replica_rate, interpolated between measured points
    expected_how: str
    # The low end of expected_latency_s's interval: the same load on the points' low bounds.
    expected_low_s: float
    usd_per_hour_total: float | None
    usd_per_million: float
    margin_s: float  # SLO bound minus expected latency
    highest_measured: bool = False  # no rate above max_rate was measured: it may go higher
    loses_because: str = ""
    # The cost priced on the points' low bounds: the other end of its cost interval (the
    # same unit as the ranking's cost: USD/h with a target rate, else USD per million).
    optimistic_cost: float | None = None
    # Its max-rate point's percentile in each round (a replicated run): `Point.rounds`.
    rounds: tuple[tuple[int, float], ...] = ()

    @property
    def cost(self) -> float:
        """What the ranking orders by: USD/h with a target rate, else USD per million."""
        return (
            self.usd_per_hour_total
            if self.usd_per_hour_total is not None
            else (self.usd_per_million)
        )


# Why an option has no candidate: every usable point measured over the SLO, its SLO
# question still open (too few requests, or an interval around the bound), or no point
# that may be read at all (INVALID, nothing measured).
NO_VALID = "no valid measurement"


@dataclass
class Infeasible:
    """An option with no operating point shown to meet the SLO, and why: `kind` says
    whether that was measured (SLO_MISSED: it cannot meet it at any replica count), is
    still open (SLO_UNDECIDED) or could not be read (NO_VALID)."""

    option: Option
    reason: str
    kind: str = SLO_MISSED


@dataclass
class Ranking:
    """The answer to one question: one model served to requests of one batch size. Other
    models are other questions (serving dense instead of conv is no deployment choice),
    and a target in requests/s means other work at another batch size."""

    model: str
    batch_size: int
    ranked: list[Candidate]
    infeasible: list[Infeasible]
    percentile: float = 99.0

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def tied(self) -> list[tuple[Candidate, str]]:
        """The runners-up the measurement does not tell from #1, each with why (`tie`)."""
        if not self.ranked:
            return []
        first = self.ranked[0]
        found = ((c, tie(first, c, self.percentile)) for c in self.ranked[1:])
        return [(c, why) for c, why in found if why is not None]

    @property
    def tie_within_noise(self) -> bool:
        """Whether #1 is tied with any runner-up (`tied`): no single winner."""
        return bool(self.tied)

    def unanswered(self) -> tuple[str, str]:
        """Without a candidate: (SLO_MISSED | SLO_UNDECIDED | NO_VALID, the answer in a
        few words). Undecided wins over missed — one setting that may still meet the SLO
        means "none meets it" was not measured — and "none meets" needs every setting
        measured over the SLO."""
        total = len(self.infeasible)
        by_kind: dict[str, list[Infeasible]] = {}
        for item in self.infeasible:
            by_kind.setdefault(item.kind, []).append(item)
        undecided = by_kind.get(SLO_UNDECIDED, [])
        if undecided:
            count = f" ({len(undecided)} of {total} settings undecided)" if total > 1 else ""
            return SLO_UNDECIDED, undecided[0].reason + count
        missed, invalid = by_kind.get(SLO_MISSED, []), by_kind.get(NO_VALID, [])
        if missed and not invalid:
            return SLO_MISSED, "none meets the SLO: every setting was measured over it"
        if invalid and not missed:
            return NO_VALID, invalid[0].reason
        return NO_VALID, (
            f"none shown to meet the SLO: {len(missed)} measured over it, "
            f"{len(invalid)} without a valid measurement ({invalid[0].reason})"
        )


def tie(first: Candidate, other: Candidate, percentile: float) -> str | None:
    """Why `other` (ranked after `first`) is not told apart from it, or None: the one rule
    of a tie, for `recommend` and the report's box alike.

    - the same cost, and their latency intervals at that load overlap: the margin that
      would order them is inside the noise (without intervals: the same latency);
    - a higher cost whose optimistic end (priced on the points' low bounds) is no higher
      than `first`'s safe cost: more requests could order them either way.

    In a replicated run two settings of the same cost, at the same rate, measured in the
    same rounds, are compared round by round instead (`paired`): tied unless `other`'s
    percentile is higher beyond the noise of the rounds."""
    if math.isclose(other.cost, first.cost, rel_tol=1e-9, abs_tol=1e-12):
        comparison = paired(first, other)
        if comparison is not None:
            if comparison.verdict == HIGHER:
                return None
            return (
                f"the same cost, and their p{percentile:g} over the same rounds is "
                f"{comparison.describe(f'p{percentile:g}')}"
            )
        if (
            other.expected_low_s <= first.expected_latency_s
            and first.expected_low_s <= other.expected_latency_s
        ):
            return (
                f"the same cost, and their p{percentile:g} intervals overlap "
                f"({_interval_ms(first)} vs {_interval_ms(other)} ms)"
            )
        return None
    optimistic = other.optimistic_cost
    if optimistic is not None and optimistic <= first.cost:
        return (
            "within the noise: its cost at the optimistic ends of the latency intervals "
            "is no higher"
        )
    return None


def paired(first: Candidate, other: Candidate) -> Comparison | None:
    """`other`'s percentile against `first`'s, round by round (`common.paired`), where
    both come from a replicated run, at one rate, with rounds in common; else None."""
    if not first.rounds or not other.rounds or first.max_rate != other.max_rate:
        return None
    mine, theirs = dict(first.rounds), dict(other.rounds)
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        return None
    return compare_paired([mine[r] for r in shared], [theirs[r] for r in shared])


def _interval_ms(c: Candidate) -> str:
    high = c.expected_latency_s * 1e3
    low = c.expected_low_s * 1e3
    return f"{high:,.1f}" if math.isclose(low, high, abs_tol=0.05) else f"{low:,.1f}–{high:,.1f}"


@dataclass
class Recommendation:
    query: Query
    runs: list[PricedRun]
    rankings: list[Ranking]  # by model, then batch size
    warnings: list[str]

    @property
    def ranked(self) -> list[Candidate]:
        """Every qualifying option, ranking after ranking (each ranked by cost)."""
        return [c for r in self.rankings for c in r.ranked]

    @property
    def infeasible(self) -> list[Infeasible]:
        return [i for r in self.rankings for i in r.infeasible]

    @property
    def best(self) -> Candidate | None:
        """The first ranking's best (the only one, when the runs serve one model)."""
        return self.rankings[0].best if self.rankings else None


# -- runs and their instance types ------------------------------------------------------


def price_run(
    data: RunData, prices: Mapping[str, InstancePrice], as_instance: str | None = None
) -> PricedRun:
    """The run with the instance type it stands for and that type's price per hour.

    The instance is `as_instance` if given, else the scenario's `cost.instance` that the
    trials carry; the price is the one the run was costed at when the instance is the
    run's own (a scenario may override the shipped price), else the shipped table's. A
    replicated run is priced setting by setting (`RunData.decisions`: each setting's medians
    over its replicates and their intervals), not replicate by replicate."""
    trials = data.decisions
    named = sorted({str(v) for v in trials["instance"] if not missing(v) and str(v)})
    if len(named) > 1:
        raise RecommendError(f"{data.path}: trials name several instances ({', '.join(named)})")
    instance = as_instance or (named[0] if named else None)
    if instance is None:
        raise RecommendError(
            f"{data.path}: the scenario named no cloud instance (cost.instance); "
            "say which this machine stands for with --as-instance RUN=TYPE"
        )
    own = trials.loc[trials["instance"] == instance, "usd_per_hour"].dropna()
    if not own.empty:
        return PricedRun(
            data.run_id, data.path, trials, instance, float(own.iloc[0]), "the run's price",
            data.trials if data.replicated else None,
        )  # fmt: skip
    try:
        price = price_of(prices, instance)
    except PriceError as err:
        raise RecommendError(f"{data.path}: {err}") from None
    return PricedRun(
        data.run_id, data.path, trials, instance, price.usd_per_hour, "prices.csv",
        data.trials if data.replicated else None,
    )  # fmt: skip


def runs_slo(runs: Sequence[RunData]) -> RunSlo:
    """The one SLO every run's scenario named, as their rows carry it (`slo.trial_slos`),
    to be decided on its own percentile: a p95 SLO is decided on p95. RecommendError
    asking for a bound where the runs name none, or several."""
    slos = {slo for run in runs for slo in trial_slos(run.trials)}
    if len(slos) != 1:
        found = ", ".join(
            f"p{s.percentile:g} ≤ {s.bound_s * 1e3:g} ms"
            for s in sorted(slos, key=lambda s: (s.percentile, s.bound_s))
        )
        raise RecommendError(f"give --slo-p99-ms (the runs' SLOs: {found or 'none'})")
    return slos.pop()


# -- measured points ----------------------------------------------------------------------


def options(runs: Sequence[PricedRun], query: Query) -> tuple[list[Option], list[str]]:
    """Every option the query may consider, with its points, and warnings."""
    warnings: list[str] = []
    found: list[Option] = []
    source_link = DIRECT if query.estimate else query.link
    for run in runs:
        ok = run.trials[run.trials["status"] == "ok"]
        if ok.empty:
            raise RecommendError(f"{run.path}: no trial finished (status ok): nothing measured")
        if not _has_points(ok, query.percentile):
            column = LATENCY_COLUMNS[query.percentile]
            raise RecommendError(
                f"{run.path}: trials.csv has no trial with a rate and {column} "
                "(nor SLO-search steps): nothing to recommend from"
            )
        on_link = ok[ok["link"] == source_link]
        if on_link.empty:
            links = ", ".join(sorted({str(x) for x in ok["link"].dropna()}))
            hint = (
                f"; --link-model analytic estimates {query.link} from direct trials"
                if not query.estimate
                else ""
            )
            warnings.append(
                f"{run.run_id}: no trial over link {source_link} (measured: {links}){hint}"
            )
            continue
        if (on_link["load_kind"] == "trace").any():
            warnings.append(f"{run.run_id}: trace-driven trials left out (no single rate)")
        per_round = _per_round(run.replicates, LATENCY_COLUMNS[query.percentile])
        groups = on_link.groupby(["setting", "protocol", "model", "batch_size"], dropna=False)
        for (setting, protocol, model, batch), rows in groups:
            option = Option(
                run_id=run.run_id,
                instance=run.instance,
                usd_per_hour=run.usd_per_hour,
                setting=str(setting if not missing(setting) else rows["server"].iloc[0]),
                protocol="" if missing(protocol) else str(protocol),
                model=str(model),
                batch_size=1 if missing(batch) else int(batch),
                link=query.link,
            )
            if not query.wants(option):
                continue
            points = [p for row in rows.to_dict("records") for p in _points(row, query)]
            points = [replace(p, rounds=per_round.get(p.trial_id, ())) for p in points]
            opened = [p for p in points if p.kind != CLOSED]
            option.points = opened or points  # closed loop only where nothing else exists
            if option.points:
                found.append(option)
    return found, warnings


def _per_round(replicates: pd.DataFrame | None, column: str) -> dict[str, tuple]:
    """Each setting's `column` in each round it was counted in (VALID, ok, not measured
    again), by its trial id: what a paired comparison of two settings reads."""
    if replicates is None or replicates.empty:
        return {}
    counted = replicates[
        (replicates["status"] == "ok")
        & (replicates["verdict"] == "VALID")
        & (replicates["remeasured"] != True)  # noqa: E712 - NaN is not measured again
        & replicates[column].notna()
    ]
    found: dict[str, tuple] = {}
    for trial_id, rows in counted.groupby("replicate_of"):
        found[str(trial_id)] = tuple(
            sorted((int(r), float(v)) for r, v in zip(rows["round"], rows[column], strict=True))
        )
    return found


def _has_points(trials: pd.DataFrame, percentile: float) -> bool:
    latency = trials[LATENCY_COLUMNS[percentile]].notna()
    rate = trials["achieved_rate"].notna() | trials["throughput_rps"].notna()
    steps = trials["search_steps"].map(lambda v: not missing(v) and bool(str(v).strip()))
    return bool((latency & rate).any() or steps.any())


def _points(row: dict[str, Any], query: Query) -> list[Point]:
    """The operating points one trial row holds, latency at the query's percentile."""
    added = (
        query.link_cost.added_s(row.get("request_bytes_mean"), row.get("response_bytes_mean"))
        if query.link_cost is not None
        else 0.0
    )
    kind = row.get("load_kind")
    column = LATENCY_COLUMNS[query.percentile]
    if kind == "search":
        steps = search_steps(pd.DataFrame([row]))
        if steps.empty:
            return []
        same = not missing(row.get("slo_percentile")) and math.isclose(
            float(row["slo_percentile"]), query.percentile
        )
        if not same:  # the steps hold another percentile: only the chosen step's row
            chosen = steps[steps["chosen"]].iloc[0]
            return [_point(chosen["rate"], OFFERED, column, row, SEARCH, added, query)]
        result = []
        for step in steps.to_dict("records"):
            latency = step["latency"]
            # The runner's rule (scenario/trial.py): a step is usable unless too many of
            # its requests failed or none was measured — lateness is already charged in
            # its latency.
            usable = not UNUSABLE_STEP.intersection(step["codes"]) and not missing(latency)
            note = "" if usable else (step["reasons"] or "too many failed requests")
            value = float(latency) + added if not missing(latency) else math.nan
            low, high = float(step["low"]) + added, float(step["high"]) + added
            bounded = usable and not math.isnan(high)
            result.append(
                Point(
                    float(step["rate"]),
                    high if bounded else math.inf,
                    bounded,
                    SEARCH,
                    step["step_id"],
                    note,
                    added,
                    value if math.isnan(low) else low,
                    usable,
                    usable=usable,
                    decision=decide(low, high, query.slo_s, query.percentile) if usable else None,
                    rate_source=OFFERED,
                    value_s=value,
                )
            )
        return result
    if kind == "trace":
        return []
    closed = kind in ("concurrency", "users") or row.get("mode") == "closed"
    rate, source = row.get("throughput_rps"), THROUGHPUT
    if not closed and row.get("verdict") == "VALID" and not missing(row.get("target_rate")):
        # The offered rate, as a search step's: a VALID trial's sender kept its schedule
        # (within rate_tolerance), and its achieved rate is a measurement of that rate a
        # hair either side (49.9985 of 50) that would otherwise ask for a second replica.
        rate, source = row.get("target_rate"), OFFERED
    if missing(rate):  # runs written before throughput_rps: what they sent
        rate, source = row.get("achieved_rate"), SENT
    return [_point(rate, source, column, row, CLOSED if closed else OPEN, added, query)]


def _point(
    rate: Any, source: str, column: str, row: dict[str, Any], kind: str, added: float, query: Query
) -> Point:
    """The row's point at latency column `column`: its interval's high bound where the row
    has intervals (the safe side), its low bound as the optimistic one, and its SLO
    decision at the query's bound on that interval (`analysis.slo`)."""
    value = row.get(column)
    low = high = value
    if not missing(row.get("confidence_level")) and not missing(value):
        high, low = row.get(f"{column}_high"), row.get(f"{column}_low")
    unbounded = missing(high)
    measured = not missing(rate) and not missing(value) and float(rate) > 0
    usable = measured and row.get("verdict") != "INVALID"
    answered = None if missing(row.get("ok")) else int(row["ok"])
    if row.get("verdict") == "INVALID":
        note = str(row.get("verdict_reasons") or "INVALID")
    elif not measured:
        note = "no rate or latency measured"
    else:
        note = ""
    low_s = math.nan if missing(low) else float(low) + added
    high_s = math.nan if missing(high) else float(high) + added
    return Point(
        float(rate) if not missing(rate) else math.nan,
        math.inf if unbounded else high_s,
        usable and not unbounded,
        kind,
        str(row["trial_id"]),
        note,
        added,
        (float(value) + added if math.isnan(low_s) and measured else low_s),
        usable,
        usable=usable,
        decision=decide(low_s, high_s, query.slo_s, query.percentile) if usable else None,
        answered=answered,
        needed=(
            requests_needed(row, query.percentile, query.slo_s - added, answered)
            if usable and answered is not None
            else None
        ),
        rate_source=source,
        value_s=float(value) + added if not missing(value) else math.nan,
    )


# -- the decision -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Curve:
    """An option's valid points, one per rate (the worst latency where a rate repeats),
    in rising rate: what interpolation runs on."""

    rates: np.ndarray
    latencies: np.ndarray
    points: list[Point]  # the point behind each rate

    @classmethod
    def of(cls, points: Iterable[Point]) -> _Curve:
        worst: dict[float, Point] = {}
        for p in points:
            if p.valid and (p.rate not in worst or p.latency_s > worst[p.rate].latency_s):
                worst[p.rate] = p
        ordered = [worst[r] for r in sorted(worst)]
        return cls(
            np.array([p.rate for p in ordered]),
            np.array([p.latency_s for p in ordered]),
            ordered,
        )

    def below(self, rate: float, otherwise: float) -> float:
        """The latency at `rate` where the curve reaches that far, else `otherwise`."""
        if not self.points or rate > self.rates[-1]:
            return otherwise
        return self.at(rate)[0]

    def at(self, rate: float) -> tuple[float, str]:
        """The latency at `rate` (≤ the highest measured rate) and how it was found:
        measured, interpolated between the two points around it, or — below the lowest
        measured rate — the lowest point's, since lower rates were not measured."""
        rates = self.rates
        match = np.flatnonzero(np.isclose(rates, rate, rtol=1e-9, atol=0))
        if match.size:
            return float(self.latencies[match[0]]), f"measured at {rates[match[0]]:,.4g} req/s"
        if rate < rates[0]:
            which = "the only rate" if rates.size == 1 else "the lowest rate"
            return float(self.latencies[0]), (
                f"as measured at {rates[0]:,.4g} req/s, {which} measured"
            )
        above = int(np.searchsorted(rates, rate))
        value = float(np.interp(rate, rates, self.latencies))
        return value, f"interpolated between {rates[above - 1]:,.4g} and {rates[above]:,.4g} req/s"


def recommend(runs: Sequence[PricedRun], query: Query) -> Recommendation:
    """Rank every option of `runs` that meets the query's SLO by cost."""
    if query.instances is not None:
        known = {r.instance for r in runs}
        runs = [r for r in runs if r.instance in query.instances]
        missing_types = [i for i in query.instances if i not in known]
    else:
        missing_types = []
    warnings = [f"no run stands for instance {name}" for name in missing_types]
    if not runs:
        raise RecommendError(
            f"no run stands for the instances asked for ({', '.join(query.instances or ())})"
        )
    found, notes = options(runs, query)
    warnings += notes
    if not found:
        link = DIRECT if query.estimate else query.link
        measured = sorted({str(x) for r in runs for x in r.trials["link"].dropna()})
        hint = (
            f"; --link-model analytic estimates {link} from direct trials"
            if not query.estimate and DIRECT in measured
            else ""
        )
        raise RecommendError(
            f"no run measured a trial over link {link} (measured: {', '.join(measured)}){hint}"
        )
    rankings = []
    questions = sorted({(o.model, o.batch_size) for o in found})
    for model, batch in questions:
        ranked: list[Candidate] = []
        infeasible: list[Infeasible] = []
        for option in found:
            if (option.model, option.batch_size) == (model, batch):
                outcome = evaluate(option, query)
                if isinstance(outcome, Candidate):
                    optimistic = evaluate(option, query, optimistic=True)
                    if isinstance(optimistic, Candidate):
                        outcome.optimistic_cost = optimistic.cost
                (ranked if isinstance(outcome, Candidate) else infeasible).append(outcome)
        ranked.sort(key=_rank_key)
        for candidate in ranked[1:]:
            candidate.loses_because = _why_loses(candidate, ranked[0], query.percentile)
        rankings.append(Ranking(model, batch, ranked, infeasible, query.percentile))
    closed = sorted({c.option.run_id for r in rankings for c in r.ranked if c.option.closed_loop})
    if closed:
        warnings.append(f"{', '.join(closed)}: {CLOSED_LOOP_WARNING}")
    if query.estimate:
        warnings.append(
            f"link {query.link} is an estimate: measured direct latency + the link's RTT and "
            "transfer time (jitter, loss and queueing on the link not modelled)"
        )
    return Recommendation(query, list(runs), rankings, list(dict.fromkeys(warnings)))


def evaluate(option: Option, query: Query, *, optimistic: bool = False) -> Candidate | Infeasible:
    """The option priced for the query, or why it has no point shown to meet the SLO;
    `optimistic` prices it on its points' low bounds instead (the cheap end of its cost
    interval)."""
    low_points = [
        replace(p, latency_s=p.optimistic_s, valid=p.optimistic_valid) for p in option.points
    ]
    curve = _Curve.of(low_points if optimistic else option.points)

    def meets(latency_s: float) -> bool:  # the curve's end of each interval, judged
        return holds(latency_s, query.slo_s, query.percentile, optimistic=optimistic)

    meeting = [i for i, latency in enumerate(curve.latencies) if meets(float(latency))]
    if not meeting:
        return _without_candidate(option, query)
    best = curve.points[meeting[-1]]
    usable = best.rate * (1 - query.headroom)
    if query.qps is None:
        chosen = _per_unit(curve, usable, meets)
        replicas, total = None, None
    else:
        chosen = _replicas(curve, usable, query.qps, meets)
        if chosen is None:
            over = [p for p in curve.points if p.rate <= usable and not meets(p.latency_s)]
            measured = all(p.decision == SLO_MISSED for p in over)
            return Infeasible(
                option,
                f"p{query.percentile:g} is over the SLO at every per-replica load from "
                f"{usable:,.4g} req/s down (measured latency is not monotone in rate)"
                + ("" if measured else "; undecided at some of those loads"),
                SLO_MISSED if measured else SLO_UNDECIDED,
            )
        replicas = chosen[0]
        total = replicas * option.usd_per_hour
    per_replica, latency, how = chosen[1], chosen[2], chosen[3]
    if query.qps is None:
        per_million = cost_per_million(per_replica * option.batch_size, option.usd_per_hour)
    else:
        per_million = cost_per_million(query.qps * option.batch_size, total or 0.0)
    return Candidate(
        option=option,
        max_rate=best.rate,
        max_rate_kind=best.kind,
        max_rate_trial=best.trial_id,
        max_rate_source=best.rate_source,
        usable_rate=usable,
        replicas=replicas,
        per_replica_rate=per_replica,
        expected_latency_s=latency,
        expected_how=how,
        expected_low_s=min(latency, _Curve.of(low_points).below(per_replica, latency)),
        usd_per_hour_total=total,
        usd_per_million=per_million,
        margin_s=query.slo_s - latency,
        highest_measured=best is curve.points[-1],
        rounds=best.rounds,
    )


def _without_candidate(option: Option, query: Query) -> Infeasible:
    """Why no point of `option` is shown to meet the SLO (`Infeasible.kind`): missed
    only where every usable point was decided over it; undecided where one may still
    meet it; no valid measurement where no point may be read."""
    usable = [p for p in option.points if p.usable]
    if not usable:
        notes = "; ".join(dict.fromkeys(p.note for p in option.points if p.note))
        return Infeasible(option, f"{NO_VALID} — {notes or 'none usable'}", NO_VALID)
    open_ = [p for p in usable if p.decision != SLO_MISSED]
    if not open_:
        return Infeasible(option, _over_at_lowest(min(usable, key=lambda p: p.rate), query))
    return Infeasible(option, _undecided(min(open_, key=lambda p: p.rate), query), SLO_UNDECIDED)


def _undecided(point: Point, query: Query) -> str:
    """'undecided — too few requests (175 of 368): p99 32.3 ms at 175.2 req/s, …'."""
    q = f"p{query.percentile:g}"
    at = f"at {point.rate:,.4g} req/s"
    few = too_few(point.answered or 0, point.needed) if point.answered is not None else None
    if math.isinf(point.latency_s):
        point_ms = f"{q} {point.value_s * 1e3:,.1f} ms"
        why = few or (
            f"too few requests to bound {q} from above"
            + (f" ({point.answered:,} answered)" if point.answered is not None else "")
        )
        return f"undecided — {why}: {point_ms} {at}, its upper bound not yet known"
    interval = f"{point.optimistic_s * 1e3:,.1f}–{point.latency_s * 1e3:,.1f} ms"
    straddles = f"{q} {interval} {at} straddles the {query.slo_s * 1e3:,.4g} ms SLO"
    return f"undecided — {few}: {straddles}" if few else f"undecided — {straddles}"


def _replicas(
    curve: _Curve, usable: float, qps: float, meets: Callable[[float], bool]
) -> tuple[int, float, float, str] | None:
    """The fewest replicas from ceil(qps / usable) up whose per-replica load has an
    expected latency within the SLO (more than the first only where measured latency is
    not monotone in rate); below the lowest measured rate nothing changes, so the search
    stops there."""
    first = replicas_needed(qps, usable)
    last = max(first, replicas_needed(qps, float(curve.rates[0])))
    for n in range(first, min(last, first + MAX_REPLICA_STEPS) + 1):
        latency, how = curve.at(qps / n)
        if meets(latency):
            return n, qps / n, latency, how
    return None


def _per_unit(
    curve: _Curve, usable: float, meets: Callable[[float], bool]
) -> tuple[None, float, float, str]:
    """Without a target rate: each replica at its usable rate, or — where measured latency
    is not monotone — the highest measured rate below it that meets the SLO."""
    latency, how = curve.at(usable)
    if meets(latency):
        return None, usable, latency, how
    for rate, value in zip(curve.rates[::-1], curve.latencies[::-1], strict=True):
        if rate < usable and meets(float(value)):
            return None, float(rate), float(value), f"measured at {rate:,.4g} req/s"
    raise AssertionError("unreachable: the max rate itself meets the SLO")


def _over_at_lowest(low: Point, query: Query) -> str:
    """Why a setting measured over the SLO at its lowest rate cannot meet it at any
    replica count (its interval's low bound, where the high one is not known)."""
    latency = low.latency_s if math.isfinite(low.latency_s) else low.optimistic_s
    what = f"p{query.percentile:g} {latency * 1e3:,.1f} ms"
    if low.link_added_s:
        direct = latency - low.link_added_s
        what += f" (direct {direct * 1e3:,.1f} ms + link {low.link_added_s * 1e3:,.1f} ms)"
    return (
        f"{what} at {low.rate:,.4g} req/s, the lowest rate measured, is already over the "
        f"{query.slo_s * 1e3:,.4g} ms SLO"
    )


def _rank_key(c: Candidate) -> tuple[float, float, str, str, str, str, int]:
    o = c.option
    return (c.cost, -c.margin_s, o.instance, o.setting, o.model, o.run_id, o.batch_size)


def _why_loses(candidate: Candidate, first: Candidate, percentile: float) -> str:
    tied = tie(first, candidate, percentile)
    if tied is not None:
        return f"ties with #1: {tied}"
    margin = (
        f"p{percentile:g} margin {candidate.margin_s * 1e3:,.1f} ms "
        f"vs {first.margin_s * 1e3:,.1f} ms"
    )
    if candidate.usd_per_hour_total is not None and first.usd_per_hour_total is not None:
        extra = candidate.usd_per_hour_total - first.usd_per_hour_total
        base = first.usd_per_hour_total
        unit = "/h"
    else:
        extra = candidate.usd_per_million - first.usd_per_million
        base = first.usd_per_million
        unit = " per million inferences"
    if math.isclose(extra, 0.0, abs_tol=1e-12):
        return f"same cost as #1, smaller latency margin beyond the noise: {margin}"
    return f"+${extra:,.4g}{unit} (+{extra / base:.0%}) over #1; {margin}"


def headline(ranking: Ranking, query: Query) -> str:
    """One ranking's answer in one sentence (what the terminal and the report's box
    open with): the cheapest setting; a tie where the measurement does not order the
    first ones (`Ranking.tied`); or why there is none — measured over the SLO,
    undecided, or no valid measurement (`Ranking.unanswered`), never the one for the
    other."""
    q, c = query, ranking.best
    over = f"over {q.link}" + (" (estimated from direct trials)" if q.estimate else "")
    slo = f"p{q.percentile:g} ≤ {q.slo_s * 1e3:,.4g} ms"
    what_model = f"{ranking.model} (batch {ranking.batch_size})"
    if c is None:
        kind, why = ranking.unanswered()
        if kind == SLO_MISSED:
            return f"No measured setting serves {what_model} with {slo} {over}: {why}."
        if kind == SLO_UNDECIDED:
            why = why.removeprefix(f"{SLO_UNDECIDED} — ")
            return f"Undecided whether any setting serves {what_model} with {slo} {over}: {why}."
        return f"No answer for {what_model} with {slo} {over}: {why}."
    tied = ranking.tied
    if tied:
        listed = "; ".join(
            f"#{ranking.ranked.index(x) + 1} {x.option.setting} ({_offer(x, q)})"
            for x in [c, *(t for t, _ in tied)]
        )
        same = all(why.startswith("the same cost") for _, why in tied)
        why = (
            f"the same cost, and their p{q.percentile:g} intervals overlap"
            if same
            else "their costs overlap within the noise of the latency intervals"
        )
        target = f" at {q.qps:,.6g} req/s" if q.qps is not None else ""
        comparison = paired(c, tied[0][0])
        if comparison is not None:
            said = comparison.describe(f"p{q.percentile:g}", more=False)
            why = f"the same cost, and the first two compared round by round: {said}"
            more = comparison.rounds_to_separate
            might = (
                f"about {more} more round{'s' * (more != 1)} would likely separate the first two"
                if more
                else "more rounds might"
            )
        else:
            might = "more requests might"
        return (
            f"A tie for the cheapest {what_model} on {c.option.instance} with {slo}{target} "
            f"{over}, between {len(tied) + 1} settings: {listed} — {why}, so the "
            f"measurement does not order them ({might})."
        )
    o = c.option
    what = f"{o.setting} ({o.model}, batch {o.batch_size}) on {o.instance}"
    latency = f"p{q.percentile:g} {c.expected_latency_s * 1e3:,.1f} ms"
    if c.replicas is None:
        return (
            f"Cheapest per inference: {what} at {c.per_replica_rate:,.4g} req/s per replica: "
            f"${c.usd_per_million:,.4g} per million inferences, {latency} "
            f"(SLO {q.slo_s * 1e3:,.4g} ms) {over}."
        )
    return (
        f"Run {replicas_text(c.replicas)} of {what}: ${c.usd_per_hour_total:,.4g}/h, "
        f"${c.usd_per_million:,.4g} per million inferences at {q.qps:,.6g} req/s, {latency} "
        f"(SLO {q.slo_s * 1e3:,.4g} ms) {over}."
    )


def _offer(c: Candidate, q: Query) -> str:
    """A candidate's cost and latency in a few words, for a tie's list."""
    latency = f"p{q.percentile:g} {_interval_ms(c)} ms"
    if c.replicas is None:
        return (
            f"${c.usd_per_million:,.4g} per million inferences at {c.per_replica_rate:,.4g} "
            f"req/s per replica, {latency}"
        )
    return f"{replicas_text(c.replicas)}, ${c.usd_per_hour_total:,.4g}/h, {latency}"


def replicas_text(count: int) -> str:
    """`1 replica`, `3 replicas`: how every sentence of a recommendation counts them."""
    return f"{count} replica" if count == 1 else f"{count} replicas"


def to_json(rec: Recommendation) -> dict[str, Any]:
    """The recommendation as plain JSON values (seconds, requests/s, USD); NaN → null."""

    def option(o: Option) -> dict[str, Any]:
        return {
            "run_id": o.run_id,
            "instance": o.instance,
            "usd_per_hour": o.usd_per_hour,
            "setting": o.setting,
            "protocol": o.protocol,
            "model": o.model,
            "batch_size": o.batch_size,
            "link": o.link,
            "closed_loop": o.closed_loop,
            "points": [
                {
                    "rate": p.rate,
                    "latency_s": _num(p.latency_s),
                    "valid": p.valid,
                    "decision": p.decision,
                    "kind": p.kind,
                    "rate_source": p.rate_source,
                    "trial_id": p.trial_id,
                }
                for p in o.points
            ],
        }

    def candidate(n: int, c: Candidate) -> dict[str, Any]:
        return {
            "rank": n,
            **option(c.option),
            "max_rate": c.max_rate,
            "max_rate_kind": c.max_rate_kind,
            "max_rate_trial": c.max_rate_trial,
            "max_rate_source": c.max_rate_source,
            "usable_rate": c.usable_rate,
            "replicas": c.replicas,
            "per_replica_rate": c.per_replica_rate,
            "expected_latency_s": c.expected_latency_s,
            "expected_how": c.expected_how,
            "expected_low_s": c.expected_low_s,
            "usd_per_hour_total": c.usd_per_hour_total,
            "usd_per_million": c.usd_per_million,
            "margin_s": c.margin_s,
            "highest_measured": c.highest_measured,
            "loses_because": c.loses_because,
            "optimistic_cost": c.optimistic_cost,
        }

    q = rec.query
    return {
        "query": {
            "qps": q.qps,
            "slo_s": q.slo_s,
            "percentile": q.percentile,
            "link": q.link,
            "link_model": "analytic" if q.estimate else "measured",
            "estimate": q.estimate,
            "headroom": q.headroom,
            "instances": list(q.instances) if q.instances is not None else None,
            "model": q.model,
            "batch_size": q.batch_size,
        },
        "runs": [
            {
                "run_id": r.run_id,
                "path": str(r.path),
                "instance": r.instance,
                "usd_per_hour": r.usd_per_hour,
                "price_source": r.price_source,
            }
            for r in rec.runs
        ],
        "rankings": [
            {
                "model": r.model,
                "batch_size": r.batch_size,
                "headline": headline(r, q),
                "tie_within_noise": r.tie_within_noise,
                "tied_with_first": [
                    {"rank": r.ranked.index(c) + 1, "why": why} for c, why in r.tied
                ],
                "unanswered": None
                if r.best is not None
                else dict(zip(("kind", "why"), r.unanswered(), strict=True)),
                "ranked": [candidate(n, c) for n, c in enumerate(r.ranked, start=1)],
                "infeasible": [
                    {**option(i.option), "kind": i.kind, "reason": i.reason} for i in r.infeasible
                ],
            }
            for r in rec.rankings
        ],
        "warnings": rec.warnings,
    }


def _num(value: float) -> float | None:
    return None if missing(value) or not math.isfinite(value) else value
