"""What report.html opens with: the answer, then how it was reached.

- The Recommendation box: for the scenario's SLO, the cheapest setting per link
  (`servebench.analysis.recommend` without a target rate: cost per million inferences at
  the highest rate each setting held within the SLO), and what was *not* measured, said
  plainly, so a missing figure is never read as a zero.
- The cost-vs-latency chart: one panel per link, every trial a point (its SLO-percentile
  latency against its cost per million inferences), green where it met the SLO, red where
  not, the SLO as a line and the recommended setting starred.
- The summary table's order (met the SLO first, cheapest first) and the few lines of
  inline script that filter and sort it in the browser, with nothing fetched.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from servebench.analysis.breakdown import by_link_and_batch, transfer_breakdown
from servebench.analysis.labels import money, short_settings
from servebench.analysis.loader import RunData
from servebench.analysis.recommend import (
    CLOSED_LOOP_WARNING,
    DIRECT,
    LATENCY_COLUMNS,
    Query,
    Ranking,
    Recommendation,
    RecommendError,
    headline,
    price_run,
    recommend,
)
from servebench.analysis.slo import RunSlo, decide, run_slo
from servebench.analysis.svg import NoData, render
from servebench.common.readable import missing, ms
from servebench.pricing import load_prices
from servebench.results import SLO_MET, SLO_MISSED, SLO_UNDECIDED

MET, MISSED = "#2e7d32", "#c62828"
UNDECIDED = "#ef8f00"  # an SLO whose interval straddles the bound
_HASH = re.compile(r"-[0-9a-f]{6}$")  # a model id's content hash, left off in labels

CSS = """
.answer{border:2px solid #2e7d32;border-radius:6px;padding:.6rem 1rem;margin:1rem 0;
background:#f3faf3}.answer h2{border:none;margin:.2rem 0 .4rem}
.answer .headline{font-size:1.05rem;font-weight:600;margin:.3rem 0}
.answer.none{border-color:#c62828;background:#fdf3f3}
.not-measured{color:#6b4d00;font-size:.85rem;margin:.3rem 0}
.answer .how{font-weight:400;font-size:.8rem;color:#555}
.answer td.model{white-space:nowrap}
ul.not-measured{padding-left:1.2rem}
#summary-filter{margin:.3rem 0;padding:.2rem .4rem;width:22rem;font-size:.85rem}
#summary th{cursor:pointer}
"""

# Filter the summary's rows by words typed (every word must appear in the row) and sort
# by a clicked header (numbers as numbers, "–" last); inline, so nothing is fetched.
FILTER_SCRIPT = """
(function(){
var box=document.getElementById('summary-filter'),table=document.querySelector('#summary table');
if(!box||!table)return;var body=table.tBodies[0];
box.addEventListener('input',function(){var words=box.value.toLowerCase().split(/\\s+/).filter(Boolean);
for(var r of body.rows){var t=r.textContent.toLowerCase();r.hidden=!words.every(function(w){return t.includes(w);});}});
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){th.title='click to sort';
th.addEventListener('click',function(){var up=th.dataset.dir!=='asc';th.dataset.dir=up?'asc':'desc';
var key=function(r){var s=r.cells[i].textContent.replace(/[$,]/g,''),n=parseFloat(s);return isNaN(n)?null:n;};
var rows=Array.prototype.slice.call(body.rows).sort(function(a,b){var x=key(a),y=key(b);
if(x===null||y===null)return x===y?0:(x===null?1:-1);return up?x-y:y-x;});
rows.forEach(function(r){body.appendChild(r);});});});
})();
"""


def _links(trials: pd.DataFrame) -> list[str]:
    links = list(dict.fromkeys(str(x) for x in trials["link"].dropna()))
    return sorted(links, key=lambda link: link != DIRECT)  # direct first, then as run


def link_recommendations(data: RunData) -> tuple[list[Recommendation], str | None]:
    """Per link, the ranking for the run's SLO; or why there is none (no SLO, no cost)."""
    slo = run_slo(data.decisions)
    if slo is None:
        return (
            [],
            "the scenario set no SLO (slo: percentile and latency_ms), so no setting can be said to meet one",
        )
    if slo.percentile not in LATENCY_COLUMNS:
        return [], f"its SLO percentile p{slo.percentile:g} has no latency column to rank by"
    try:
        priced = price_run(data, load_prices())
    except RecommendError:
        return [], (
            "the scenario named no cloud instance (cost.instance), so nothing is priced; "
            "servebench recommend RUN --as-instance RUN=TYPE prices it"
        )
    found = []
    for link in _links(data.ok_decisions):
        try:
            found.append(
                recommend([priced], Query(slo_s=slo.bound_s, percentile=slo.percentile, link=link))
            )
        except RecommendError:
            continue  # no usable trial over this link; the summary shows why
    return found, None if found else "no trial measured a rate and a latency to rank"


def recommendation_html(
    data: RunData, recommendations: list[Recommendation], why: str | None
) -> str:
    """The Recommendation box: the answer, the caveats (closed loop, what was not
    measured), then the cheapest setting per link and model."""
    slo = run_slo(data.decisions)
    parts = []
    table = ""
    if not recommendations:
        parts.append(f'<p class="headline">No recommendation: {_e(why or "")}.</p>')
    else:
        first = recommendations[0]
        priced = first.runs[0]
        if len(first.rankings) == 1:  # one model: the answer in a sentence
            parts.append(f'<p class="headline">{_e(headline(first.rankings[0], first.query))}</p>')
        added = link_added(data.ok_decisions)
        if added:
            parts.append(
                f'<p class="headline" id="link-added">{_e(added)} '
                f'<small class="how">({_e(LINK_ADDED_HOW)})</small></p>'
            )
        parts.append(
            f"<p>For {_e(slo.words if slo else '')}, priced as {_e(priced.instance)} "
            f"({_e(money(priced.usd_per_hour))}/h, {_e(priced.price_source)}): the cheapest "
            "measured setting for each link and model, at the highest rate it held within "
            "the SLO. For a target load, <code>servebench recommend RUN --qps N</code> gives "
            "the replicas and the cost per hour.</p>"
        )
        if any(c.option.closed_loop for rec in recommendations for c in rec.ranked):
            parts.append(f'<p class="not-measured">{_e(CLOSED_LOOP_WARNING.capitalize())}.</p>')
        rows = [_row(rec, ranking) for rec in recommendations for ranking in rec.rankings]
        percentile = f"p{first.query.percentile:g}"
        table = (
            "<table><thead><tr><th class=text>link</th><th class=text>model · batch</th>"
            "<th class=text>cheapest setting</th><th>USD per million inferences</th>"
            f"<th>max req/s per replica within the SLO</th><th>{percentile} ms there</th>"
            "<th>margin ms</th><th>settings meeting the SLO</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
    missing_lines = not_measured(data)
    if missing_lines:
        items = "".join(f"<li>{_e(line)}</li>" for line in missing_lines)
        parts.append(f'<ul class="not-measured" id="not-measured">{items}</ul>')
    answered = any(rec.best is not None for rec in recommendations)
    css = "answer" if answered else "answer none"
    return (
        f'<section id="recommendation"><div class="{css}"><h2>Recommendation</h2>'
        + "\n".join([*parts, table])
        + "</div></section>"
    )


def _row(rec: Recommendation, ranking: Ranking) -> str:
    """One line of the box's table: a link and model's cheapest setting, the settings
    tied with it (`Ranking.tied`, the rule `recommend` prints), or why there is none —
    measured over the SLO, undecided or no valid measurement, each said as what it is."""
    total = len(ranking.ranked) + len(ranking.infeasible)
    model = _HASH.sub("", ranking.model)  # its hash only makes the column wrap
    head = (
        f"<tr><td class=text>{_e(rec.query.link)}</td>"
        f"<td class='text model'>{_e(f'{model} · b{ranking.batch_size}')}</td>"
    )
    best = ranking.best
    if best is None:
        kind, why = ranking.unanswered()
        return (
            head + f'<td class="text {_e(kind.replace(" ", "-"))}" colspan="5">{_e(why)}</td>'
            f"<td>0 of {total}</td></tr>"
        )
    setting = _e(best.option.setting)
    tied = ranking.tied
    if tied:
        others = ", ".join(_e(c.option.setting) for c, _ in tied)
        setting = f"tie: {setting}, {others} <small>(the measurement does not order them)</small>"
    return head + (
        f"<td class=text>{setting}</td>"
        f"<td>{_e(money(best.usd_per_million))}</td>"
        f"<td>{best.max_rate:,.4g}</td>"
        f"<td>{_e(ms(best.expected_latency_s))}</td>"
        f"<td>{_e(ms(best.margin_s))}</td>"
        f"<td>{len(ranking.ranked)} of {total}</td></tr>"
    )


# How `link_added`'s figures are found, said under them.
LINK_ADDED_HOW = (
    "per link, the median over its VALID trials of each one's median latency minus that of "
    "the direct trial with the same setting, model, batch and load"
)


def link_added(trials: pd.DataFrame) -> str | None:
    """'wifi adds 22.7 ms, lte 76.7 ms to the median latency.': what each emulated link
    added in this run, from its VALID trials against the direct ones with the same
    setting, model, batch and load (`breakdown`'s measured link time, its median over
    those pairs); None where no link was measured beside direct."""
    valid = trials[trials["verdict"].fillna("VALID") == "VALID"]
    per_link = by_link_and_batch(transfer_breakdown(valid)).dropna(subset=["link_measured_s"])
    if per_link.empty:
        return None
    several = per_link["batch_size"].nunique() > 1
    parts = [
        (
            row.link,
            ms(row.link_measured_s) + " ms" + (f" at batch {row.batch_size}" if several else ""),
        )
        for row in per_link.itertuples()
    ]
    (link, added), *rest = parts
    said = f"{link} adds {added}" + "".join(f", {name} {value}" for name, value in rest)
    return f"{said} to the median latency."


def not_measured(data: RunData) -> list[str]:
    """What this run did not measure, one plain sentence each (absent is not zero)."""
    trials = data.ok_decisions
    if trials.empty:
        return []

    def none(column: str) -> bool:
        return bool(trials[column].map(missing).all())

    lines = []
    if none("gpu_util_mean"):
        lines.append("No GPU telemetry on this machine: GPU utilisation not measured.")
    remote = bool((trials["launch"] == "remote").all())
    cold = data.cold_start
    if cold is None or cold["seconds"].dropna().empty:
        lines.append(
            "Remote server: cold start not measured."
            if remote
            else "Cold start not measured in this run."
        )
    if none("server_queue_s") and none("server_compute_s"):
        lines.append("Server queue and compute times not measured (no server metrics read).")
    if none("client_send_s") and none("client_recv_s"):
        lines.append("Client send and receive times not measured (no client-side split).")
    elif none("client_send_s"):
        lines.append("Client send time not measured: gRPC does not say when a request leaves.")
    if none("usd_per_hour"):
        lines.append("Cost not measured: the scenario named no cloud instance.")
    if run_slo(data.decisions) is None:
        lines.append("No SLO: nothing is marked met or missed.")
    closed = trials["load_kind"].isin(["concurrency", "users"]) | (trials["mode"] == "closed")
    if bool(closed.all()):
        lines.append(
            "Closed-loop load only: latency at a fixed arrival rate (queueing included) "
            "not measured."
        )
    return lines


def _decisions(rows: pd.DataFrame, slo: RunSlo) -> pd.Series:
    """Each trial's SLO decision: its `slo_met` (decided on the interval), else — a row
    written without one — its one latency as the interval (`slo.decide`)."""
    point = pd.Series(
        [decide(v, v, slo.bound_s, slo.percentile) for v in rows["_latency"]], index=rows.index
    )
    return rows["slo_met"].where(rows["slo_met"].notna(), point)


def cost_vs_latency(trials: pd.DataFrame, recommendations: list[Recommendation]) -> str:
    """One panel per link: every trial's SLO-percentile latency against its cost per
    million inferences, met green, undecided amber, missed red (`slo_met`), the SLO
    dashed, the recommendation starred."""
    slo = run_slo(trials)
    ok = trials[(trials["status"] == "ok") & trials["cost_per_million"].notna()]
    if ok.empty:
        raise NoData("No trial has a cost: the scenario named no cloud instance.")
    if slo is None:
        raise NoData("The scenario set no SLO: there is no line to compare costs against.")
    column = LATENCY_COLUMNS.get(slo.percentile, "latency_p99")
    latency = ok["slo_latency_s"].where(ok["slo_latency_s"].notna(), ok[column])
    ok = ok.assign(_latency=latency).dropna(subset=["_latency"])
    if ok.empty:
        raise NoData("No priced trial has a latency at the SLO percentile.")
    links = _links(ok)
    starred = {
        (rec.query.link, ranking.best.max_rate_trial.split(".s")[0])
        for rec in recommendations
        for ranking in rec.rankings
        if ranking.best is not None
    }

    short, _ = short_settings([str(x) for x in ok["setting"]])

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(links), sharey=True, squeeze=False)[0]
        for ax, link in zip(axes, links, strict=True):
            rows = ok[ok["link"] == link]
            decision = _decisions(rows, slo)
            shades = (
                (SLO_MET, MET, "met the SLO"),
                (SLO_UNDECIDED, UNDECIDED, "undecided"),
                (SLO_MISSED, MISSED, "missed"),
            )
            for word, colour, label in shades:
                part = rows[decision == word]
                if word == SLO_UNDECIDED and part.empty:
                    continue  # every trial decided: no empty legend entry
                ax.scatter(
                    part["_latency"] * 1e3,
                    part["cost_per_million"],
                    s=22,
                    c=colour,
                    label=f"{label} ({len(part)})",
                    alpha=0.8,
                )
            ax.axvline(slo.bound_s * 1e3, color="#555", ls="--", lw=1, label=f"SLO {slo.words}")
            stars = rows[[(link, t) in starred for t in rows["trial_id"]]]
            for i, r in enumerate(stars.to_dict("records")):
                ax.scatter(
                    [r["_latency"] * 1e3],
                    [r["cost_per_million"]],
                    marker="*",
                    s=220,
                    c=MET,
                    edgecolors="black",
                    linewidths=0.8,
                    zorder=5,
                    label="recommended" if i == 0 else None,
                )
                ax.annotate(
                    f"{short[str(r['setting'])]} · {_HASH.sub('', str(r['model']))}",
                    (r["_latency"] * 1e3, r["cost_per_million"]),
                    xytext=(6, 6),
                    textcoords="offset points",
                    fontsize=7,
                )
            x_log = _scale(ax, "x", [*rows["_latency"] * 1e3, slo.bound_s * 1e3])
            ax.set_title(f"link {link}")
            ax.set_xlabel(f"p{slo.percentile:g} latency (ms{', log' if x_log else ''})")
            ax.legend(loc="best")
        y_log = _scale(axes[0], "y", list(ok["cost_per_million"]))
        axes[0].set_ylabel(f"USD per million inferences{' (log)' if y_log else ''}")

    return render(draw, width=max(6.0, 4.6 * len(links)), height=3.8)


def _scale(ax: Axes, axis: str, values: list[float]) -> bool:
    """A log scale with plain tick labels (5, 10, 50) where the values span more than a
    decade, else linear; returns whether it is log."""
    finite = [v for v in values if np.isfinite(v) and v > 0]
    if not finite or max(finite) / min(finite) <= 10:
        return False
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())
    return True


# The report's order of SLO decisions: met, then undecided (its interval straddles the
# bound: it may meet it), then missed; unjudged after them.
_SLO_ORDER = {SLO_MET: 0, SLO_UNDECIDED: 1, SLO_MISSED: 2}


def report_order(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials as the report lists them: met the SLO first, then undecided, then missed, then
    unjudged, failed last; cheapest first within each (no cost last)."""
    failed = trials["status"] != "ok"
    met = trials["slo_met"].map(_SLO_ORDER).fillna(len(_SLO_ORDER))
    cost = trials["cost_per_million"].astype(float).fillna(np.inf)
    order = pd.DataFrame({"failed": failed, "met": met, "cost": cost, "index": range(len(trials))})
    ranks = order.sort_values(["failed", "met", "cost", "index"]).index
    return trials.loc[ranks].reset_index(drop=True)


def _e(text: object) -> str:
    return html.escape(str(text))
