"""A load plan: what one load sends, to which models, from how many parts.

`LoadPlan` = the settings (arrivals or concurrency, stop rules, the payload source: a seeded
random batch or the user's input data) × the targets (models, each with a weight: one model
is a mix of one) × a `ClientSource` (how a part makes its clients). An executor
(`load.executors`) runs it as `settings.generators` parts: one process runs part 0 of 1, a
gang's generator i runs part i of n (`LoadEngine`'s `part`: every k-th arrival, or its share
of the closed loop's workers), each in its own process with its own clients, connected by
`connect_part`. Every part builds its clients the same way, through the plan's source: so
a link (the source's business, `scenario.linked`) is always wired one way, one emulator per
part with the part's seed, whether the load runs in one process or on a gang of one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from servebench.clients.base import InferenceClient
from servebench.clients.payloads import build_payloads
from servebench.load.mix import Mix, MixTarget
from servebench.load.settings import LoadSettings

# A load of one model: its records name no model (their `model` column is empty).
UNNAMED = ""


class ClientSource(Protocol):
    """Makes a part's clients (not connected), one per model in `models`' order, in the
    process that sends them; it pickles, so a gang's generators make theirs from it."""

    def for_part(self, index: int, models: Sequence[str]) -> Sequence[InferenceClient]: ...


@dataclass(frozen=True)
class OneClient:
    """A `ClientSource` of one model from a factory that pickles (e.g. a functools.partial
    of `clients.factory.create_client`): each part calls it once."""

    factory: Callable[[], InferenceClient]

    def for_part(self, index: int, models: Sequence[str]) -> Sequence[InferenceClient]:
        if len(models) != 1:
            raise ValueError(f"load plan: one client factory serves one model, got {len(models)}")
        return [self.factory()]


@dataclass(frozen=True)
class Target:
    """One model the load sends to: its id (the records' `model`; `UNNAMED` for a load of
    one model) and its weight (its share of the requests, relative to the others')."""

    model: str = UNNAMED
    weight: float = 1.0


@dataclass(frozen=True)
class LoadPlan:
    """One load: its settings, its targets and where each part's clients come from."""

    settings: LoadSettings
    clients: ClientSource
    targets: tuple[Target, ...] = field(default=(Target(),))

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("load plan: give at least one model")
        if len(self.targets) > 1 and any(t.model == UNNAMED for t in self.targets):
            raise ValueError("load plan: each model of a mix needs its id")

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(t.model for t in self.targets)


@contextlib.asynccontextmanager
async def connect_part(plan: LoadPlan, index: int) -> AsyncIterator[Mix]:
    """Part `index`'s clients, connected, each with the requests it cycles through (built
    for the signature its server answers, `clients.payloads`), as the `Mix` the engine
    sends from; closed on the way out, every client that connected."""
    s = plan.settings
    clients = plan.clients.for_part(index, plan.models)
    async with contextlib.AsyncExitStack() as stack:
        targets = []
        for target, client in zip(plan.targets, clients, strict=True):
            await client.connect()
            stack.push_async_callback(client.close)
            payloads = build_payloads(
                client.encode, await client.signature(), s.batch_size, s.seed, s.input_data
            )
            targets.append(MixTarget(target.model, target.weight, client, tuple(payloads)))
        yield Mix(targets, s.seed)
