"""servebench.load: arrival processes, the open/closed-loop engine, records and statistics.

It drives anything that implements `servebench.clients.base.InferenceClient` and knows
nothing about servers or scenarios (DESIGN.md layering).

The names below are imported on first use (PEP 562): a caller that needs one light
module, such as the command line and the scenario schema reading the verdict's defaults
from `load.summary`, must not pay for numpy, pyarrow and the engine to get them.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module that defines it.
_HOMES = {
    "ArrivalProcess": "arrivals",
    "TraceArrivals": "arrivals",
    "constant": "arrivals",
    "linear": "arrivals",
    "poisson": "arrivals",
    "step": "arrivals",
    "run": "dispatch",
    "summarize_reports": "combine",
    "EngineReport": "engine",
    "LoadEngine": "engine",
    "LoadControl": "events",
    "LoadEvent": "events",
    "Measuring": "events",
    "PartLost": "events",
    "Progress": "events",
    "Started": "events",
    "Stopped": "events",
    "run_in_loop": "in_process",
    "LiveFigures": "live",
    "Mix": "mix",
    "MixTarget": "mix",
    "RECORD_SCHEMA": "records",
    "MemoryRecordSink": "records",
    "ParquetRecordWriter": "records",
    "RecordSink": "records",
    "read_records": "records",
    "LoadPlan": "plan",
    "OneClient": "plan",
    "Target": "plan",
    "LoadSettings": "settings",
    "EarlyStopSettings": "settings",
    "StabilitySettings": "settings",
    "per_generator": "shares",
    "columns_from_table": "stats",
    "summarize": "stats",
    "INVALID": "summary",
    "VALID": "summary",
    "LoadSummary": "summary",
    "WindowStats": "summary",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
