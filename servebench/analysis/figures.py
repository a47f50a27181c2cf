"""The report's plots. Each function returns inline SVG or raises `NoData` with the
sentence the report shows instead, so one missing input never sinks the whole report."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from servebench.analysis.breakdown import DIRECT_LINK
from servebench.analysis.labels import LABEL_FIELDS, si, varying_labels
from servebench.analysis.roofline import Ceiling, above_roof
from servebench.analysis.search import search_steps, trial_records
from servebench.analysis.summary import cold_start_stats
from servebench.analysis.svg import NoData, render
from servebench.common.quantiles import percentiles
from servebench.common.readable import missing
from servebench.results import COLD_START_PHASES

MAX_LEGEND = 12
MAX_FIGURE_LEGEND = 20
LABEL_FIELDS_NO_LINK = tuple(f for f in LABEL_FIELDS if f != "link")
# Facets wrap into rows of PANEL_COLUMNS; past MAX_PANELS a figure names what it left out
# (a 24-panel figure is already ~22 inches tall).
PANEL_COLUMNS = 4
MAX_PANELS = 24
# Probabilities at which a CDF is drawn: even steps through the body, dense in the tail
# (that is where serving lives), so a 100k-request trial costs ~330 points of SVG.
_CDF_P = np.unique(np.concatenate([np.linspace(0, 0.99, 300), 1 - np.logspace(-2, -5, 30), [1.0]]))
_MARKERS = "osD^v<>Pp*"


def reference_link(trials: pd.DataFrame) -> str | None:
    """The link plots compare settings on: `direct` if the run has it, else the first."""
    links = [x for x in trials["link"].dropna().unique()]
    if not links:
        return None
    return DIRECT_LINK if DIRECT_LINK in links else links[0]


def _legend(ax: Axes, count: int) -> None:
    if count > MAX_LEGEND:
        ax.text(
            0.99,
            0.02,
            f"{count} lines; legend omitted (see the summary table)",
            transform=ax.transAxes,
            ha="right",
            fontsize=7,
        )
    else:
        ax.legend(loc="best")


def _plain_log_axis(ax: Axes, axis: str = "x") -> None:
    """Log scale with plain numbers (5, 10, 50) instead of 3×10¹-style labels.

    Call after plotting: the tick density follows the data's span (1-2-5 steps over up
    to two decades, decades only beyond, so labels never collide).
    """
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    dense = lo > 0 and np.log10(hi / lo) <= 2.2
    target.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if dense else (1.0,)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def _wrap(label: str, width: int = 48) -> str:
    """Long 'setting · model · b1' labels on two lines: the setting, then the rest."""
    if len(label) <= width or " · " not in label:
        return label
    head, tail = label.split(" · ", 1)
    return f"{head}\n{tail}"


def _facets(names: list) -> tuple[list, list]:
    """The facets drawn and those left out (only past `MAX_PANELS`, and then the figure
    names them: a facet never disappears without a word)."""
    return names[:MAX_PANELS], names[MAX_PANELS:]


def _grid_shape(count: int) -> tuple[int, int]:
    """Rows and columns for `count` panels: at most `PANEL_COLUMNS` side by side."""
    columns = min(max(count, 1), PANEL_COLUMNS)
    return math.ceil(max(count, 1) / columns), columns


def _panels(fig: Figure, names: list, *, sharey: bool = False) -> list[Axes]:
    """One axes per name, wrapped into rows of `PANEL_COLUMNS`; spare cells removed."""
    rows, columns = _grid_shape(len(names))
    grid = fig.subplots(rows, columns, sharey=sharey, squeeze=False).ravel()
    for spare in grid[len(names) :]:
        spare.remove()
    return list(grid[: len(names)])


def _panel_size(count: int, width: float, height: float, extra: float = 0.0) -> tuple[float, float]:
    """Figure size for `count` panels of `width` × `height` inches, plus `extra` height."""
    rows, columns = _grid_shape(count)
    return max(6.0, width * columns), height * rows + extra


def _left_out(fig: Figure, left_out: list, what: str) -> None:
    """Say in the figure which facets it does not show."""
    if not left_out:
        return
    names = ", ".join(str(n) for n in left_out[:8]) + (" …" if len(left_out) > 8 else "")
    fig.suptitle(
        f"{len(left_out)} more {what} not shown (over {MAX_PANELS} panels): {names}",
        fontsize=8,
        color="crimson",
    )


def latency_cdf(trials: pd.DataFrame, records: pd.DataFrame | None) -> str:
    """Per link, the latency CDF of every ok trial, from the per-request records."""
    if records is None or records.empty:
        raise NoData("No per-request records in this run (records.parquet is missing or empty).")
    info = trials[trials["status"] == "ok"].drop_duplicates("trial_id", keep="last")
    info = info.set_index("trial_id")
    # A search trial's records are its chosen step's, under the trial's id. Failed trials
    # keep their records on disk, but a partial trial's latencies would read as a
    # setting's behaviour; they are in the summary table with their reason.
    records = trial_records(trials, records)
    ok = records[records["ok"] & (records["latency"] > 0) & records["trial_id"].isin(info.index)]
    if ok.empty:
        raise NoData("No successful requests were recorded, so there is no latency to plot.")
    groups = {str(k): g["latency"].to_numpy() for k, g in ok.groupby("trial_id", sort=False)}
    link_of = info["link"].fillna("?")
    links, left_out = _facets(list(dict.fromkeys(link_of[list(groups)])))

    # The same setting/model/batch/load has the same colour in every link's panel, and
    # one legend below the figure names them all.
    shown = [t for t in groups if link_of[t] in links]
    names = dict(zip(shown, varying_labels(info.loc[shown], LABEL_FIELDS_NO_LINK), strict=True))
    palette = {name: i for i, name in enumerate(dict.fromkeys(names.values()))}
    cmap = colormaps["tab10" if len(palette) <= 10 else "tab20"]

    def draw(fig: Figure) -> None:
        axes = _panels(fig, links, sharey=True)
        for ax, link in zip(axes, links, strict=True):
            for trial_id in (t for t in shown if link_of[t] == link):
                curve = percentiles(groups[trial_id], _CDF_P * 100) * 1e3
                name = names[trial_id]
                ax.plot(curve, _CDF_P, lw=1.2, color=cmap(palette[name] % cmap.N), label=name)
            _plain_log_axis(ax)
            ax.set_title(f"link: {link}")
            ax.set_xlabel("latency (ms, log)")
            if ax.get_subplotspec().is_first_col():
                ax.set_ylabel("fraction of requests ≤ latency")
        _figure_legend(fig, axes, len(palette))
        _left_out(fig, left_out, "links")

    width, height = _panel_size(len(links), 4.5, 3.4, 0.2 + _legend_height(len(palette)))
    return render(draw, width=width, height=height)


def _figure_legend(fig: Figure, axes: list[Axes], count: int) -> None:
    """One legend below all panels (entries deduplicated by label)."""
    if count > MAX_FIGURE_LEGEND:
        fig.text(0.5, 0.0, f"{count} lines; legend omitted (see the summary table)", ha="center")
        return
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=1)


def _legend_height(count: int) -> float:
    return 0.17 * count + 0.2 if count <= MAX_FIGURE_LEGEND else 0.3


def _interval_bars(ax: Axes, rows: pd.DataFrame, column: str, color: str) -> None:
    """Error bars from `<column>_low` to `<column>_high` (ms) at each point, where the rows
    have them (runs since issue 23); a side too few requests bound gets no bar."""
    low, high = rows[f"{column}_low"].astype(float), rows[f"{column}_high"].astype(float)
    if low.isna().all() and high.isna().all():
        return
    point = rows[column].astype(float)
    below = (point - low).fillna(0).clip(lower=0) * 1e3
    above = (high - point).fillna(0).clip(lower=0) * 1e3
    ax.errorbar(
        rows["throughput_ips"],
        point * 1e3,
        yerr=[below.to_numpy(), above.to_numpy()],
        fmt="none",
        ecolor=color,
        elinewidth=0.8,
        capsize=2,
    )


def throughput_vs_p99(trials: pd.DataFrame) -> str:
    """For each model (a panel), one curve per setting and batch: p99 as load rises, with
    its confidence interval as error bars."""
    ok = trials[(trials["status"] == "ok")].dropna(subset=["throughput_ips", "latency_p99"])
    link = reference_link(ok)
    if ok.empty or link is None:
        raise NoData("No successful trial has both a throughput and a p99 latency.")
    ok = ok[ok["link"] == link]
    models, left_out = _facets(list(dict.fromkeys(ok["model"].fillna("?"))))
    slo = trials["slo_bound_s"].dropna()

    def draw(fig: Figure) -> None:
        axes = _panels(fig, models)
        for ax, model in zip(axes, models, strict=True):
            rows = ok[ok["model"].fillna("?") == model]
            curves = list(rows.groupby(["setting", "batch_size"], dropna=False, sort=False))
            keys = pd.DataFrame([curve.iloc[0] for _, curve in curves])
            labels = varying_labels(keys, ("setting", "batch_size")) if curves else []
            for i, ((_, curve), label) in enumerate(zip(curves, labels, strict=True)):
                curve = curve.sort_values("load_level")
                (line,) = ax.plot(
                    curve["throughput_ips"],
                    curve["latency_p99"] * 1e3,
                    marker=_MARKERS[i % len(_MARKERS)],
                    label=label,
                )
                _interval_bars(ax, curve, "latency_p99", line.get_color())
            if not slo.empty:
                ax.axhline(slo.iloc[0] * 1e3, color="crimson", ls="--", lw=1, label="SLO bound")
            ax.set_title(f"{model} (link {link})")
            ax.set_xlabel("throughput (inferences/s)")
            ax.set_ylabel("p99 latency (ms)")
            _legend(ax, len(curves))
        _left_out(fig, left_out, "models")

    return render(draw, *_panel_size(len(models), 4.8, 3.8, 0.2))


def replicates_figure(trials: pd.DataFrame, settings: pd.DataFrame | None) -> str:
    """Each setting's replicates as dots on its row, over the median's interval (a bar) and
    the median (a tick), on the figure settings.csv judges it by: the SLO's percentile
    (p99 without an SLO; an SLO search's max rate), with the SLO's bound as a line."""
    if settings is None or settings.empty:
        raise NoData("no settings.csv: a run from before replicates")
    search = bool((settings["load_kind"] == "search").all())
    has_slo = settings["slo_bound_s"].notna().any()
    column = "max_rate" if search else ("slo_latency_s" if has_slo else "latency_p99")
    scale = 1.0 if search else 1e3
    labels = varying_labels(settings)
    rows = settings.to_dict("records")

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        for y, setting in enumerate(rows):
            ok = trials[
                (trials["replicate_of"] == setting["trial_id"]) & (trials["status"] == "ok")
            ]
            counted = ok[(ok["verdict"] == "VALID") & (ok["remeasured"] != True)]  # noqa: E712
            other = ok.drop(counted.index)
            ax.scatter(counted[column] * scale, [y] * len(counted), s=16, color="C0", zorder=3)
            ax.scatter(other[column] * scale, [y] * len(other), s=16, facecolors="none",
                       edgecolors="C3", zorder=3)  # fmt: skip
            low, high, median = (setting.get(f"{column}{s}") for s in ("_low", "_high", ""))
            if not missing(low) and not missing(high):
                ax.plot([low * scale, high * scale], [y, y], color="C0", alpha=0.35, lw=6)
            if not missing(median):
                ax.plot([median * scale] * 2, [y - 0.3, y + 0.3], color="black", lw=1.5)
        if has_slo and not search:
            ax.axvline(settings["slo_bound_s"].dropna().iloc[0] * scale, color="C3", ls="--")
        ax.set_yticks(range(len(rows)), [_wrap(label) for label in labels], fontsize=7)
        ax.invert_yaxis()
        unit = "req/s" if search else "ms"
        name = {"max_rate": "max rate meeting the SLO", "latency_p99": "p99"}.get(column)
        if name is None:
            name = f"p{settings['slo_percentile'].dropna().iloc[0]:g}, the SLO's percentile"
        ax.set_xlabel(f"{name} ({unit}) per replicate")
        ax.grid(axis="x", alpha=0.3)

    return render(draw, width=7.5, height=1.2 + 0.32 * len(rows))


def search_steps_figure(trials: pd.DataFrame) -> str:
    """One panel per SLO search: each step's SLO-percentile latency against its offered
    rate, in the order run, with the SLO bound and the rate the search chose."""
    steps = search_steps(trials)
    if steps.empty:
        raise NoData("No SLO search in this run recorded its steps.")
    info = trials.drop_duplicates("trial_id", keep="last").set_index("trial_id")
    searched = list(dict.fromkeys(steps["trial_id"]))
    titles = dict(
        zip(
            searched,
            varying_labels(info.loc[searched], ("setting", "model", "batch_size", "link")),
            strict=True,
        )
    )
    shown, left_out = _facets(searched)

    def draw(fig: Figure) -> None:
        axes = _panels(fig, shown)
        for ax, trial_id in zip(axes, shown, strict=True):
            mine = steps[steps["trial_id"] == trial_id]
            _search_panel(ax, mine, info.loc[trial_id], titles[trial_id])
        _left_out(fig, left_out, "searches")

    return render(draw, *_panel_size(len(shown), 4.6, 3.6, 0.2))


def _search_panel(ax: Axes, mine: pd.DataFrame, row: pd.Series, title: str) -> None:
    """One SLO search's panel of `search_steps_figure`: `mine` its steps, `row` its
    trial's row (the SLO), `title` what tells it from the others."""
    measured = mine[np.isfinite(mine["latency"])]
    curve = measured.sort_values("rate")  # the numbers give the order run
    ax.plot(curve["rate"], curve["latency"] * 1e3, color="0.75", lw=0.8, zorder=1)
    for met, style in (
        (True, {"marker": "o", "color": "C2"}),
        (False, {"marker": "X", "color": "crimson"}),
    ):
        part = measured[measured["met"] == met]
        ax.scatter(
            part["rate"],
            part["latency"] * 1e3,
            s=30,
            zorder=2,
            label="SLO met" if met else "SLO missed",
            **style,
        )
    for step in measured.itertuples():
        ax.annotate(
            str(step.step + 1),
            (step.rate, step.latency * 1e3),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=6,
            color="0.35",
        )
    unmeasured = mine[~np.isfinite(mine["latency"])]
    if not unmeasured.empty:
        rates = ", ".join(f"{r:g}" for r in unmeasured["rate"])
        ax.text(
            0.02,
            0.98,
            f"no successful request at {rates}/s",
            transform=ax.transAxes,
            va="top",
            fontsize=7,
            color="crimson",
        )
    bound = row.get("slo_bound_s")
    percentile = row.get("slo_percentile")
    name = "p99" if missing(percentile) else f"p{percentile:g}"
    if not missing(bound):
        ax.axhline(
            bound * 1e3,
            color="crimson",
            ls="--",
            lw=1,
            label=f"SLO {name} ≤ {bound * 1e3:g} ms",
        )
    best = mine[mine["chosen"] & mine["met"]]
    if best.empty:
        ax.text(
            0.98,
            0.02,
            "no rate met the SLO",
            transform=ax.transAxes,
            ha="right",
            fontsize=7,
            color="crimson",
        )
    else:
        rate = float(best["rate"].iloc[0])
        ax.axvline(rate, color="C2", ls=":", lw=1.2, label=f"max {rate:.0f}/s")
    if len(measured) and measured["latency"].max() / max(measured["latency"].min(), 1e-9) > 20:
        ax.set_yscale("log")
    ax.set_title(_wrap(title, 40), fontsize=9)
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel(f"{name} latency (ms)")
    ax.legend(loc="upper left" if unmeasured.empty else "center left")


def heatmap_axes(trials: pd.DataFrame) -> tuple[str, str] | None:
    """Depth × width when both vary (a mutation sweep), else batch × link."""
    ok = trials[(trials["status"] == "ok") & trials["latency_p99"].notna()]
    if ok.empty:
        return None
    if ok["depth"].nunique() > 1 and ok["width"].nunique() > 1:
        return "depth", "width"
    if ok["batch_size"].notna().any() and ok["link"].notna().any():
        return "link", "batch_size"
    return None


def p99_heatmap(trials: pd.DataFrame) -> tuple[str, str]:
    """The p99 heatmap and its caption (which slice of the run it shows)."""
    dims = heatmap_axes(trials)
    if dims is None:
        raise NoData("No successful trial with a p99 latency to place on a heatmap.")
    ok = trials[(trials["status"] == "ok") & trials["latency_p99"].notna()]
    rows_dim, cols_dim = dims
    if dims == ("depth", "width"):
        link = reference_link(ok)
        # Generated models only: a user's imported one has no depth, width or family.
        ok = ok[(ok["link"] == link) & ok["depth"].notna() & ok["width"].notna()]
        ok = (
            ok[ok["batch_size"] == ok["batch_size"].min()] if ok["batch_size"].notna().any() else ok
        )
        facets, left_out = _facets(list(dict.fromkeys(ok["layer_type"].fillna("all"))))
        facet_col = "layer_type"
        caption = (
            f"p99 latency over model depth × width (link {link}, smallest batch; median over "
            "settings and load levels), one panel per layer type."
        )
    else:
        facets, left_out, facet_col = ["all"], [], None
        caption = (
            "p99 latency over link × batch size (median over settings, models and load levels)."
        )

    def table_of(facet: object) -> pd.DataFrame:
        part = ok if facet_col is None else ok[ok[facet_col].fillna("all") == facet]
        table = part.pivot_table(
            index=rows_dim, columns=cols_dim, values="latency_p99", aggfunc="median", sort=False
        )
        if rows_dim != "link":
            table = table.sort_index()
        return table.reindex(sorted(table.columns), axis=1) * 1e3

    tables = [table_of(f) for f in facets]
    # One colour scale for every panel: the same colour is the same p99 in each.
    finite = np.concatenate([t.to_numpy(dtype=float).ravel() for t in tables])
    finite = finite[np.isfinite(finite)]
    norm = Normalize(finite.min(), finite.max()) if finite.size else Normalize(0, 1)
    mid = (norm.vmin + norm.vmax) / 2

    def draw(fig: Figure) -> None:
        axes = _panels(fig, facets)
        image = None
        for ax, facet, table in zip(axes, facets, tables, strict=True):
            values = table.to_numpy(dtype=float)
            image = ax.imshow(
                np.ma.masked_invalid(values), cmap="viridis", norm=norm, aspect="auto"
            )
            ax.set_xticks(range(len(table.columns)), [f"{c:g}" for c in table.columns])
            ax.set_yticks(range(len(table.index)), [_tick(v) for v in table.index])
            ax.set_xlabel(cols_dim.replace("_", " "))
            ax.set_ylabel(rows_dim.replace("_", " "))
            ax.grid(False)
            if facet_col is not None:
                ax.set_title(str(facet))
            for (i, j), v in np.ndenumerate(values):
                if np.isfinite(v):
                    ax.text(
                        j,
                        i,
                        f"{v:.1f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if v < mid else "black",
                    )
        fig.colorbar(image, ax=axes, label="p99 (ms)", shrink=0.9)
        _left_out(fig, left_out, "layer types")

    height = max(3.0, 0.45 * max(ok[rows_dim].nunique(), 1) + 1.8)
    return render(draw, *_panel_size(len(facets), 4.4, height, 0.3)), caption


def _tick(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float, np.number)) else str(value)


def roofline(points: pd.DataFrame, ceiling: Ceiling) -> str:
    """Achieved FLOP/s against arithmetic intensity, under the host's measured roofs:
    the GEMM peak (flat) and, where measured, the copy bandwidth (a slope), each drawn
    across the whole axis so both are visible, their minimum (the roofline) solid.
    Points above the roofline are ringed in red; the report says why they can be."""
    if points.empty:
        raise NoData(
            "No successful trial has FLOP and byte counts with a throughput "
            "(a model whose FLOPs are unknown, such as a user's file that is not an ONNX "
            "graph, has none)."
        )
    models = list(dict.fromkeys(points["model"].fillna("?")))
    batches = sorted(points["batch_size"].dropna().unique())
    above = above_roof(points)

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        lo, hi = points["intensity"].min() / 3, points["intensity"].max() * 3
        if ceiling.ridge is not None:  # keep the ridge, where the two roofs meet, in view
            lo, hi = min(lo, ceiling.ridge / 3), max(hi, ceiling.ridge * 3)
        xs = np.geomspace(lo, hi, 200)
        if ceiling.peak_flops is not None:
            compute = f"compute roof: GEMM peak {si(ceiling.peak_flops, 'FLOP/s')} (measured)"
            if ceiling.peak_bw is None:
                compute += "; no bandwidth roof measured"
            ax.axhline(ceiling.peak_flops, color="black", lw=0.8, ls="--", label=compute)
            if ceiling.peak_bw is not None:
                ax.plot(
                    xs,
                    ceiling.peak_bw * xs,
                    color="0.4",
                    lw=0.8,
                    ls="--",
                    label=f"bandwidth roof: copy {si(ceiling.peak_bw, 'B/s')} × intensity",
                )
            ax.plot(xs, ceiling.attainable(xs), color="black", lw=1.8, label="roofline")
        for i, batch in enumerate(batches):
            rows = points[points["batch_size"] == batch]
            for j, model in enumerate(models):
                sel = rows[rows["model"].fillna("?") == model]
                if sel.empty:
                    continue
                ax.scatter(
                    sel["intensity"],
                    sel["achieved_flops"],
                    color=f"C{i % 10}",
                    marker=_MARKERS[j % len(_MARKERS)],
                    label=f"{model} · b{batch:g}",
                    s=28,
                    zorder=3,
                )
        if not above.empty:
            ax.scatter(
                above["intensity"],
                above["achieved_flops"],
                s=110,
                facecolors="none",
                edgecolors="crimson",
                lw=1.2,
                zorder=4,
                label=f"above the measured roof ({len(above)}; see the note)",
            )
        top = max(points["achieved_flops"].max(), ceiling.peak_flops or 0) * 2
        low = points["achieved_flops"].min() / 3
        if ceiling.peak_bw is not None:
            low = min(low, ceiling.peak_bw * lo)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_yscale("log")
        ax.set_ylim(low, top)
        _plain_log_axis(ax, "x")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: si(v, "FLOP/s")))
        ax.set_xlabel("arithmetic intensity (FLOP/byte: weights once + activations per sample)")
        ax.set_ylabel("achieved FLOP/s (inferences/s × FLOP/inference)")
        _legend(ax, len(models) * len(batches) + 3)

    return render(draw, width=8.0, height=4.8)


def cost_figure(trials: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """Cheapest cost per million inferences of each setting × model × batch, and its table.

    The cheapest level is the one with the highest throughput on the reference link,
    which is what one would provision for.
    """
    ok = trials[(trials["status"] == "ok") & trials["cost_per_million"].notna()]
    if ok.empty:
        raise NoData(
            "No trial has a cost: the scenario named no cloud instance, or its price was unknown."
        )
    link = reference_link(ok)
    ok = ok[ok["link"] == link]
    best = (
        ok.sort_values("cost_per_million")
        .groupby(["setting", "model", "batch_size"], dropna=False, sort=False)
        .head(1)
        .sort_values("cost_per_million")
    )
    table = best[
        [
            "setting",
            "model",
            "batch_size",
            "load_kind",
            "load_level",
            "instance",
            "usd_per_hour",
            "throughput_ips",
            "cost_per_million",
            "trial_id",
            # The runner's cost at the throughput the SLO allows (empty where it has none).
            "cost_per_million_at_slo",
        ]
    ].reset_index(drop=True)
    labels = [_wrap(x) for x in varying_labels(table, ("setting", "model", "batch_size"))]

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        y = np.arange(len(table))
        ax.barh(y, table["cost_per_million"], color="C2")
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        for yi, value, instance in zip(
            y, table["cost_per_million"], table["instance"], strict=True
        ):
            ax.text(value, yi, f" ${value:,.3g} ({instance or '?'})", va="center", fontsize=7)
        ax.set_xlim(0, table["cost_per_million"].max() * 1.35)  # room for the value labels
        ax.set_xlabel(f"USD per million inferences (link {link})")
        ax.grid(axis="y", visible=False)

    return render(draw, width=10.0, height=max(2.2, 0.35 * len(table) + 1.2)), table


def cold_start(cold: pd.DataFrame | None, *, remote_only: bool = False) -> str:
    """Median time of each cold-start phase per setting and model; whiskers span the
    repeats (min to max; `cold_start: {repeats: N}` in the scenario).

    `remote_only`: every server of the run was one servebench attached to, whose start it
    never saw, so an empty table means "not measured" rather than "missing"."""
    if cold is None or cold.empty or cold["seconds"].dropna().empty:
        if remote_only:
            raise NoData(
                "Not measured: remote server (servebench attached to a server it did not "
                "start, so there was no start or model load to time)."
            )
        raise NoData("No cold-start measurements in this run (cold_start.csv is missing or empty).")
    table = cold_start_stats(cold)
    table["what"] = [
        f"{r.setting} · {r.model}" if r.model else f"{r.setting} · server start"
        for r in table.itertuples()
    ]
    stats = table.set_index(["what", "phase"])
    whats = list(dict.fromkeys(table["what"]))
    phases = [p for p in COLD_START_PHASES if p in set(table["phase"])] + [
        p for p in dict.fromkeys(table["phase"]) if p not in COLD_START_PHASES
    ]
    repeats = int(table["n"].max())

    # One bar per (what, phase) that was measured, grouped by what, a gap between groups.
    bars, centers, y = [], [], 0.0
    for what in whats:
        first = y
        for phase in phases:
            if (what, phase) in stats.index:
                bars.append((y, phase, stats.loc[(what, phase)]))
                y += 1
        centers.append((first + y - 1) / 2)
        y += 0.6

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        labelled: set[str] = set()
        for pos, phase, s in bars:
            ax.barh(
                pos,
                s["median"],
                0.85,
                xerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]],
                color=f"C{phases.index(phase)}",
                label=None if phase in labelled else phase.replace("_", " "),
                error_kw={"lw": 0.8, "capsize": 2},
            )
            labelled.add(phase)
        ax.set_yticks(centers, [_wrap(w) for w in whats])
        ax.invert_yaxis()
        _plain_log_axis(ax, "x")
        ax.set_xlabel(
            f"seconds (log); bars: median, whiskers: min–max over {repeats} repeats"
            if repeats > 1
            else "seconds (log)"
        )
        ax.grid(axis="y", visible=False)
        ax.legend(loc="best")

    return render(draw, width=10.0, height=max(2.5, 0.22 * y + 1.2))


def transfer_vs_inference(table: pd.DataFrame) -> str:
    """Stacked bars per link and batch: inference below, time on the link above.

    Left: seconds. Right: the link's share, which is where the finding shows — high at
    batch 1, falling as the batch grows.
    """
    if table.empty:
        raise NoData(
            "No emulated-link trial has a matching inference time (the run needs a `direct` "
            "trial with the same setting, model, batch and load, or server compute times)."
        )
    ticks = [f"{r.link}\nb{r.batch_size:g}" for r in table.itertuples()]
    measured = table["link_measured_s"].to_numpy(dtype=float)
    analytic = table["link_analytic_s"].to_numpy(dtype=float)
    link_s = np.where(np.isfinite(measured), measured, analytic).clip(min=0)
    inference = table["inference_s"].to_numpy(dtype=float)
    sources = "/".join(sorted(set("/".join(table["inference_source"]).split("/")) - {""}))
    inference_label = {
        "server_compute": "inference (server compute)",
        "direct_latency": "inference (direct-link latency)",
    }.get(sources, f"inference ({sources.replace('_', ' ')})")

    def draw(fig: Figure) -> None:
        left, right = fig.subplots(1, 2)
        x = np.arange(len(table))
        left.bar(x, inference * 1e3, color="C0", label=inference_label)
        left.bar(x, link_s * 1e3, bottom=inference * 1e3, color="C1", label="link (measured)")
        left.scatter(
            x,
            (inference + analytic) * 1e3,
            marker="_",
            s=200,
            color="black",
            zorder=3,
            label="inference + analytic link (RTT + bytes/bandwidth)",
        )
        left.set_xticks(x, ticks)
        left.set_ylabel("median time per request (ms)")
        left.legend(loc="upper left")
        share = link_s / (link_s + inference)
        right.bar(x, (1 - share) * 100, color="C0")
        right.bar(x, share * 100, bottom=(1 - share) * 100, color="C1")
        for xi, s in zip(x, share, strict=True):
            if np.isfinite(s):
                right.text(xi, 101, f"{s:.0%}", ha="center", va="bottom", fontsize=7)
        right.set_xticks(x, ticks)
        right.set_ylim(0, 110)
        right.set_ylabel("share of request time (%) — orange: link")
        for ax in (left, right):
            ax.grid(axis="x", visible=False)

    return render(draw, width=max(8.0, 0.9 * len(table) * 2 + 3), height=4.2)
