"""The one builder of a trial's trials.csv row, for the scenario runner and Locust runs alike.

A row is what one measured load says (`LoadSummary`: counts, rates, latency percentiles,
the verdict with its codes), put beside where the trial sits in the study
(`TrialCoordinates`), the model's size, the emulated link and what it should add, the
server's telemetry, the price and the SLO. Producers differ only in what they pass: the
scenario runner has telemetry and the host's peak, a Locust swarm has its generator's CPU
time and is a closed loop of users. Every column keeps its meaning whoever wrote it, so
the report, `recommend` and `report compare` read both the same way.

The SLO verdict comes from the same requests and the same percentile function as the row's
`latency_p*` columns (`LoadSummary.latency_at`): with a p99 SLO, `slo_latency_s` is
`latency_p99`, and its interval (`slo_latency_low`/`_high`) is `latency_p99_low`/`_high`.
`slo_met` is decided on that interval, not on the point, by the one judge
(`common.slo_judge`): `met` when its high bound is within the bound, `missed` when its low
bound is over it, `undecided` when it straddles it, with the request count that would
decide it. A search row's SLO columns are its chosen step's, judged the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from servebench.common.slo_judge import Judgement, judge_latencies
from servebench.common.verdict_codes import INTERFERENCE_CODES, join_codes, split_codes
from servebench.load.summary import LoadSummary
from servebench.netem import LinkProfile
from servebench.pricing import InstancePrice, cost_per_million
from servebench.results import (
    SearchStepRecord,
    TrialRow,
    gang_json,
    mix_json,
    search_steps_json,
)
from servebench.telemetry import client_minus_server_s
from servebench.telemetry.disturbance import Disturbance, judge_interference
from servebench.telemetry.interference import InterferenceRecord

DIRECT = "direct"
# Summary fields that are not row columns: the windows are in the records, the batch size
# is a coordinate, and the verdict's lists are written joined.
_NOT_COLUMNS = ("windows", "batch_size", "reasons", "warnings", "reason_codes", "warning_codes")


@dataclass(frozen=True)
class TrialCoordinates:
    """Which trial: where it sits in the study (what `report compare` joins on) and how
    its server was reached. `link` is the link's name as the trial knows it."""

    trial_id: str
    index: int
    server: str
    api: str  # the API the server serves: triton | tfs ("" where none is known)
    setting: str
    model: str
    batch_size: int
    link: str
    load_kind: str  # rate | concurrency | trace | search | users (Locust)
    load_level: float | None
    launch: str  # local | docker | remote | locust
    protocol: str  # http | grpc
    settings_json: str | None = None
    client_protocol: str | None = None  # Locust: the user class's protocol
    model_version: str | None = None  # Locust: the version requested
    swarm: int | None = None  # Locust: the swarm the trial belongs to


@dataclass(frozen=True)
class ModelColumns:
    """The model's family and, where it was counted (`model_zoo.counting`), its size: the
    roofline's inputs. A producer that cannot count it leaves the counts None.

    A generated model has a `layer_type` (its family), depth and width; a user's imported
    model has none of them (it is not one of the families) and its file's `format`
    instead (onnx, keras, triton, ...). One column, one meaning: readers that group by
    family are never handed a file format."""

    layer_type: str | None = None
    format: str | None = None
    depth: int | None = None
    width: int | None = None
    params: int | None = None
    flops_per_sample: float | None = None
    weight_bytes: int | None = None
    activation_bytes: int | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ModelColumns:
        """From a mapping of these names (a facts file), ignoring any other key."""
        return cls(**{name: values[name] for name in MODEL_COLUMNS if name in values})


MODEL_COLUMNS = tuple(f.name for f in fields(ModelColumns))


@dataclass(frozen=True)
class WireBytes:
    """Bytes on the wire over every measured request (failures included)."""

    requests: int
    request_bytes: int
    response_bytes: int


@dataclass(frozen=True)
class Slo:
    """The latency SLO a trial is held to: the `percentile`-th latency within `bound_s`."""

    percentile: float
    bound_s: float


class SearchStep(Protocol):
    """One step of an SLO search as the row records it (`servebench.scenario.search`)."""

    rate: float
    latency: float  # the SLO percentile of the step's latencies, s
    met: bool
    verdict: str  # met / missed / undecided (an unusable step missed)
    slo: Judgement  # the step's SLO percentile interval, judged
    result: LoadSummary


@dataclass(frozen=True)
class Search:
    """An SLO search's outcome: the highest rate that met the SLO and every step run; the
    row's own figures are those of the summary handed to `build_row` (the chosen step)."""

    max_rate: float | None
    steps: Sequence[SearchStep]


def build_row(
    where: TrialCoordinates,
    summary: LoadSummary,
    *,
    model: ModelColumns | None = None,
    link: LinkProfile | None = None,
    wire: WireBytes | None = None,
    telemetry: Mapping[str, Any] | None = None,
    host_peak_flops: float | None = None,
    price: InstancePrice | None = None,
    slo: Slo | None = None,
    search: Search | None = None,
    client_cpu_s: float | None = None,
    interference: InterferenceRecord | None = None,
) -> TrialRow:
    """The trial's row (columns: `servebench.results.TRIAL_SCHEMA`).

    The load summary's and telemetry's fields go in under their own names, so a field
    either adds must also be added to the schema: the row refuses it (`TrialRowError`).
    `interference`, what disturbed the measured window from outside, is judged here
    (`telemetry.disturbance`): each figure over its limit is a warning with its code."""
    stats = summary.to_dict()
    disturbance = (
        judge_interference(interference, _open_loop_lag(summary))
        if interference is not None
        else Disturbance()
    )
    values: dict[str, Any] = {
        "trial_id": where.trial_id,
        "index": where.index,
        "status": "ok",
        "reason": "",
        "verdict": stats.pop("verdict"),
        "verdict_reasons": "; ".join(summary.reasons),
        "verdict_warnings": "; ".join([*summary.warnings, *disturbance.reasons]),
        "verdict_reason_codes": join_codes(summary.reason_codes),
        "verdict_warning_codes": join_codes([*summary.warning_codes, *disturbance.codes]),
        **asdict(where),
        **asdict(model or ModelColumns()),
    }
    for name in _NOT_COLUMNS:
        stats.pop(name, None)
    stats["errors_by_kind"] = json.dumps(stats["errors_by_kind"])
    mix = stats.pop("mix")  # a weighted mix: each model's figures, in a column of their own
    stats["mix_json"] = mix_json(mix) if mix else None
    stats.pop("gang")  # a gang of generators: its start and each generator's figures
    stats["gang_json"] = gang_json(summary.gang) if summary.gang is not None else None
    values.update(stats)
    if link is not None:
        values.update(
            link_rtt_s=link.rtt_s, link_down_mbps=link.down_mbps, link_up_mbps=link.up_mbps
        )
    if wire is not None and wire.requests:
        values.update(_wire_columns(wire, link))
    if telemetry is not None:
        values.update({k: v for k, v in telemetry.items() if k != "gpu_source"})
        latency = values.get("latency_mean")
        values["client_minus_server_s"] = (
            client_minus_server_s(latency, telemetry) if latency is not None else None
        )
    values["host_peak_flops"] = host_peak_flops
    values["client_cpu_s"] = client_cpu_s
    if interference is not None:
        values.update(_interference_columns(interference))
    if price is not None:
        ips = values.get("throughput_ips") or 0.0
        values.update(
            instance=price.instance_type,
            usd_per_hour=price.usd_per_hour,
            cost_per_million=cost_per_million(ips, price.usd_per_hour) if ips > 0 else None,
        )
    if slo is not None:
        values.update(slo_percentile=slo.percentile, slo_bound_s=slo.bound_s)
        values.update(_slo_columns(summary, slo))
    if search is not None:
        values.update(max_rate=search.max_rate, search_steps=search_steps_cell(search.steps))
    return TrialRow.from_record(values)


def _interference_columns(record: InterferenceRecord) -> dict[str, float | None]:
    return {
        "interference_cpu_pressure": record.cpu_pressure,
        "interference_steal": record.steal,
        "interference_other_cpu": record.other_cpu,
    }


def _open_loop_lag(summary: LoadSummary) -> float | None:
    """The generator's schedule lag p99 where it means one (open loop; a closed loop sends
    when an answer comes, so it has no schedule to lag)."""
    return summary.schedule_lag_p99 if summary.mode == "open" else None


def disturbed(row: TrialRow) -> bool:
    """Whether a row's measurement was disturbed from outside (an interference_* code)."""
    return any(code in INTERFERENCE_CODES for code in split_codes(row.verdict_warning_codes))


def failed_row(where: TrialCoordinates, reason: str, model: ModelColumns | None = None) -> TrialRow:
    """A trial that measured nothing usable: which trial it was, and why."""
    return TrialRow.from_record(
        {
            **asdict(where),
            **asdict(model or ModelColumns()),
            "status": "failed",
            "reason": reason,
        }
    )


def search_steps_cell(steps: Sequence[SearchStep]) -> str:
    """The `search_steps` column: one `SearchStepRecord` per step (the offered rate, the
    SLO-percentile latency, met, why the step's run was INVALID and those reasons' codes,
    the SLO verdict and the percentile's interval), as `analysis.search` reads it."""
    return search_steps_json(
        [
            SearchStepRecord(
                rate=s.rate,
                latency_s=_seconds(s.latency),
                met=s.met,
                reasons="; ".join(s.result.reasons),
                codes=tuple(s.result.reason_codes),
                verdict=s.verdict,
                low_s=_seconds(s.slo.low),
                high_s=_seconds(s.slo.high),
            )
            for s in steps
        ]
    )


def _seconds(value: float) -> float | None:
    return None if math.isnan(value) else value


def slo_judgement(summary: LoadSummary, slo: Slo) -> Judgement:
    """The SLO decision on a load's successful requests: its percentile's interval at the
    level the load decides its SLO at (its early stop's, else its confidence)."""
    level = summary.slo_confidence_level or summary.confidence_level
    latencies = summary.latencies if summary.latencies is not None else ()
    return judge_latencies(latencies, percentile=slo.percentile, bound_s=slo.bound_s, level=level)


def _slo_columns(summary: LoadSummary, slo: Slo) -> dict[str, Any]:
    """The SLO percentile, its interval, the decision on it and the count that decides it.
    No successful request misses the SLO (there is no latency to meet it with)."""
    judged = slo_judgement(summary, slo)
    return {
        "slo_latency_s": summary.latency_at(slo.percentile),
        "slo_latency_low": judged.low,
        "slo_latency_high": judged.high,
        "slo_confidence_level": judged.level,
        "slo_met": judged.verdict,
        "slo_requests_to_decide": judged.requests_to_decide,
    }


def _wire_columns(wire: WireBytes, link: LinkProfile | None) -> dict[str, float]:
    """Mean wire sizes, and the time the link alone should add: RTT + bytes / bandwidth."""
    request = wire.request_bytes / wire.requests
    response = wire.response_bytes / wire.requests
    columns = {"request_bytes_mean": request, "response_bytes_mean": response}
    if link is not None:
        link_time = link.rtt_s
        if link.up_mbps:
            link_time += request * 8 / (link.up_mbps * 1e6)
        if link.down_mbps:
            link_time += response * 8 / (link.down_mbps * 1e6)
        columns["link_time_analytic_s"] = link_time if link.name != DIRECT else 0.0
    return columns
