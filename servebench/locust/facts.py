"""What a scenario says about a Locust run that the load cannot: the cloud instance it
stands for and its price, the SLO, and each model's size and FLOP counts.

`servebench ui` reads the scenario (application work: this adapter imports no scenario or
model zoo) and writes these facts as a JSON file it passes with `--trial-facts`; every
swarm's trial rows then carry the same cost, SLO and model columns a scenario run's rows
do (`servebench.results.TRIAL_SCHEMA`), so the report prices Locust runs and
`servebench recommend` ranks them — as closed-loop measurements.

    {"cost": {"instance": "c6i.xlarge", "usd_per_hour": 0.17},
     "slo": {"percentile": 99, "latency_s": 0.2},
     "models": {"conv-d2-w32-0a2c6b": {"layer_type": "conv", "depth": 2, "width": 32,
                "params": 9000, "flops_per_sample": 1.2e6, "weight_bytes": 36000,
                "activation_bytes": 20000}}}

Every part is optional; a model the form names that the scenario does not know gets no
model columns. The row itself is made by the one row builder (`servebench.trial_row`),
as a scenario run's is.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servebench.locust.settings import option_json
from servebench.pricing import InstancePrice
from servebench.trial_row import ModelColumns, Slo


@dataclass(frozen=True)
class TrialFacts:
    instance: str = ""
    usd_per_hour: float | None = None
    slo_percentile: float | None = None
    slo_latency_s: float | None = None
    models: dict[str, ModelColumns] = field(default_factory=dict)

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "models": {name: asdict(columns) for name, columns in self.models.items()}
        }
        if self.instance and self.usd_per_hour is not None:
            document["cost"] = {"instance": self.instance, "usd_per_hour": self.usd_per_hour}
        if self.slo_percentile is not None and self.slo_latency_s is not None:
            document["slo"] = {"percentile": self.slo_percentile, "latency_s": self.slo_latency_s}
        return json.dumps(document, indent=2)

    @property
    def price(self) -> InstancePrice | None:
        """The instance the run stands for, at the scenario's price; None if not named."""
        if self.instance and self.usd_per_hour is not None:
            return InstancePrice(self.instance, self.usd_per_hour)
        return None

    @property
    def slo(self) -> Slo | None:
        if self.slo_percentile is not None and self.slo_latency_s is not None:
            return Slo(self.slo_percentile, self.slo_latency_s)
        return None

    def model(self, name: str) -> ModelColumns | None:
        """The model's columns, if the scenario knows a model of that name."""
        return self.models.get(name)


def read_facts(path: str | Path) -> TrialFacts:
    """The facts in `path`; ValueError naming the file and the field that is wrong."""
    where = f"--trial-facts {path}"
    document = option_json("--trial-facts", path)
    try:
        cost = document.get("cost") or {}
        slo = document.get("slo") or {}
        models = document.get("models") or {}
        facts = TrialFacts(
            instance=str(cost.get("instance") or ""),
            usd_per_hour=_positive(cost.get("usd_per_hour"), "cost.usd_per_hour"),
            slo_percentile=_positive(slo.get("percentile"), "slo.percentile"),
            slo_latency_s=_positive(slo.get("latency_s"), "slo.latency_s"),
            models={
                str(name): ModelColumns.from_mapping(values) for name, values in models.items()
            },
        )
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return facts


def _positive(value: Any, name: str) -> float | None:
    if value is None:
        return None
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name}: must be a positive number, got {value!r}")
    return number
