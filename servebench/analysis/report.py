"""`report.html`: one self-contained page per run.

Everything is inline — CSS in a <style> block, plots as inline SVG, one short script
(filtering and sorting the summary table), no fonts, no links to fetch — so the file opens
from a copied results folder on a machine with no network, and a later change to
servebench cannot change how an old run looks. It opens with the answer
(`servebench.analysis.opening`): the Recommendation box and the cost-vs-latency chart.

Each section is independent: a plot with no data prints why; a plot that fails with an
unexpected error prints the error and is listed in `Report.errors`, and the rest of the
page is still written (a failed run deserves a report most of all).
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from servebench.analysis import figures
from servebench.analysis.breakdown import by_link_and_batch, transfer_breakdown
from servebench.analysis.labels import money, number, si, trial_label
from servebench.analysis.loader import REPORT_FILE, RunData, load_run
from servebench.analysis.opening import CSS as OPENING_CSS
from servebench.analysis.opening import (
    FILTER_SCRIPT,
    cost_vs_latency,
    link_recommendations,
    recommendation_html,
    report_order,
)
from servebench.analysis.overhead import (
    OVERHEAD_NOTE,
    SEED_NOTE,
    overhead_headers,
    overhead_notes,
    overhead_rows,
    read_overhead,
)
from servebench.analysis.overhead import TEXT_COLUMNS as OVERHEAD_TEXT_COLUMNS
from servebench.analysis.roofline import (
    Ceiling,
    above_roof,
    host_ceiling,
    roofline_points,
    uncounted_models,
)
from servebench.analysis.search import search_steps
from servebench.analysis.summary import run_counts, summary_table
from servebench.analysis.svg import NoData
from servebench.common.readable import missing, ms
from servebench.results import read_mix

LOCUST_NOTE = (
    "Load came from closed-loop Locust users: each user waits for its response before "
    "sending again, so latencies are measured from the actual send and leave out the "
    "queueing an open-loop (fixed-rate) client would see."
)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1200px;padding:1rem 2rem;color:#1d2125;background:#fff;line-height:1.4}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}
.meta{color:#555;font-size:.85rem}.meta dt{font-weight:600;float:left;clear:left;width:9rem}
.meta dd{margin-left:9.5rem}
.banner{padding:.8rem 1rem;margin:1rem 0;border-radius:4px;font-weight:600}
.banner.failed,.banner.interrupted,.banner.running,.banner.unknown{background:#fde8e8;
color:#8a1c1c;border:1px solid #e9a6a6}
.banner.source{background:#eef4fb;color:#1c3d6b;border:1px solid #b6cbe6;font-weight:400}
table{border-collapse:collapse;font-size:.8rem;margin:.5rem 0;width:100%}
th,td{border-bottom:1px solid #e4e4e4;padding:.25rem .5rem;text-align:right;vertical-align:top}
th{background:#f5f6f7;position:sticky;top:0}
td.text,th.text{text-align:left}
tr.failed td{background:#fdf0f0;color:#8a1c1c}tr.invalid td{background:#fff8e1}
tr.path td{background:#eef7ee}
figure{margin:.5rem 0}figure svg{max-width:100%;height:auto}
figcaption,.caption{color:#555;font-size:.85rem}
.no-data{color:#666;font-style:italic}.plot-error{color:#8a1c1c}
pre{background:#f6f8fa;padding:.8rem;overflow:auto;font-size:.8rem}
.roof-note{background:#fff8e1;border:1px solid #f0d58c;padding:.5rem .8rem;font-size:.85rem}
"""


@dataclass
class Report:
    """Where the report went, and which sections could not be drawn (with why)."""

    path: Path
    errors: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)


@dataclass
class _Section:
    ident: str
    title: str
    body: list[str] = field(default_factory=list)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Report:
    """Build the report for a run directory; written to RUN_DIR/report.html by default."""
    data = load_run(run_dir)
    path = Path(out) if out is not None else data.path / REPORT_FILE
    report = Report(path)
    page = render_html(data, report)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)
    return report


def render_html(data: RunData, report: Report) -> str:
    overhead = _overhead_section(data)
    if overhead is None:
        sections = _trial_sections(data, report)
    elif data.trials.empty:  # an overhead run: no trials, nothing else to draw
        sections = [overhead]
    else:
        sections = _trial_sections(data, report)
        sections.insert(1, overhead)
    if data.scenario_text:
        sections.append(
            _Section(
                "scenario",
                "Scenario as run",
                [
                    f"<details><summary>scenario.yaml</summary><pre>{_e(data.scenario_text)}</pre></details>"
                ],
            )
        )
    body = [_header(data), *_opening(data, report), *(_render_section(s) for s in sections)]
    title = f"servebench report — {data.run_id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{_e(title)}</title>'
        f"<style>{CSS}{OPENING_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _opening(data: RunData, report: Report) -> list[str]:
    """The answer first: the Recommendation box, then cost against latency per link."""
    if data.trials.empty:
        return []
    try:
        recommendations, why = link_recommendations(data)
        box = recommendation_html(data, recommendations, why)
    except Exception as err:  # the answer failing must not cost the rest of the page
        report.errors.append(f"recommendation: {type(err).__name__}: {err}")
        recommendations, box = (
            [],
            _render_section(
                _Section(
                    "recommendation",
                    "Recommendation",
                    [
                        f'<p class="plot-error">No recommendation: {_e(type(err).__name__)}: {_e(err)}</p>'
                    ],
                )
            ),
        )
    chart = _plot_section(
        report,
        "cost-latency",
        "Cost against latency",
        lambda: cost_vs_latency(data.trials, recommendations),
        "Every trial on each link: its latency at the SLO percentile against its cost per "
        "million inferences at the throughput it measured. Green met the SLO, red missed it; "
        "the dashed line is the SLO, the star the recommendation.",
    )
    return [box, _render_section(chart)]


def _trial_sections(data: RunData, report: Report) -> list[_Section]:
    """The sections of a run's trials: summary, plots, cost, cold start, transfer."""
    trials = data.trials
    breakdown = transfer_breakdown(trials)
    per_link = by_link_and_batch(breakdown)
    ceiling = host_ceiling(trials, data.run)
    points = roofline_points(trials, ceiling)

    return [
        _summary_section(data),
        *_replicate_sections(data, report),
        *_mix_sections(trials),
        *_search_sections(report, trials),
        *_tune_sections(data),
        _plot_section(
            report,
            "latency-cdf",
            "Latency CDFs",
            lambda: figures.latency_cdf(trials, data.records),
            "Distribution of per-request latency (successful requests), one panel per link.",
        ),
        _plot_section(
            report,
            "throughput-p99",
            "Throughput vs p99 latency",
            lambda: figures.throughput_vs_p99(trials),
            "Each curve is one server setting and batch size as the load rises: where it "
            "bends up is the setting's usable capacity. Error bars: each p99's confidence "
            "interval (trials.csv confidence_level; no upper bar where too few requests "
            "bound it from above).",
        ),
        _plot_section(report, "heatmap", "p99 heatmap", lambda: figures.p99_heatmap(trials)),
        _plot_section(
            report,
            "roofline",
            "Roofline",
            lambda: figures.roofline(points, ceiling),
            _roofline_caption(ceiling),
            tables=[
                _roofline_note(points, ceiling),
                _roofline_table(points),
                _uncounted_note(trials),
            ]
            if not points.empty
            else [],
        ),
        _cost_section(report, trials),
        _plot_section(
            report,
            "cold-start",
            "Cold start",
            lambda: figures.cold_start(data.cold_start, remote_only=_remote_only(trials)),
            "Server start, model load, first inference and the warm median it is compared "
            "against, per server setting and model.",
        ),
        _plot_section(
            report,
            "transfer",
            "Transfer vs inference",
            lambda: figures.transfer_vs_inference(per_link),
            "Per link and batch size (medians over settings, models and load levels): the "
            "time a request spends on the emulated link — its median latency minus the "
            "`direct` trial's with the same coordinates — stacked on the inference time. "
            "At small batches the link can rival inference; at large ones inference dominates.",
            tables=[_transfer_table(per_link)] if not per_link.empty else [],
        ),
    ]


def _replicate_sections(data: RunData, report: Report) -> list[_Section]:
    """A replicated run's replicates, setting by setting (none for a run of one round)."""
    if not data.replicated:
        return []
    return [
        _plot_section(
            report,
            "replicates",
            "Replicates",
            lambda: figures.replicates_figure(data.trials, data.settings),
            "Each setting's replicates (one per round; hollow red: failed, INVALID or "
            "measured again), the median over them (black tick) and the median's interval "
            "from their order statistics (blue bar; settings.csv's _low/_high); dashed: the "
            "SLO's bound. A setting is judged on its interval, not on any one replicate.",
        )
    ]


def _e(text: object) -> str:
    return html.escape("" if missing(text) else str(text))


def _header(data: RunData) -> str:
    run = data.run
    status = data.status
    parts = [f"<header><h1>servebench report — {_e(data.run_id)}</h1>"]
    if status != "complete":
        reason = run["reason"] or "no reason recorded"
        parts.append(
            f'<div class="banner {_e(status) if status in ("failed", "interrupted", "running") else "unknown"}" '
            f'id="run-status">Run {_e(status)}: {_e(reason)}. The figures below show what was '
            "measured before it stopped.</div>"
        )
    if "locust" in str(run["source"]).lower():
        parts.append(f'<div class="banner source" id="load-source">{_e(LOCUST_NOTE)}</div>')
    machine, versions = run["machine"], run["versions"]
    meta = {
        "status": f"{status} — {_counts(data)}",
        "scenario": run["scenario"],
        "started": run["started_at"],
        "ended": run["ended_at"],
        "wall time": _elapsed(run["started_at"], run["ended_at"]),
        "load source": run["source"],
        "machine": ", ".join(f"{k} {v}" for k, v in machine.items() if k != "memory_bytes")
        + (f", memory {si(machine['memory_bytes'], 'B')}" if machine.get("memory_bytes") else ""),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
    }
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in meta.items() if v)
    parts.append(f'<dl class="meta">{items}</dl></header>')
    return "\n".join(parts)


def _counts(data: RunData) -> str:
    """How much of the run was done: its trials, or an overhead run's probe runs."""
    overhead = data.run.get("overhead")
    if data.trials.empty and isinstance(overhead, dict):
        return f"{overhead.get('steps_done', 0)} of {overhead.get('steps_planned')} probe runs measured"
    planned = data.run["trials_planned"]
    return run_counts(data.trials) + (f" ({planned} planned)" if planned else "")


def _elapsed(start: object, end: object) -> str | None:
    try:
        seconds = (
            datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))
        ).total_seconds()
    except (TypeError, ValueError):
        return None
    return f"{seconds:.0f} s"


def _render_section(section: _Section) -> str:
    return (
        f'<section id="{section.ident}"><h2>{_e(section.title)}</h2>\n'
        + "\n".join(section.body)
        + "\n</section>"
    )


def _plot_section(
    report: Report,
    ident: str,
    title: str,
    draw: Callable[[], str | tuple[str, str]],
    caption: str = "",
    tables: Sequence[str] = (),
) -> _Section:
    section = _Section(ident, title)
    try:
        result = draw()
    except NoData as why:
        report.empty.append(ident)
        section.body.append(f'<p class="no-data">{_e(why)}</p>')
        return section
    except Exception as err:  # one broken plot must not cost the whole report
        report.errors.append(f"{ident}: {type(err).__name__}: {err}")
        section.body.append(
            f'<p class="plot-error">This plot could not be drawn: {_e(type(err).__name__)}: {_e(err)}</p>'
        )
        return section
    svg, caption = result if isinstance(result, tuple) else (result, caption)
    section.body.append(f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>")
    section.body.extend(tables)
    return section


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    text_columns: Sequence[int] = (),
    row_classes: Sequence[str] | None = None,
) -> str:
    def cell(tag: str, i: int, value: str) -> str:
        cls = ' class="text"' if i in text_columns else ""
        return f"<{tag}{cls}>{_e(value)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))
    body = []
    for n, row in enumerate(rows):
        cls = f' class="{row_classes[n]}"' if row_classes and row_classes[n] else ""
        body.append(f"<tr{cls}>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _summary_section(data: RunData) -> _Section:
    section = _Section("summary", "Summary")
    if data.trials.empty:
        section.body.append(
            '<p class="no-data">No trial finished, so there is nothing to summarise.</p>'
        )
        return section
    headers, rows, states = summary_table(report_order(data.trials))
    section.body.append(
        '<input id="summary-filter" type="search" placeholder="filter: e.g. lte b1 met" '
        'aria-label="filter the trials">'
    )
    section.body.append(
        html_table(
            headers, rows, text_columns=(1, 2), row_classes=[s if s != "ok" else "" for s in states]
        )
    )
    section.body.append(
        '<p class="caption">Trials that met the SLO first, cheapest first; then those it '
        "could not decide (the SLO percentile's interval straddles the bound), those that "
        "missed it, then failed ones; p99 ms shows its confidence interval in brackets. "
        "Type words to filter the rows, click a header to sort. "
        "Latency is from the intended send time in open-loop trials and "
        "from the actual send in closed-loop ones; inf/s counts samples (requests × batch).</p>"
    )
    section.body.append(f"<script>{FILTER_SCRIPT}</script>")
    return section


def _mix_sections(trials: pd.DataFrame) -> list[_Section]:
    """Per model of each mix trial (`mix_json`): its weight, share of the requests and
    latencies, in runs with a weighted mix (other runs get no empty section)."""
    rows = []
    for trial in report_order(trials).to_dict("records"):
        try:
            mix = read_mix(None if missing(trial["mix_json"]) else trial["mix_json"])
        except ValueError:
            continue  # a hand-edited cell: the trial's own row still shows
        total = sum(m.weight for m in mix.values()) or math.nan
        for model, m in mix.items():
            rows.append(
                [
                    trial_label({**trial, "model": None}),
                    model,
                    f"{m.weight:g}",
                    _share(m.weight / total),
                    _share(m.share),
                    str(m.count),
                    str(m.errors),
                    ms(m.latency_p50),
                    ms(m.latency_p99),
                ]
            )
    if not rows:
        return []
    section = _Section("mix", "Weighted mix: per model")
    section.body.append(
        html_table(
            [
                "trial",
                "model",
                "weight",
                "asked",
                "share",
                "requests",
                "errors",
                "p50 ms",
                "p99 ms",
            ],
            rows,
            text_columns=(0, 1),
        )
    )
    section.body.append(
        '<p class="caption">Each mix trial sends every request to one of its models, picked '
        "by weight: asked is the weight's share, share the requests that went to the model; "
        "p50 and p99 are of that model's successful requests. The summary's figures are the "
        "whole system's.</p>"
    )
    return [section]


def _tune_sections(data: RunData) -> list[_Section]:
    """The configuration search's path (tune.json), one table per server: each step's
    setting, objective value, decision and why, in the order the search took them; for a
    race, also its looks — which settings each round's test dropped and which survived."""
    if not data.tune:
        return []
    search = data.tune
    objective = str(search.get("objective", "?"))
    qps = search.get("qps")
    at = f" at {qps:,.6g} req/s" if isinstance(qps, int | float) else ""
    section = _Section("tune", "Configuration search")
    for server, found in search["servers"].items():
        best = found.get("best") or {}
        replicates = found.get("replicate_trials")
        spent = f" ({replicates} replicate trials)" if isinstance(replicates, int) else ""
        section.body.append(
            f'<p class="caption">{_e(server)}: {_e(found.get("method", "?"))} search for '
            f"{_e(objective)}{_e(at)} ({'higher' if found.get('maximize') else 'lower'} is "
            f"better) over {_e(found.get('settings', '?'))} settings: "
            f"{_e(found.get('trials_spent', '?'))} measured{_e(spent)}; best "
            f"{_e(best.get('setting', 'none'))} ({_e(_tune_value(best.get('value')))}); "
            f"stopped: {_e(found.get('stop_reason', ''))}.</p>"
        )
        rows = [
            [
                str(step.get("step", "")),
                str(step.get("setting", "")),
                _tune_value(step.get("value")),
                str(step.get("decision", "")),
                str(step.get("reason", "")),
            ]
            for step in found["steps"]
        ]
        classes = ["path" if row[3] in ("start", "moved", "best") else "" for row in rows]
        section.body.append(
            html_table(
                ["step", "setting", objective, "decision", "why"],
                rows,
                text_columns=(1, 3, 4),
                row_classes=classes,
            )
        )
        if isinstance(found.get("looks"), list) and found["looks"]:
            section.body += _race_looks(found["looks"], search.get("level"))
    return [section]


def _race_looks(looks: list[object], level: object) -> list[str]:
    """A race's looks, round by round: the Friedman test over the survivors, Conover's
    critical difference from the leader where it rejected, and who was dropped and who
    survived."""
    alpha = f"{level:g}" if isinstance(level, int | float) else "?"
    caption = (
        '<p class="caption">The race, look by look: after each round the survivors are '
        "ranked within every round so far (drift shared by a round cancels) and a Friedman "
        "test asks whether their rank sums differ; where it does, a setting whose rank sum "
        "is farther from the leader's than Conover's critical difference is dropped. Each "
        "look's level is set so that a race of equal settings drops one at most "
        f"{_e(alpha)} of the time over all its looks.</p>"
    )
    rows = []
    for look in looks:
        if not isinstance(look, dict):
            continue
        critical = look.get("critical")
        rows.append(
            [
                str(look.get("round", "")),
                str(look.get("settings", "")),
                _tune_value(look.get("statistic")),
                _tune_value(look.get("p")),
                _tune_value(look.get("level")),
                "—" if critical is None else _tune_value(critical),
                str(look.get("leader", "")),
                ", ".join(map(str, look.get("dropped") or [])) or "—",
                ", ".join(map(str, look.get("survivors") or [])),
            ]
        )
    table = html_table(
        ["round", "settings", "Friedman χ²", "p", "level", "critical", "leader", "dropped",
         "survivors"],
        rows,
        text_columns=(6, 7, 8),
    )  # fmt: skip
    return [caption, table]


def _tune_value(value: object) -> str:
    return f"{value:,.6g}" if isinstance(value, int | float) else "—"


def _share(value: object) -> str:
    return "–" if missing(value) else f"{float(value):.1%}"  # type: ignore[arg-type]


def _overhead_section(data: RunData) -> _Section | None:
    """Host vs container per metric, for runs that have an overhead.csv."""
    frame = read_overhead(data.path)
    if frame is None:
        return None
    section = _Section("overhead", "Container vs host")
    notes = overhead_notes(data.run)
    if frame.empty:
        section.body.append('<p class="no-data">No metric was measured.</p>')
    else:
        section.body.append(
            html_table(
                overhead_headers(frame),
                overhead_rows(frame),
                text_columns=OVERHEAD_TEXT_COLUMNS,
            )
        )
        section.body.append(f'<p class="caption">{_e(OVERHEAD_NOTE)} {_e(SEED_NOTE)}</p>')
    if notes:
        items = "".join(f"<li>{_e(note)}</li>" for note in notes)
        section.body.append(f'<ul class="caption" id="overhead-notes">{items}</ul>')
    return section


def _search_sections(report: Report, trials: pd.DataFrame) -> list[_Section]:
    """The SLO search's steps, in runs that searched (other runs get no empty section)."""
    if search_steps(trials).empty:
        return []
    return [
        _plot_section(
            report,
            "search-steps",
            "SLO search steps",
            lambda: figures.search_steps_figure(trials),
            "Each step of each setting's SLO search: the latency percentile the SLO names "
            "against the offered (open-loop) rate, numbered in the order run — doubling "
            "until the SLO breaks, then bisecting. Green: SLO met; red: missed or too many "
            "failed requests. The dashed line is the SLO bound; the dotted line the highest "
            "rate that met it, which the summary reports as max rate and costs are taken at.",
        )
    ]


def _cost_section(report: Report, trials: pd.DataFrame) -> _Section:
    cost_table: list[pd.DataFrame] = []

    def draw() -> str:
        svg, table = figures.cost_figure(trials)
        cost_table.append(table)
        return svg

    section = _plot_section(
        report,
        "cost",
        "Cost per million inferences",
        draw,
        "Instance price per hour over inferences per hour, at each setting's cheapest "
        "(highest-throughput) load level on the reference link.",
    )
    if cost_table:
        table = cost_table[0]
        at_slo = table["cost_per_million_at_slo"].notna().any()
        rows = [
            [
                trial_label({**r, "link": None, "load_kind": None, "load_level": None}),
                str(r["instance"] or "–"),
                money(r["usd_per_hour"]),
                number(r["throughput_ips"], 1),
                money(r["cost_per_million"]),
                *([money(r["cost_per_million_at_slo"])] if at_slo else []),
            ]
            for r in table.to_dict("records")
        ]
        headers = ["what", "instance", "USD/hour", "inf/s", "USD per million"]
        section.body.append(
            html_table(
                headers + (["USD per million at the best rate meeting the SLO"] if at_slo else []),
                rows,
                text_columns=(0, 1),
            )
        )
    return section


def _roofline_caption(ceiling: Ceiling) -> str:
    if ceiling.peak_flops is None:
        return "No measured host peak in this run: the points have no ceiling to compare with."
    roof = f"Roofs: compute, the host's float32 GEMM peak {si(ceiling.peak_flops, 'FLOP/s')}"
    if ceiling.peak_bw is None:
        roof += " (flat: no memory-bandwidth slope was measured)"
    else:
        roof += (
            f"; bandwidth, its copy rate {si(ceiling.peak_bw, 'B/s')} × intensity "
            f"(the two meet at {ceiling.ridge:.3g} FLOP/byte)"
        )
    if ceiling.provenance:
        roof += f"; {ceiling.provenance}"
    return (
        roof + ". Points far below the roof at low load are limited by the offered load, "
        "not by the hardware; the highest point of each model is its real efficiency."
    )


def _roofline_note(points: pd.DataFrame, ceiling: Ceiling) -> str:
    """Why a point can sit above a measured roof — never left unexplained."""
    above = above_roof(points)
    if above.empty:
        return ""
    worst = (
        above.sort_values("efficiency", ascending=False)
        .groupby(["setting", "model", "batch_size"], dropna=False, sort=False)
        .head(1)
    )
    names = "; ".join(
        f"{trial_label({**r, 'load_kind': None, 'load_level': None, 'link': None})} "
        f"({r['efficiency']:.0%})"
        for r in worst.to_dict("records")
    )
    when = f" ({ceiling.provenance})" if ceiling.provenance else ""
    return (
        f'<p class="roof-note" id="above-roof"><strong>{len(above)} of {len(points)} trials '
        f"plot above the measured roof</strong>: {_e(names)}. The hardware was not beaten: the "
        f"roof is too low for what these models ran on. The host may have been busy when the "
        f"roof was measured{_e(when)}; the serving runtime's kernels (onnxruntime's MLAS, "
        "Winograd or fused convolutions) may do fewer FLOPs than the zoo counts or run "
        "faster than numpy's GEMM; the bandwidth roof is one thread's copy while a server "
        "streams with several. Re-measure on a quiet machine with "
        "<code>servebench report host-peak --remeasure</code>.</p>"
    )


def _uncounted_note(trials: pd.DataFrame) -> str:
    """The models left off the plot because their FLOPs are unknown, named."""
    models = uncounted_models(trials)
    if not models:
        return ""
    return (
        f'<p class="uncounted">FLOPs unknown, not plotted: {_e(", ".join(models))} '
        "(a user's model file is counted only where it is an ONNX graph).</p>"
    )


def _roofline_table(points: pd.DataFrame) -> str:
    best = (
        points.sort_values("achieved_flops", ascending=False)
        .groupby(["setting", "model", "batch_size"], dropna=False, sort=False)
        .head(1)
    )
    rows = [
        [
            trial_label({**r, "load_kind": None, "load_level": None, "link": None}),
            f"{r['intensity']:.3g}",
            si(r["achieved_flops"], "FLOP/s"),
            "–" if missing(r["efficiency"]) else f"{r['efficiency']:.1%}",
        ]
        for r in best.to_dict("records")
    ]
    return html_table(
        ["best trial of each setting · model · batch", "FLOP/byte", "achieved", "of roof"],
        rows,
        text_columns=(0,),
    )


def _transfer_table(table: pd.DataFrame) -> str:
    rows = [
        [
            str(r["link"]),
            f"{r['batch_size']:g}",
            str(r["trials"]),
            ms(r["link_measured_s"], 2),
            ms(r["link_analytic_s"], 2),
            ms(r["inference_s"], 2),
            "–" if missing(r["transfer_share"]) else f"{r['transfer_share']:.0%}",
            str(r["inference_source"]).replace("_", " "),
        ]
        for r in table.to_dict("records")
    ]
    return html_table(
        [
            "link",
            "batch",
            "trials",
            "link ms (measured)",
            "link ms (analytic)",
            "inference ms",
            "link share",
            "inference from",
        ],
        rows,
        text_columns=(0, 7),
    )


def _remote_only(trials: pd.DataFrame) -> bool:
    """Whether every trial ran against a server servebench attached to (`launch: remote`)."""
    launch = trials.get("launch")
    return launch is not None and not trials.empty and bool((launch == "remote").all())
