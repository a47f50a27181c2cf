"""How a gang shares out what the whole load is given (`load.gang`).

The engine splits the schedule itself (each generator sends every k-th arrival, a closed
loop's workers and count are divided); what a generator's client is given is split here,
before the clients are made: a client pool asked for the whole load (`servebench load
--connections`) is each generator's share of it.
"""

from __future__ import annotations


def per_generator(total: int, generators: int) -> int:
    """Each of `generators` generators' share of `total` (a pool of connections, say),
    rounded up: the gang together never has fewer than asked, and each has at least one."""
    if generators < 1:
        raise ValueError(f"load.generators: must be >= 1, got {generators}")
    return -(-total // generators)
