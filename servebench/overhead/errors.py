"""The root of this package's errors, below servebench's own root."""

from __future__ import annotations

from servebench.common.errors import ServebenchError


class OverheadError(ServebenchError):
    """A `servebench overhead` probe, side or statistic that could not be run or used."""
