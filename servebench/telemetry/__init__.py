"""Telemetry sampled beside a trial: GPUs (NVML), the server's process tree and the host
(psutil) or the server's container (its engine's stats), and the server's own Prometheus
metrics; written to `telemetry.parquet` and reduced to per-trial aggregates; and the host's
compute and memory roofs (`host_peak`, measured once per machine for the roofline); and what
disturbed a replicate's measured window from outside (`interference`) and the judge of
whether that was too much (`disturbance`).
Imports nothing from other servebench packages.
"""

from servebench.telemetry.aggregate import (
    SUMMARY_KEYS,
    aggregate,
    client_minus_server_s,
    counter_delta,
    tfs_stats,
    triton_stats,
)
from servebench.telemetry.container import ContainerStatsSampler
from servebench.telemetry.disturbance import Disturbance, InterferenceLimits, judge_interference
from servebench.telemetry.gpu import NO_GPU, NvmlSampler
from servebench.telemetry.interference import InterferenceRecord, InterferenceSampler
from servebench.telemetry.process import HostSampler, ProcessTreeSampler
from servebench.telemetry.prometheus import PrometheusSampler, parse_metrics
from servebench.telemetry.recorder import DEFAULT_INTERVAL_S, TelemetryRecorder
from servebench.telemetry.rows import (
    Reading,
    TelemetryRow,
    TelemetryWriter,
    read_telemetry,
    rows_to_table,
    write_telemetry,
)
from servebench.telemetry.sampler import Sampler, SamplerUnavailable

__all__ = [
    "DEFAULT_INTERVAL_S",
    "NO_GPU",
    "SUMMARY_KEYS",
    "ContainerStatsSampler",
    "Disturbance",
    "HostSampler",
    "InterferenceLimits",
    "InterferenceRecord",
    "InterferenceSampler",
    "NvmlSampler",
    "ProcessTreeSampler",
    "PrometheusSampler",
    "Reading",
    "Sampler",
    "SamplerUnavailable",
    "TelemetryRecorder",
    "TelemetryRow",
    "TelemetryWriter",
    "aggregate",
    "client_minus_server_s",
    "counter_delta",
    "judge_interference",
    "parse_metrics",
    "read_telemetry",
    "rows_to_table",
    "tfs_stats",
    "triton_stats",
    "write_telemetry",
]
