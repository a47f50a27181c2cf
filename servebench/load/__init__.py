"""servebench.load: arrival processes, the open/closed-loop engine, records and statistics.

It drives anything that implements `servebench.clients.base.InferenceClient` and knows
nothing about servers or scenarios (DESIGN.md layering).
"""

from servebench.load.arrivals import (
    ArrivalProcess,
    TraceArrivals,
    constant,
    linear,
    poisson,
    step,
)
from servebench.load.engine import EngineReport, LoadEngine
from servebench.load.records import (
    RECORD_SCHEMA,
    MemoryRecordSink,
    ParquetRecordWriter,
    RecordSink,
    read_records,
)
from servebench.load.runner import run, run_in_loop, run_load, summarize_reports
from servebench.load.settings import LoadSettings, StabilitySettings
from servebench.load.stats import columns_from_table, summarize
from servebench.load.summary import INVALID, VALID, LoadSummary, WindowStats

__all__ = [
    "INVALID",
    "RECORD_SCHEMA",
    "VALID",
    "ArrivalProcess",
    "EngineReport",
    "LoadEngine",
    "LoadSettings",
    "LoadSummary",
    "MemoryRecordSink",
    "ParquetRecordWriter",
    "RecordSink",
    "StabilitySettings",
    "TraceArrivals",
    "WindowStats",
    "columns_from_table",
    "constant",
    "linear",
    "poisson",
    "read_records",
    "run",
    "run_in_loop",
    "run_load",
    "step",
    "summarize",
    "summarize_reports",
]
