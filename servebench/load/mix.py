"""A weighted mix of models in one load: which model each request goes to.

One arrival process (or one set of closed-loop workers) drives several models at once, as a
deployment serving them behind one front door sees them. Request `seq` goes to the target
`target(seq)`, drawn by weight from a generator keyed by (seed, block of seq): the choice is a
function of `seq` and the seed alone, so a rerun with the same seed sends the same sequence
of models, whatever the timing and however the load is split over parts. The picks are drawn
a block at a time with numpy, so the engine's hot path pays a list look-up a request, and
the records' model column is found again from `seq` when a chunk is written (`codes`), so
nothing about the model is buffered per request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servebench.clients.base import InferenceClient, Payload
from servebench.common.limits import MAX_MIX_MODELS  # model codes travel as int8 (0: no mix)

# Picks drawn at once; the engine's sequence numbers rise, so one block is cached.
_SHIFT = 14
BLOCK = 1 << _SHIFT
_MASK = BLOCK - 1
# Kept apart from the arrival process's stream of the same seed.
_STREAM = 0x6D6978  # "mix"


class Picks:
    """The seeded choice by weight: request `seq`'s pick is the index `index(seq)`, drawn a
    block at a time from a generator keyed by (seed, block), so it is a function of `seq`
    and the seed alone. The one draw of every mix: a load's (`Mix`) and Locust users'."""

    def __init__(self, weights: Sequence[float], seed: int):
        shares = np.asarray(weights, dtype=np.float64)
        self.shares = shares / shares.sum()
        self._cdf = np.cumsum(self.shares)
        self._cdf[-1] = 1.0  # rounding must not leave a draw past the last model
        self.seed = seed
        self._block = -1
        self._block_picks: list[int] = []

    def index(self, seq: int) -> int:
        """Request `seq`'s pick (a list look-up but once a block)."""
        if seq >> _SHIFT != self._block:
            self._block = seq >> _SHIFT
            self._block_picks = self.draw(self._block).tolist()
        return self._block_picks[seq & _MASK]

    def draw(self, block: int) -> np.ndarray:
        """The picks of requests block * BLOCK ... (block + 1) * BLOCK - 1."""
        rng = np.random.default_rng((self.seed, _STREAM, block))
        return np.searchsorted(self._cdf, rng.random(BLOCK), side="right").astype(np.int8)


@dataclass(frozen=True)
class MixTarget:
    """One model of a mix: its id (the records' `model`), its weight, a connected client
    and the requests it cycles through (`payloads[seq % len]`, as a single load does)."""

    model: str
    weight: float
    client: InferenceClient
    payloads: tuple[Payload, ...]


class Mix:
    """The targets of a weighted mix and the seeded choice among them."""

    def __init__(self, targets: Sequence[MixTarget], seed: int):
        self.targets = tuple(targets)
        if not self.targets:
            raise ValueError("mix: give at least one model")
        if len(self.targets) > MAX_MIX_MODELS:
            raise ValueError(f"mix: at most {MAX_MIX_MODELS} models, got {len(self.targets)}")
        self.models = tuple(t.model for t in self.targets)
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"mix: models must be distinct, got {list(self.models)}")
        for target in self.targets:
            if not (math.isfinite(target.weight) and target.weight > 0):
                raise ValueError(
                    f"mix: model {target.model!r} has weight {target.weight!r}; "
                    "a weight must be a finite number > 0"
                )
            if not target.payloads:
                raise ValueError(f"mix: model {target.model!r} has no request to send")
        # Whether the records name each request's model: a load of one model (its id
        # empty, `load.plan.UNNAMED`) names none.
        self.named = any(self.models)
        self.seed = seed
        self.picks = Picks([t.weight for t in self.targets], seed)
        self.shares = self.picks.shares
        self._block = -1
        self._block_targets: list[MixTarget] = []

    def codes(self, seqs: np.ndarray) -> np.ndarray:
        """The records' model codes (1 + the target's index) of requests `seqs`, in any
        order: what the engine sent them to, found again from `seq` off the hot path."""
        codes = np.empty(seqs.size, np.int8)
        blocks = seqs // BLOCK
        for block in np.unique(blocks):
            mine = blocks == block
            codes[mine] = self.picks.draw(int(block))[seqs[mine] - block * BLOCK] + 1
        return codes

    def target(self, seq: int) -> MixTarget:
        """The target of request `seq`: on the engine's hot path, a list look-up but once
        a block (shifts, not divmod: a builtin call costs more than both)."""
        if seq >> _SHIFT != self._block:
            self._block = seq >> _SHIFT
            picks = self.picks.draw(self._block).tolist()
            self._block_targets = [self.targets[i] for i in picks]
        return self._block_targets[seq & _MASK]
