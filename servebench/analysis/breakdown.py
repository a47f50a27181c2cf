"""Transfer vs inference: how much of a request's time the network takes, per link and batch.

InferBench's network finding is that at small batch sizes the time on the link rivals the
inference itself, while at large batch sizes inference dominates. Two estimates of the
link's share are given side by side, because each can mislead alone:

- *measured*: the trial's median latency minus the median latency of the `direct`-link
  trial with the same coordinates (server setting, model, batch size, load level). It
  includes what the emulator really does (TCP slow start, loss, queueing) but also the
  noise of two separate trials on a shared machine, so it can come out slightly negative.
- *analytic*: one round-trip plus the request and response bytes over the link's up and
  down bandwidth — what the link costs a request on an otherwise idle path.

Medians are used rather than means because one stall on a busy 2-core host moves a mean
by more than the whole link time of a wired profile.

The inference side is the server's own compute time where the server reports it
(Triton's compute_infer), else the direct-link latency, which is then labelled as such.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DIRECT_LINK = "direct"
# What identifies "the same trial on another link".
MATCH_KEYS = ("server", "setting", "model", "batch_size", "load_kind", "load_level")


def analytic_link_time(
    rtt_s: float, up_mbps: float, down_mbps: float, request_bytes: float, response_bytes: float
) -> float:
    """One round trip plus serialisation of both messages; an empty bandwidth is unlimited."""
    rtt = 0.0 if pd.isna(rtt_s) else float(rtt_s)
    up = 0.0 if pd.isna(up_mbps) or pd.isna(request_bytes) else request_bytes * 8 / (up_mbps * 1e6)
    down = (
        0.0
        if pd.isna(down_mbps) or pd.isna(response_bytes)
        else response_bytes * 8 / (down_mbps * 1e6)
    )
    return rtt + up + down


def transfer_breakdown(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per usable trial (direct ones included as the zero-transfer reference).

    Columns: the match keys, link, trial_id, direct_trial_id, latency_p50,
    direct_latency_p50, link_measured_s, link_analytic_s, inference_s, inference_source
    ("server_compute" or "direct_latency"), transfer_share (link / (link + inference),
    from the measured link time where there is one, else the analytic one).
    """
    usable = trials[(trials["status"] == "ok") & trials["latency_p50"].notna()].copy()
    if usable.empty:
        return pd.DataFrame(columns=[*_COLUMNS])
    keys = list(MATCH_KEYS)
    # pandas matches empty keys with empty keys in a merge, which is what a run that does
    # not vary (or record) one coordinate needs.
    direct = usable[usable["link"] == DIRECT_LINK].drop_duplicates(subset=keys, keep="last")
    direct = direct[[*keys, "trial_id", "latency_p50"]].rename(
        columns={"trial_id": "direct_trial_id", "latency_p50": "direct_latency_p50"}
    )
    merged = usable.merge(direct, on=keys, how="left")

    analytic = [
        analytic_link_time(
            r.link_rtt_s,
            r.link_up_mbps,
            r.link_down_mbps,
            r.request_bytes_mean,
            r.response_bytes_mean,
        )
        if r.link != DIRECT_LINK
        else 0.0
        for r in merged.itertuples()
    ]
    # The runner may have written its own analytic figure; it knows the link's real
    # profile (traces included), so it wins over the recomputation from summary columns.
    merged["link_analytic_s"] = merged["link_time_analytic_s"].where(
        merged["link_time_analytic_s"].notna(), pd.Series(analytic, index=merged.index)
    )
    merged["link_measured_s"] = np.where(
        merged["link"] == DIRECT_LINK, 0.0, merged["latency_p50"] - merged["direct_latency_p50"]
    )
    has_compute = merged["server_compute_s"].notna() & (merged["server_compute_s"] > 0)
    merged["inference_s"] = merged["server_compute_s"].where(
        has_compute, merged["direct_latency_p50"]
    )
    merged["inference_source"] = np.where(has_compute, "server_compute", "direct_latency")
    merged.loc[merged["inference_s"].isna(), "inference_source"] = None
    link = merged["link_measured_s"].where(
        merged["link_measured_s"].notna(), merged["link_analytic_s"]
    )
    total = link.clip(lower=0) + merged["inference_s"]
    merged["transfer_share"] = (link.clip(lower=0) / total).where(total > 0)
    return merged[list(_COLUMNS)].reset_index(drop=True)


_COLUMNS = (
    *MATCH_KEYS,
    "link",
    "trial_id",
    "direct_trial_id",
    "latency_p50",
    "direct_latency_p50",
    "link_measured_s",
    "link_analytic_s",
    "inference_s",
    "inference_source",
    "transfer_share",
)


def by_link_and_batch(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Medians over settings, models and load levels: the table and the stacked bars.

    Links other than `direct` only (direct has no transfer by construction), ordered by
    link RTT-ish appearance order then batch size.
    """
    rows = breakdown[(breakdown["link"] != DIRECT_LINK) & breakdown["inference_s"].notna()]
    if rows.empty:
        return pd.DataFrame(
            columns=[
                "link",
                "batch_size",
                "trials",
                "link_measured_s",
                "link_analytic_s",
                "inference_s",
                "transfer_share",
                "inference_source",
            ]
        )
    grouped = rows.groupby(["link", "batch_size"], sort=False)
    table = grouped.agg(
        trials=("trial_id", "count"),
        link_measured_s=("link_measured_s", "median"),
        link_analytic_s=("link_analytic_s", "median"),
        inference_s=("inference_s", "median"),
        transfer_share=("transfer_share", "median"),
        inference_source=("inference_source", lambda s: "/".join(sorted(set(s.dropna())))),
    ).reset_index()
    order = {name: i for i, name in enumerate(dict.fromkeys(rows["link"]))}
    table["_order"] = table["link"].map(order)
    table = table.sort_values(["_order", "batch_size"]).drop(columns="_order")
    return table.reset_index(drop=True)
