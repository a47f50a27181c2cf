"""A replicated run's files written directly, as the scenario runner writes them: each
setting measured at one rate in R rounds, its p99 given per round, its replicate rows in
trials.csv and its settings.csv row from the one builder (`setting_row`). For tests of the
readers that decide on replicates (recommend, report compare) without measuring."""

from __future__ import annotations

import json
from pathlib import Path

from servebench.pricing import load_prices
from servebench.results import RunDirectory, TrialRow
from servebench.setting_row import build_setting_row

INSTANCE = "c6i.xlarge"
SLO_S = 0.050


def replicated_run(
    root: Path, name: str, p99_ms: dict[str, list[float]], rate: float = 100.0
) -> Path:
    """`root/name`: settings named by `p99_ms`'s keys, one replicate a round."""
    path = root / name
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"run_id": name, "status": "complete"}))
    directory = RunDirectory(path)
    price = load_prices()[INSTANCE].usd_per_hour
    for setting, values in p99_ms.items():
        base = f"t{setting}"
        for k, p99 in enumerate(values, start=1):
            seconds = p99 / 1e3
            directory.rows.append(
                TrialRow.from_record(
                    {
                        "trial_id": base if k == 1 else f"{base}.r{k}",
                        "replicate_of": base, "replicate": k, "round": k, "position": 1,
                        "status": "ok", "verdict": "VALID", "server": "triton",
                        "setting": setting, "protocol": "http", "model": "conv-d2-w32-abcdef",
                        "batch_size": 1, "link": "direct", "load_kind": "rate",
                        "load_level": rate, "mode": "open", "target_rate": rate,
                        "achieved_rate": rate, "throughput_rps": rate, "throughput_ips": rate,
                        "latency_p50": seconds / 2, "latency_p99": seconds,
                        "latency_p99_low": seconds * 0.9, "latency_p99_high": seconds * 1.1,
                        "slo_percentile": 99.0, "slo_bound_s": SLO_S, "slo_latency_s": seconds,
                        "slo_latency_low": seconds * 0.9, "slo_latency_high": seconds * 1.1,
                        "slo_met": "met", "instance": INSTANCE, "usd_per_hour": price,
                        "request_bytes_mean": 1000.0, "response_bytes_mean": 500.0,
                    }
                )
            )  # fmt: skip
    directory.write_trials()
    by_setting: dict[str, list[TrialRow]] = {}
    for row in directory.rows:
        by_setting.setdefault(row.replicate_of, []).append(row)
    planned = len(next(iter(p99_ms.values())))
    directory.write_settings(
        [build_setting_row(t, rows, planned=planned) for t, rows in by_setting.items()]
    )
    return path
