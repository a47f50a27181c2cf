"""The root of this package's errors, below servebench's own root."""

from __future__ import annotations

from servebench.common.errors import ServebenchError


class ClusterError(ServebenchError):
    """A cluster job, store, leader or API request that could not be done."""
