"""Numbers as a person reads them: seconds shown in milliseconds, a latency with its
confidence interval. The one definition for every layer that prints figures (the load's
table, analysis's report and terminal tables); files stay in seconds.
"""

from __future__ import annotations

import math
from typing import Any


def missing(value: Any) -> bool:
    """None, NaN or pandas' NA (told by its type's name: this module imports no pandas)."""
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or type(value).__name__ == "NAType"
    )


def ms(seconds: Any, digits: int = 1) -> str:
    """Seconds shown as milliseconds (files stay in seconds; people read ms)."""
    if missing(seconds):
        return "–"
    value = float(seconds) * 1e3
    if value != 0 and abs(value) < 10 ** (-digits):
        return f"{value:.2g}"
    return f"{value:,.{digits}f}"


def ms_interval(seconds: Any, low: Any, high: Any, digits: int = 1) -> str:
    """A latency and its confidence interval in milliseconds, `42.9 (41.8–44.6)`; a side
    too few requests bound shows "?", and a value without any interval (an older run's)
    shows alone."""
    if missing(seconds) or (missing(low) and missing(high)):
        return ms(seconds, digits)
    side = [("?" if missing(v) else ms(v, digits)) for v in (low, high)]
    return f"{ms(seconds, digits)} ({side[0]}–{side[1]})"
