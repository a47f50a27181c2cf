"""A trial's clients, and a gang generator's own emulated link.

One way to build a trial's client: `ClientRecipe` makes the client of the trial's protocol
for one model at a URL, `link_url` gives that URL for an emulator's address (HTTP clients
take `http://host:port`, gRPC clients `host:port`).

Through a link, a gang (`workload.generators`) must not send every generator's traffic
through one emulator in the coordinator: that one process would carry all of it, the
bottleneck the gang exists to remove, and the generators would share one link. So each
generator runs its own `LinkEmulator` of the trial's profile, in its own process, in front
of the server's real address: `LinkedFactory` is the gang's client factory, and the
`LinkedClient` it builds for generator i starts its emulator in `connect()` (seeded from
the scenario's seed and i: distinct and reproducible) and stops it in `close()`. N
generators through a link are therefore N links of that profile: bandwidth and loss are
each generator's, as N users each on their own LTE, not one shared pipe (`describe`, which
the trial puts in the gang's summary block).

The `load` layer sees only a client factory; it knows nothing of links.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from servebench.clients.base import InferenceClient, InferResult, ModelSignature, Payload
from servebench.clients.factory import create_client
from servebench.netem import Address, LinkEmulator, LinkProfile


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


class LinkedClient:
    """An `InferenceClient` through its own link emulator: `connect` starts the emulator
    and connects the recipe's client through it, `close` closes both."""

    def __init__(self, recipe: ClientRecipe, transport: str, emulator: LinkEmulator) -> None:
        self.recipe = recipe
        self.transport = transport
        self.emulator = emulator
        self._client: InferenceClient | None = None

    @property
    def client(self) -> InferenceClient:
        if self._client is None:
            raise RuntimeError("LinkedClient: connect() first")
        return self._client

    async def connect(self) -> None:
        address = await asyncio.to_thread(self.emulator.start)
        try:
            client = self.recipe(link_url(self.transport, address))
            await client.connect()
        except BaseException:
            # The caller closes only a client that connected: the emulator stops here.
            await asyncio.to_thread(self.emulator.stop)
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
            self._client = None
            await asyncio.to_thread(self.emulator.stop)


@dataclass(frozen=True)
class LinkedFactory:
    """A gang's client factory through a link: generator i's client goes through its own
    emulator of `profile` in front of `target` (the server's host:port), seeded from
    (`seed`, i). It pickles: the gang sends it to every generator's process."""

    recipe: ClientRecipe
    transport: str  # the server's: http or grpc (the URL form, `link_url`)
    profile: LinkProfile
    target: str
    seed: int

    def __call__(self) -> LinkedClient:
        """The client of a load of one process: generator 0's."""
        return self.for_generator(0)

    def for_generator(self, index: int) -> LinkedClient:
        emulator = LinkEmulator(self.profile, self.target, seed=generator_seed(self.seed, index))
        return LinkedClient(self.recipe, self.transport, emulator)

    def describe(self, generators: int) -> dict[str, Any]:
        """The gang summary's `link` block: `generators` links of the profile, one each."""
        return {"profile": self.profile.name, "per_generator": True, "links": generators}
