"""The server's own queue and compute time per request over the measured part of a load
(`servebench load`), from its Prometheus page (as perf_analyzer prints them), read with
the same parser and counter rules as the scenario runner's telemetry.
"""

from __future__ import annotations

import time
from typing import Any


class ServerMetrics:
    """The server's counters at the start of the measured part of a load and at its end.

    `start` is called on the load's `Measuring` event: the first scrape is taken before the
    first measured send, so warm-up requests do not enter the server's figures (with
    `quiet`, closed loop in one process, none is in flight then and the counters are let
    settle first; see `load.engine`). The last scrape, after every answer, is let settle
    too. `summary` returns None when the page could not be read or counted none of this
    load's requests, with the reason in `note`.
    """

    def __init__(self, url: str, model: str, *, quiet: bool) -> None:
        from servebench.telemetry.prometheus import PrometheusSampler

        self.url = url
        self.model = model
        self.quiet = quiet
        self.note = ""
        self._sampler = PrometheusSampler(url)
        self._first: list[Any] = []

    def start(self) -> None:
        if self.quiet:
            self._sampler.wait_until_quiet()
        self._first = self._scrape()

    def _scrape(self) -> list[Any]:
        from servebench.telemetry.aggregate import SERVER_METRICS
        from servebench.telemetry.rows import TelemetryRow

        now = time.time()
        try:
            readings = self._sampler.sample()
        except (OSError, ValueError) as exc:
            self.note = (
                f"server metrics: none ({exc}); "
                "give --metrics-url for the server's queue/compute breakdown"
            )
            return []
        return [
            TelemetryRow("", now, SERVER_METRICS, r.metric, r.value, r.labels) for r in readings
        ]

    def summary(self) -> dict[str, Any] | None:
        """Per-request queue/compute seconds and counts (telemetry.aggregate keys)."""
        from servebench.telemetry.aggregate import SERVER_METRIC_KEYS, aggregate

        if self._first:
            self._sampler.wait_until_quiet()
        last = self._scrape() if self._first else []
        if not self._first or not last:
            return None
        stats = aggregate(self._first + last, self.model)
        if not stats.get("server_requests"):
            self.note = f"server metrics: {self.url} counted no requests of model {self.model!r}"
            return None
        return {key: stats[key] for key in SERVER_METRIC_KEYS}
