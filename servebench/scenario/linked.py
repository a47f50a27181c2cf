"""A trial's clients: the load plan's client source (`load.plan.ClientSource`) of a trial.

One way to build a trial's client: `ClientRecipe` makes the client of the trial's protocol
for one model at a URL, `link_url` gives that URL for an emulator's address (HTTP clients
take `http://host:port`, gRPC clients `host:port`). `TrialClients` makes a part's clients,
one per model of the trial (one, or each of a mix), the same way whatever runs the part.

Through a link, each part runs its own `LinkEmulator` of the trial's profile, in its own
process, in front of the server's real address, seeded from the scenario's seed and the
part's index (distinct and reproducible): one process sends through one emulator, a gang's
generators each through their own. A gang must not send every generator's traffic through
one emulator in the coordinator: that one process would carry all of it, the bottleneck the
gang exists to remove. N generators through a link are therefore N links of that profile:
bandwidth and loss are each generator's, as N users each on their own LTE, not one shared
pipe (`describe`, which the trial puts in the gang's summary block). A part's models (a mix)
share its one link, as the models behind one front door do.

The `load` layer sees only the client source; it knows nothing of links.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servebench.clients.base import InferenceClient, InferResult, ModelSignature, Payload
from servebench.clients.factory import create_client
from servebench.netem import Address, LinkEmulator, LinkProfile
from servebench.results import LinkRecord


def link_url(transport: str, address: Address) -> str:
    """The URL a client of `transport` (http, grpc) takes to reach `address`."""
    return f"http://{address}" if transport == "http" else str(address)


def generator_seed(seed: int, index: int) -> int:
    """Generator `index`'s link seed: distinct per generator, the same on every run."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


@dataclass(frozen=True)
class ClientRecipe:
    """How a trial's client is made (not connected) for a URL; it pickles, so a gang's
    generators make theirs from it in their own processes."""

    protocol: str
    model: str
    timeout: float
    options: tuple[tuple[str, Any], ...] = ()  # the client's own options (e.g. transport)

    def __call__(self, url: str) -> InferenceClient:
        return create_client(
            self.protocol, url, self.model, timeout=self.timeout, **dict(self.options)
        )


class SharedLink:
    """One part's link emulator, shared by the part's clients: started by the first client
    that connects through it, stopped when the last one closes (they connect and close in
    turn, in the part's one loop)."""

    def __init__(self, emulator: LinkEmulator) -> None:
        self.emulator = emulator
        self._users = 0
        self._address: Address | None = None

    async def acquire(self) -> Address:
        if self._users == 0:
            self._address = await asyncio.to_thread(self.emulator.start)
        self._users += 1
        assert self._address is not None
        return self._address

    async def release(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._address = None
            await asyncio.to_thread(self.emulator.stop)


class LinkedClient:
    """An `InferenceClient` through its part's link: `connect` starts the emulator (the
    first of the part's clients to connect) and connects the recipe's client through it,
    `close` closes both."""

    def __init__(self, recipe: ClientRecipe, transport: str, link: SharedLink) -> None:
        self.recipe = recipe
        self.transport = transport
        self.link = link
        self._client: InferenceClient | None = None

    @property
    def client(self) -> InferenceClient:
        if self._client is None:
            raise RuntimeError("LinkedClient: connect() first")
        return self._client

    async def connect(self) -> None:
        address = await self.link.acquire()
        try:
            client = self.recipe(link_url(self.transport, address))
            await client.connect()
        except BaseException:
            # The caller closes only a client that connected: the link is let go here.
            await self.link.release()
            raise
        self._client = client

    async def signature(self) -> ModelSignature:
        return await self.client.signature()

    def encode(self, batch_size: int, inputs: Mapping[str, np.ndarray]) -> Payload:
        return self.client.encode(batch_size, inputs)

    async def infer(self, payload: Payload) -> InferResult:
        return await self.client.infer(payload)

    async def close(self) -> None:
        try:
            if self._client is not None:
                await self._client.close()
        finally:
            if self._client is not None:
                self._client = None
                await self.link.release()


@dataclass(frozen=True)
class TrialClients:
    """A trial's client source: part i's clients, one per model (`recipes`: a model id of
    the plan to its recipe), at the server's `url`, or through part i's own emulator of
    `link` in front of `target` (the server's host:port), seeded from (`seed`, i). It
    pickles: a gang sends it to every generator's process."""

    recipes: tuple[tuple[str, ClientRecipe], ...]
    transport: str  # the server's: http or grpc (the URL form, `link_url`)
    url: str
    target: str
    seed: int
    link: LinkProfile | None = None

    def for_part(self, index: int, models: Sequence[str]) -> list[InferenceClient]:
        recipes = dict(self.recipes)
        if self.link is None:
            return [recipes[m](self.url) for m in models]
        shared = SharedLink(
            LinkEmulator(self.link, self.target, seed=generator_seed(self.seed, index))
        )
        return [LinkedClient(recipes[m], self.transport, shared) for m in models]

    def describe(self, generators: int) -> LinkRecord | None:
        """The gang summary's `link` block: `generators` links of the profile, one each."""
        if self.link is None:
            return None
        return LinkRecord(profile=self.link.name, per_generator=True, links=generators)
