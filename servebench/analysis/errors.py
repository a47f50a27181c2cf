"""The root of this package's errors, below servebench's own root."""

from __future__ import annotations

from servebench.common.errors import ServebenchError


class AnalysisError(ServebenchError):
    """A result the analysis cannot read, draw or answer from."""
