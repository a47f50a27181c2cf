"""What one probe measured once, on one side: the unit every probe returns and the
runner, the statistics and the report share.

A probe runs in its own process (on the host, or inside the container through the same
`python -m servebench.overhead.probe_main`), so its measurements cross a process boundary
as JSON lines; `to_json`/`from_json` are that wire format.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

Better = Literal["higher", "lower"]
Side = Literal["host", "container"]


@dataclass(frozen=True)
class Measurement:
    """One figure from one probe run.

    `metric` is unique within a probe (e.g. "hpl_gflops", "ioping_random_direct_p50");
    `better` says which direction is good, so the overhead sign means the same for every
    metric (positive = the container is worse). `cpu_s`/`wall_s` are the probe step's own
    CPU and wall time, for the CPU-time comparison on shared machines. `detail` holds
    whatever helps a reader check the figure (parameters, sizes) and is not compared.
    """

    probe: str
    metric: str
    value: float
    unit: str
    better: Better
    cpu_s: float | None = None
    wall_s: float | None = None
    detail: dict[str, str | float | int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Measurement:
        data = json.loads(line)
        return cls(**data)
