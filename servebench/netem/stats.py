"""Byte and time counters of the link, per direction and per open connection.

They let a caller say how long a request spent on the link (`delay_s`, summed over the
delivery pieces) next to how long the server took, which is the paper's central question
(transfer time versus inference time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(slots=True)
class DirectionStats:
    """Counters of one direction (`up`: client → server, `down`: server → client)."""

    bytes_in: int = 0  # read from the sending endpoint
    bytes_out: int = 0  # delivered to the receiving endpoint
    pieces: int = 0  # delivery units (a read is cut into ~1 ms pieces on a limited link)
    segments: int = 0  # 1460-byte TCP segments the loss model saw
    lost_segments: int = 0  # segments the loss model dropped (and delivered late)
    busy_s: float = 0.0  # time the link spent serializing this direction's bytes
    delay_s: float = 0.0  # sum over pieces of (delivered - read)
    max_delay_s: float = 0.0  # longest a piece spent on the link

    def add(self, other: DirectionStats) -> None:
        """Fold another counter set into this one (closed connections into totals)."""
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        self.pieces += other.pieces
        self.segments += other.segments
        self.lost_segments += other.lost_segments
        self.busy_s += other.busy_s
        self.delay_s += other.delay_s
        self.max_delay_s = max(self.max_delay_s, other.max_delay_s)

    def copy(self) -> DirectionStats:
        return DirectionStats(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(slots=True)
class ConnectionStats:
    """Counters of one open connection, keyed by the client's address as the proxy sees it."""

    client: str
    opened_at: float  # the emulator's clock (time.monotonic), seconds
    up: DirectionStats
    down: DirectionStats


@dataclass(slots=True)
class LinkStats:
    """A snapshot of the whole emulator: totals over all connections, and the open ones."""

    profile: str
    up: DirectionStats = field(default_factory=DirectionStats)
    down: DirectionStats = field(default_factory=DirectionStats)
    connections_opened: int = 0
    connections_open: int = 0
    upstream_failures: int = 0
    connections: list[ConnectionStats] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinkStats:
        conns = [
            ConnectionStats(
                client=c["client"],
                opened_at=c["opened_at"],
                up=DirectionStats(**c["up"]),
                down=DirectionStats(**c["down"]),
            )
            for c in data.get("connections", [])
        ]
        return cls(
            profile=data["profile"],
            up=DirectionStats(**data["up"]),
            down=DirectionStats(**data["down"]),
            connections_opened=data["connections_opened"],
            connections_open=data["connections_open"],
            upstream_failures=data["upstream_failures"],
            connections=conns,
        )
