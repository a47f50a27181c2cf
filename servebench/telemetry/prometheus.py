"""Server metrics scraped from a Prometheus page and parsed with `prometheus_client`.

Triton publishes `nv_inference_*` counters per model (requests, executions, cumulative
queue and compute microseconds) and `nv_gpu_utilization` at `:8002/metrics`; TF Serving
publishes `:tensorflow:serving:*` counters and latency histograms at
`/monitoring/prometheus/metrics` when its monitoring config turns them on. Only the
families a trial summary uses are kept (by name prefix); histogram buckets are dropped,
their `_sum` and `_count` are enough for per-request means.

prometheus_client names counter samples `<family>_total` whatever the page said; rows use
the family name, which for Triton and TF Serving is the name on the page.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from servebench.telemetry.rows import Reading

TRITON_PREFIXES = ("nv_inference_", "nv_gpu_", "nv_energy_", "nv_cpu_")
# The counters that count requests and inferences: what `wait_until_quiet` watches.
REQUEST_COUNTERS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        ":tensorflow:serving:request_count",
    }
)
TFS_PREFIXES = (":tensorflow:serving:",)
DEFAULT_PREFIXES = TRITON_PREFIXES + TFS_PREFIXES


def parse_metrics(
    text: str, prefixes: Sequence[str] = DEFAULT_PREFIXES, keep_buckets: bool = False
) -> list[Reading]:
    """Readings for every sample of a family whose name starts with one of `prefixes`."""
    readings = []
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(tuple(prefixes)):
            continue
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):
                continue  # creation timestamps, not measurements
            if name.endswith("_bucket") and not keep_buckets:
                continue
            if family.type == "counter":
                name = family.name
            readings.append(Reading(name, float(sample.value), dict(sample.labels)))
    return readings


class PrometheusSampler:
    """Scrapes `url` at every sample. A scrape error raises (the recorder notes it)."""

    source = "server_metrics"

    def __init__(
        self,
        url: str,
        *,
        prefixes: Sequence[str] = DEFAULT_PREFIXES,
        timeout_s: float = 2.0,
        keep_buckets: bool = False,
    ) -> None:
        self.url = url
        self.prefixes = tuple(prefixes)
        self.timeout_s = timeout_s
        self.keep_buckets = keep_buckets

    def scrape(self) -> str:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                return response.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            raise OSError(f"{self.url}: HTTP {err.code}") from None
        except urllib.error.URLError as err:
            raise OSError(f"{self.url}: {err.reason}") from None

    def sample(self) -> list[Reading]:
        return parse_metrics(self.scrape(), self.prefixes, self.keep_buckets)

    def wait_until_quiet(self, max_wait_s: float = 1.0, pause_s: float = 0.01) -> bool:
        """Read the page until two reads `pause_s` apart show the same request counters;
        False if they still moved after `max_wait_s` (a page that cannot be read has
        nothing to wait for: True, and the reading that follows says why).

        For a reading taken when no request is in flight: a server counts a request a
        moment after its answer left (Triton's backends report statistics once the
        responses are sent), so a reading taken the instant the client has every answer
        can miss the last few. Waiting for the counters to stop moving closes that gap
        without guessing a delay.
        """
        deadline = time.monotonic() + max_wait_s
        try:
            before = _request_counts(self.sample())
            while time.monotonic() < deadline:
                time.sleep(pause_s)
                now = _request_counts(self.sample())
                if now == before:
                    return True
                before = now
        except (OSError, ValueError):
            return True
        return False

    def close(self) -> None:
        pass


def _request_counts(readings: list[Reading]) -> set[tuple]:
    return {
        (r.metric, tuple(sorted(r.labels.items())), r.value)
        for r in readings
        if r.metric in REQUEST_COUNTERS
    }
