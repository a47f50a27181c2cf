"""The link model on a clock we control: serialization, traces, delay, jitter, loss."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from servebench.netem import LinkProfile
from servebench.netem.link import (
    SEGMENT_BYTES,
    DirectionModel,
    DirectionSpec,
    RateSerializer,
    TraceSerializer,
)
from servebench.netem.stats import DirectionStats
from servebench.netem.trace import MahimahiTrace


def spec(**overrides) -> DirectionSpec:
    values = dict(
        delay_s=0.010,
        jitter_sd_s=0.0,
        distribution="normal",
        loss=0.0,
        rtt_s=0.020,
        rto_s=0.220,
        piece_bytes=None,
        queue_s=None,
    )
    values.update(overrides)
    return DirectionSpec(**values)


def test_rate_serializer_paces_and_forgets_idle_time():
    link = RateSerializer(8e6)  # 1 MB/s
    assert link.transmit(0.0, 1000) == pytest.approx(0.001)
    assert link.transmit(0.0, 1000) == pytest.approx(0.002)  # queued behind the first
    assert link.backlog_s(0.0005) == pytest.approx(0.0015)
    assert link.transmit(1.0, 500) == pytest.approx(1.0005)  # idle link starts afresh
    assert link.backlog_s(2.0) == 0.0


def test_trace_serializer_uses_delivery_opportunities(tmp_path: Path):
    path = tmp_path / "t.mahi"
    path.write_text("1\n2\n2\n10\n")  # opportunities at 1, 2, 2, 10 ms; repeats every 10 ms
    link = TraceSerializer(MahimahiTrace.load(path), start=100.0)
    # 2000 bytes need two opportunities: 1 ms and 2 ms; 1000 bytes stay free in the second.
    assert link.transmit(100.0, 2000) == pytest.approx(100.002)
    # 800 bytes fit in that spare room, so they leave with it.
    assert link.transmit(100.0, 800) == pytest.approx(100.002)
    # 300 bytes: 200 fill the second, the rest takes the third opportunity (also at 2 ms).
    assert link.transmit(100.0, 300) == pytest.approx(100.002)
    # After idling past the 10 ms opportunity, the next free one is 11 ms (next period).
    assert link.transmit(100.0105, 100) == pytest.approx(100.011)
    # The trace averages 4 × 1500 B per 10 ms.
    assert link.bytes_per_s == pytest.approx(600_000)


def test_delay_and_pieces_without_jitter():
    stats = DirectionStats()
    model = DirectionModel(
        spec(piece_bytes=2 * SEGMENT_BYTES), RateSerializer(8e6), random.Random(1), stats
    )
    data = bytes(range(256)) * 30  # 7680 bytes
    pieces = model.schedule(5.0, data)
    assert b"".join(p.data for p in pieces) == data
    assert [len(p.data) for p in pieces] == [2920, 2920, 1840]
    # Each piece is due when its last byte has been serialized, plus the one-way delay.
    assert [p.due for p in pieces] == pytest.approx([5.01292, 5.01584, 5.01768])
    assert stats.segments == 2 + 2 + 2
    assert stats.busy_s == pytest.approx(len(data) / 1e6)


def test_handshake_holds_the_first_bytes():
    model = DirectionModel(spec(), None, random.Random(1), DirectionStats(), not_before=1.02)
    assert model.schedule(1.0, b"x")[0].due == pytest.approx(1.03)
    assert model.schedule_eof(1.0).due == pytest.approx(1.03)


@pytest.mark.parametrize("distribution", ["normal", "uniform"])
def test_jitter_has_the_configured_spread(distribution: str):
    profile = LinkProfile(name="j", rtt_s=0.040, jitter_s=0.006, jitter_distribution=distribution)
    rng = random.Random(7)
    rtts = []
    for _ in range(20000):
        up = DirectionModel(DirectionSpec.from_profile(profile, "up"), None, rng, DirectionStats())
        down = DirectionModel(
            DirectionSpec.from_profile(profile, "down"), None, rng, DirectionStats()
        )
        rtts.append(up.schedule(0.0, b"p")[0].due + down.schedule(0.0, b"p")[0].due)
    assert statistics.fmean(rtts) == pytest.approx(0.040, rel=0.01)
    assert statistics.pstdev(rtts) == pytest.approx(0.006, rel=0.03)


def test_tail_loss_waits_for_the_retransmission_timeout():
    stats = DirectionStats()
    model = DirectionModel(spec(loss=1.0), None, random.Random(1), stats)
    (piece,) = model.schedule(0.0, b"request")
    assert piece.due == pytest.approx(0.010 + 0.220)
    assert piece.data == b"request"  # late, never corrupted
    assert stats.lost_segments == 1


def test_loss_followed_by_three_segments_is_fast_retransmitted():
    stats = DirectionStats()
    rng = random.Random(1)
    model = DirectionModel(spec(loss=0.3), RateSerializer(8e6), rng, stats)
    model._spec = spec(loss=1.0)  # lose the first piece for sure...
    (lost,) = model.schedule(0.0, bytes(SEGMENT_BYTES))
    model._spec = spec(loss=0.0)  # ...and none of the three that follow
    followers = [model.schedule(0.0, bytes(SEGMENT_BYTES))[0] for _ in range(3)]
    # Repaired one RTT after the third following segment arrived, well before the RTO.
    assert lost.due == pytest.approx(followers[2].due + 0.020)
    assert lost.due < 0.010 + 0.220


def test_retransmissions_use_the_link_again():
    link = RateSerializer(8e6)
    model = DirectionModel(spec(loss=1.0), link, random.Random(1), DirectionStats())
    model.schedule(0.0, bytes(1000))
    assert link.backlog_s(0.0) == pytest.approx(0.002)  # sent twice
