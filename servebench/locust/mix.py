"""A weighted mix of models for Locust users: which models `--model` names, and which of
them each request goes to.

`--model` takes one model's name or a mix as a scenario names its trial's model
(`servebench.scenario.plan.ModelMix.id`): `mix(a*3+b*1)` sends three requests in four to
`a`. So a scenario's mix reaches the users through the same option (and the web form's
field) as a single model, and the trial rows carry the mix's id as a scenario run's do.

Each request's model is a seeded draw by weight, the very draw of a scenario run's mix
(`servebench.load.mix.Picks`): the k-th request gets the k-th pick. The users of one process share one draw per mix (`ModelChoice`), so the k-th request of a
swarm goes to the same model whichever user sends it and however fast the server answers.
Each swarm starts the draw again; with `--processes`, each process draws the same
sequence on its own.
"""

from __future__ import annotations

import math

from servebench.common.limits import MAX_MIX_MODELS
from servebench.load.mix import Picks

_PREFIX, _SUFFIX = "mix(", ")"


def mix_members(model: str) -> tuple[tuple[str, float], ...] | None:
    """The (model, weight) pairs of a mix id, in its order; None for one model's name.
    ValueError naming `--model` where the mix is malformed."""
    if not (model.startswith(_PREFIX) and model.endswith(_SUFFIX)):
        return None
    members = []
    for part in model[len(_PREFIX) : -len(_SUFFIX)].split("+"):
        name, star, text = part.rpartition("*")
        try:
            weight = float(text)
        except ValueError:
            weight = math.nan
        if not (star and name and math.isfinite(weight) and weight > 0):
            raise ValueError(
                f"--model {model!r}: a mix is mix(MODEL*WEIGHT+MODEL*WEIGHT...), "
                f"each weight a number > 0 (at {part!r})"
            )
        members.append((name, weight))
    names = [name for name, _ in members]
    if len(set(names)) != len(names):
        raise ValueError(f"--model {model!r}: a mix names each model once")
    if len(members) > MAX_MIX_MODELS:
        raise ValueError(f"--model {model!r}: a mix has at most {MAX_MIX_MODELS} models")
    return tuple(members)


class ModelChoice:
    """The seeded draw of a mix's models by weight (`load.mix.Picks`, a scenario run's own):
    `next()` is the index of the model the next request goes to, the k-th request of a
    swarm getting the k-th pick of a load with the same seed. One per process and mix
    (users are greenlets of one thread, so no lock is needed)."""

    def __init__(self, weights: tuple[float, ...], seed: int):
        self._picks = Picks(weights, seed)
        self._seq = 0

    def next(self) -> int:
        pick = self._picks.index(self._seq)
        self._seq += 1
        return pick
