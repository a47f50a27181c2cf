"""The least delay that requests through an emulated link can show, for tests that check a
link was in the path without comparing against another run measured at another moment.

Every request's latency holds the link's two one-way delays; serialization, the server,
in-order delivery and loss only add to them. The emulator may deliver each direction up
to `MAX_EARLY_S` (about 1 ms) before its modelled time: it takes its learnt wake-up lead
off both the arrival stamp and the delivery, so on a loop that wakes faster than it
learnt, bytes come out early. Without jitter, a round trip is therefore at least
RTT − 2 × MAX_EARLY_S (`rtt_floor_s`).

With jitter, each one-way delay is RTT/2 plus a sample of sd jitter/√2 (servebench.netem
.link), floored at 0, so a round trip's two delays are at least a normal draw of mean RTT
and sd jitter. The median of n such round trips has a standard error of 1.2533 × jitter/√n
(√(π/2) σ/√n); it lies more than 4.75 standard errors below its mean with a chance of one
in a million, hence `p50_floor_s` = the floor above − 6 × jitter/√n. (The uniform jitter
model's median error is smaller: 1.2247 σ/√n.)
"""

from __future__ import annotations

import math

from servebench.netem import LinkProfile
from servebench.netem.proxy import MAX_EARLY_S

MEDIAN_ERRORS = 4.75  # standard errors of a sample median: a one-in-a-million shortfall
MEDIAN_SE = math.sqrt(math.pi / 2)  # a normal sample median's standard error, in σ/√n


def rtt_floor_s(profile: LinkProfile) -> float:
    """The least time a round trip through a jitter-free `profile` takes."""
    assert not profile.jitter_s, f"{profile.name} has jitter: use p50_floor_s"
    return profile.rtt_s - 2 * MAX_EARLY_S


def p50_floor_s(profile: LinkProfile, answered: int) -> float:
    """The least latency p50 of `answered` requests through `profile`, short of a
    one-in-a-million draw of its jitter (see the module docstring)."""
    assert answered > 0
    spread = MEDIAN_ERRORS * MEDIAN_SE * profile.jitter_s / math.sqrt(answered)
    return profile.rtt_s - 2 * MAX_EARLY_S - spread
