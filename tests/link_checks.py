"""The least latency that requests through an emulated link can show, for tests that check
a link was in the path without comparing against another run measured at another moment.

Every request's latency holds its two one-way propagation delays; serialization, the
server, in-order delivery and loss only add to them. Each one-way delay is RTT/2 plus a
jitter sample of sd jitter/√2 (servebench.netem.link), floored at 0, so a round trip's two
delays are at least a normal draw of mean RTT and sd jitter. The median of n such round
trips has a standard error of 1.2533 × jitter/√n (√(π/2) σ/√n); it lies more than 4.75
standard errors below the RTT with a chance of one in a million, so the floor is
RTT − 6 × jitter/√n. (The uniform jitter model's median error is smaller: 1.2247 σ/√n.)
A profile without jitter has the RTT itself as a floor under every request.
"""

from __future__ import annotations

import math

from servebench.netem import LinkProfile

MEDIAN_ERRORS = 4.75  # standard errors of a sample median: a one-in-a-million shortfall
MEDIAN_SE = math.sqrt(math.pi / 2)  # a normal sample median's standard error, in σ/√n


def p50_floor_s(profile: LinkProfile, answered: int) -> float:
    """The least latency p50 of `answered` requests through `profile`, short of a
    one-in-a-million draw of its jitter (see the module docstring)."""
    assert answered > 0
    return profile.rtt_s - MEDIAN_ERRORS * MEDIAN_SE * profile.jitter_s / math.sqrt(answered)
