"""Running a load in a test through the one entry point (`servebench.load.run`), with a
client the test made (a stand-in with a known service time, or a real client).

`run` owns its loop, so a test that must act while the load runs (stop it, watch its
records) runs it in a thread (`load_in_thread`) and acts from its own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

from servebench.clients.base import InferenceClient
from servebench.load import LoadPlan, LoadSettings, LoadSummary, OneClient, Target, run


class Given:
    """A client source of clients the test made: part i gets `clients[i]` (one model), or
    the clients of `by_model` (a mix). In-process only: it does not pickle."""

    def __init__(
        self, *clients: InferenceClient, by_model: dict[str, InferenceClient] | None = None
    ):
        self.clients = clients
        self.by_model = by_model or {}

    def for_part(self, index: int, models: Sequence[str]) -> list[InferenceClient]:
        if self.by_model:
            return [self.by_model[m] for m in models]
        return [self.clients[index]]


def plan(
    client: InferenceClient | Callable[[], InferenceClient],
    settings: LoadSettings,
    targets: Sequence[Target] = (Target(),),
) -> LoadPlan:
    """A plan of `settings` for a client (made by the test) or a factory (which pickles,
    for a gang)."""
    source = (
        OneClient(client) if callable(client) and not hasattr(client, "infer") else Given(client)
    )
    return LoadPlan(settings, source, tuple(targets))


def load(client: Any, settings: LoadSettings | None = None, **run_options: Any) -> LoadSummary:
    """Run a load of `settings` with `client` (see `plan`), signals left alone, on asyncio's
    own loop unless asked (a stand-in's `asyncio.sleep` is its service time: uvloop's timers
    may fire up to a millisecond early)."""
    assert settings is not None
    run_options.setdefault("use_uvloop", False)
    return run(plan(client, settings), handle_signals=False, **run_options)


async def load_in_thread(client: Any, settings: LoadSettings, **run_options: Any) -> LoadSummary:
    """`load` in a thread, for a test that acts on the load from its own loop meanwhile."""
    return await asyncio.to_thread(functools.partial(load, client, settings, **run_options))
