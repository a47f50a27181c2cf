"""What every sampler is: a source name and a `sample()` that returns readings.

A sampler that cannot work on this machine (no NVML, no such process) raises
`SamplerUnavailable` when it is created or first sampled; the recorder reports that once
as a note and goes on without it. Any other error while sampling is also noted (once per
distinct message) and sampling continues: telemetry must never end a trial.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from servebench.common.errors import ServebenchError
from servebench.telemetry.rows import Reading


class SamplerUnavailable(ServebenchError):
    """This sampler cannot measure anything here; the message says why, for a person."""


@runtime_checkable
class Sampler(Protocol):
    source: str

    def sample(self) -> list[Reading]:
        """Read current values; called from the recorder's thread at every interval."""
        ...

    def close(self) -> None:
        """Release what the sampler holds (NVML handle, HTTP session)."""
        ...
