"""The link model: when does each byte that entered the link come out at the other end?

Pure computation on a clock the caller passes in (no I/O), so it is tested exactly.

Per direction a byte goes through:
1. **Serialization** at the link's rate, FIFO, on a link shared by all connections (one
   user's link, as in the paper's set-up), or at the opportunities of a Mahimahi trace.
2. **Propagation**: RTT/2 plus a jitter sample. Delivery stays in order (a TCP receiver
   never sees a later byte first), so a late piece holds back the pieces behind it.
3. **Loss as TCP experiences it**: the proxy sits on top of TCP, so it cannot drop bytes;
   a lost segment's bytes arrive late instead, never corrupted, still in order. If three
   more segments follow it, the receiver's duplicate ACKs trigger a fast retransmit
   (RFC 5681) and it arrives one RTT after the third of them; otherwise (a tail loss, such
   as a small request) it waits for the retransmission timeout. The retransmission uses
   the link a second time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

from servebench.netem.profiles import Direction, LinkProfile
from servebench.netem.stats import DirectionStats
from servebench.netem.trace import OPPORTUNITY_BYTES, MahimahiTrace

#: TCP payload of one Ethernet-sized segment; loss and fast retransmit count these.
SEGMENT_BYTES = 1460
#: Duplicate ACKs that trigger a fast retransmit (RFC 5681).
DUPACK_THRESHOLD = 3
#: A read is cut into pieces of about this much link time, so the first byte of a big
#: write is not held until the whole write has been serialized.
PIECE_INTERVAL_S = 0.001


class Serializer(Protocol):
    """The bottleneck of one direction, shared by every connection on the link."""

    bytes_per_s: float

    def transmit(self, now: float, nbytes: int) -> float:
        """Queue `nbytes` at `now`; return when their last byte has left the link."""
        ...

    def backlog_s(self, now: float) -> float:
        """How long the bytes already queued will still occupy the link."""
        ...


class RateSerializer:
    """A constant-rate link: a byte leaves 8/rate seconds after the one before it."""

    def __init__(self, bps: float) -> None:
        self.bytes_per_s = bps / 8
        self._free_at = -math.inf

    def transmit(self, now: float, nbytes: int) -> float:
        self._free_at = max(now, self._free_at) + nbytes / self.bytes_per_s
        return self._free_at

    def backlog_s(self, now: float) -> float:
        return max(0.0, self._free_at - now)


class TraceSerializer:
    """A Mahimahi trace-driven link; `start` is when the trace's time zero happened."""

    def __init__(self, trace: MahimahiTrace, start: float) -> None:
        self.bytes_per_s = trace.mean_bps / 8
        self._trace = trace
        self._start = start
        self._next = 0  # index of the first opportunity nobody has used yet
        self._spare = 0  # bytes still free in opportunity _next - 1
        self._free_at = start

    def transmit(self, now: float, nbytes: int) -> float:
        first = self._trace.first_index_at_or_after(now - self._start)
        if first >= self._next:
            # The queue ran empty: opportunities before `first` passed unused and are lost.
            self._next, self._spare = first, 0
        remaining = nbytes
        last = self._next - 1
        if self._spare:
            used = min(self._spare, remaining)
            self._spare -= used
            remaining -= used
        if remaining:
            count = -(-remaining // OPPORTUNITY_BYTES)
            self._spare = count * OPPORTUNITY_BYTES - remaining
            self._next += count
            last = self._next - 1
        self._free_at = self._start + self._trace.opportunity_time(last)
        return self._free_at

    def backlog_s(self, now: float) -> float:
        return max(0.0, self._free_at - now)


def make_serializer(profile: LinkProfile, direction: Direction, start: float) -> Serializer | None:
    """The bottleneck of one direction, or None when that direction is not rate-limited."""
    trace = profile.trace(direction)
    if trace is not None:
        return TraceSerializer(trace, start)
    rate = profile.rate_bps(direction)
    return None if rate is None else RateSerializer(rate)


@dataclass(frozen=True)
class DirectionSpec:
    """The numbers of one direction the hot path needs, computed once from a profile."""

    delay_s: float  # nominal one-way propagation delay
    jitter_sd_s: float  # standard deviation of the one-way delay
    distribution: str
    loss: float  # per-segment loss probability
    rtt_s: float
    rto_s: float
    piece_bytes: int | None  # None: a read is delivered as one piece
    queue_s: float | None  # backlog (in link time) above which reading pauses

    @classmethod
    def from_profile(cls, profile: LinkProfile, direction: Direction) -> DirectionSpec:
        rate = profile.rate_bps(direction)
        queue = profile.effective_queue_bytes(direction)
        if rate is None:
            piece, queue_s = None, None
        else:
            # Whole segments, so a piece's loss odds are those of its segments.
            piece = SEGMENT_BYTES * max(1, round(rate / 8 * PIECE_INTERVAL_S / SEGMENT_BYTES))
            queue_s = None if queue is None else queue / (rate / 8)
        return cls(
            delay_s=profile.rtt_s / 2,
            # jitter_s is the RTT's spread; two independent one-way samples add variances.
            jitter_sd_s=profile.jitter_s / math.sqrt(2),
            distribution=profile.jitter_distribution,
            loss=profile.loss,
            rtt_s=profile.rtt_s,
            rto_s=profile.effective_rto_s,
            piece_bytes=piece,
            queue_s=queue_s,
        )


class Piece:
    """A run of bytes (or the end of the stream, data None) and when it is due out."""

    __slots__ = ("arrived", "data", "due")

    def __init__(self, due: float, data: bytes | None, arrived: float) -> None:
        self.due = due
        self.data = data
        self.arrived = arrived


class DirectionModel:
    """One direction of one connection: turns bytes read at `now` into timed pieces.

    Pieces are returned in stream order; the caller delivers a piece once it is due *and*
    every piece before it has been delivered, which is what keeps delivery in order.
    """

    def __init__(
        self,
        spec: DirectionSpec,
        serializer: Serializer | None,
        rng: random.Random,
        stats: DirectionStats,
        not_before: float = -math.inf,
    ) -> None:
        self._spec = spec
        self._serializer = serializer
        self._rng = rng
        self._stats = stats
        # Bytes written before the TCP handshake would have finished cannot leave earlier.
        self._not_before = not_before
        self._repairs: list[list] = []  # [lost piece, segments seen after it]

    def _one_way_delay(self) -> float:
        spec = self._spec
        sd = spec.jitter_sd_s
        if not sd:
            return spec.delay_s
        if spec.distribution == "uniform":
            half_width = sd * math.sqrt(3)  # a uniform of this half-width has this sd
            return max(0.0, spec.delay_s + self._rng.uniform(-half_width, half_width))
        return max(0.0, spec.delay_s + self._rng.gauss(0.0, sd))

    def schedule(self, now: float, data: bytes) -> list[Piece]:
        """Put `data`, read at `now`, on the link; return its pieces with their due times."""
        spec = self._spec
        ser = self._serializer
        stats = self._stats
        start = max(now, self._not_before)
        step = spec.piece_bytes or len(data)
        view = memoryview(data) if len(data) > step else None
        pieces: list[Piece] = []
        for offset in range(0, len(data), step):
            chunk = data if view is None else bytes(view[offset : offset + step])
            size = len(chunk)
            leaves = start if ser is None else ser.transmit(start, size)
            due = leaves + self._one_way_delay()
            segments = -(-size // SEGMENT_BYTES)
            stats.segments += segments
            if self._repairs:
                self._fast_retransmit(segments, due)
            piece = Piece(due, chunk, now)
            if spec.loss and self._rng.random() < 1.0 - (1.0 - spec.loss) ** segments:
                self._lose(piece, start, min(size, SEGMENT_BYTES))
            pieces.append(piece)
        if ser is not None:
            stats.busy_s += len(data) / ser.bytes_per_s
        return pieces

    def schedule_eof(self, now: float) -> Piece:
        """The FIN: it needs no serialization time but travels behind every byte."""
        return Piece(max(now, self._not_before) + self._spec.delay_s, None, now)

    def _lose(self, piece: Piece, now: float, retransmitted: int) -> None:
        self._stats.lost_segments += 1
        piece.due += self._spec.rto_s
        if self._serializer is not None:
            self._serializer.transmit(now, retransmitted)
        self._repairs.append([piece, 0])

    def _fast_retransmit(self, segments: int, due: float) -> None:
        """Segments after a loss make duplicate ACKs; the third one repairs it in one RTT."""
        still_waiting = []
        for entry in self._repairs:
            entry[1] += segments
            if entry[1] >= DUPACK_THRESHOLD:
                lost: Piece = entry[0]
                lost.due = min(lost.due, due + self._spec.rtt_s)
            else:
                still_waiting.append(entry)
        self._repairs = still_waiting
