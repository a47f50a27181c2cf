"""The root of this package's errors, below servebench's own root."""

from __future__ import annotations

from servebench.common.errors import ServebenchError


class ModelZooError(ServebenchError):
    """A model spec, build, export or parity check that failed."""
