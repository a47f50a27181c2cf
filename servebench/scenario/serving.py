"""The servers of a run: one group up at a time, cold starts timed once per setting.

A round of a replicated run visits the server groups (`deploy.ServerGroup`) in a random
order; `ServerPool.serve(group)` stops the group that was up (if another) and brings the
asked one up: started, its models loaded, and — the first time a setting is started — its
cold start timed (`cold_start.repeats` starts, each phase a row of cold_start.csv). A
group that serves several settings side by side has each setting's cold start measured on
a server of that setting alone, as a run of one round measures it, so cold_start.csv means
the same whatever the number of rounds. A group whose server does not come up is not
tried again: its trials fail with the reason. A server that dies mid-run is restarted for
the next trial (`revive`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

import psutil

from servebench.clients.factory import create_client
from servebench.clients.payloads import random_payload
from servebench.clients.registry import for_server
from servebench.results import RunDirectory, no_space
from servebench.scenario.deploy import (
    ServerGroup,
    build_group_server,
    build_server,
    client_target,
    start_serving,
)
from servebench.scenario.plan import Plan, ServerSetting
from servebench.servers.base import Server, ServerError
from servebench.servers.cold_start import Probe, measure_cold_start


class ServerPool:
    """Brings the run's server groups up one at a time (see the module's docstring)."""

    def __init__(self, plan: Plan, directory: RunDirectory) -> None:
        self.plan = plan
        self.scenario = plan.scenario
        self.directory = directory
        self.current: tuple[ServerGroup, Server] | None = None
        self.dead: dict[str, str] = {}  # setting id -> why it cannot be served

    async def serve(self, group: ServerGroup) -> Server | None:
        """The group's server, up (None: it could not come up; `dead` says why)."""
        if self.current is not None and self.current[0] is group:
            return self.current[1]
        await self.stop()
        if all(s.id in self.dead for s in group.settings):
            return None
        server: Server | None = None
        try:
            if len(group.settings) > 1:
                for setting in group.settings:
                    await self._time_cold_start_alone(setting, group)
            server = await asyncio.to_thread(build_group_server, group, self.directory.path)
            alone = group.settings[0] if len(group.settings) == 1 else None
            cold = alone is not None and not self._measured(alone)
            await self.bring_up(server, group, cold=cold)
        except Exception as err:
            if no_space(err) is not None:
                raise
            for setting in group.settings:
                self.dead.setdefault(
                    setting.id, f"server setting {setting.id} did not come up: {err}"
                )
            if server is not None:
                await asyncio.to_thread(server.stop)
            return None
        self.current = (group, server)
        return server

    async def stop(self) -> None:
        if self.current is not None:
            _, server = self.current
            self.current = None
            await asyncio.to_thread(server.stop)

    async def revive(self, group: ServerGroup, server: Server) -> None:
        """Restart a server servebench started if it stopped serving (no cold start)."""
        if server.owns_process and not await asyncio.to_thread(alive, server):
            await asyncio.to_thread(server.stop)
            await self.bring_up(server, group, cold=False)

    def _measured(self, setting: ServerSetting) -> bool:
        """Whether the run measured the setting's cold start already (a resumed run)."""
        return any(row.get("setting") == setting.id for row in self.directory.cold_starts)

    async def _time_cold_start_alone(self, setting: ServerSetting, group: ServerGroup) -> None:
        """A side-by-side group's setting: its cold start on a server of its own, then that
        server stopped. A setting that does not come up is `dead`; the others go on."""
        if self._measured(setting) or setting.id in self.dead:
            return
        index = self.plan.settings.index(setting)
        server = None
        try:
            server = await asyncio.to_thread(
                build_server, setting, index, group.models, self.directory.path
            )
            await self._cold_start(server, setting, [m.id for m in group.models])
        except Exception as err:
            if no_space(err) is not None:
                raise
            self.dead[setting.id] = f"server setting {setting.id} did not come up: {err}"
        finally:
            if server is not None:
                await asyncio.to_thread(server.stop)

    async def bring_up(self, server: Server, group: ServerGroup, *, cold: bool) -> None:
        """Start the group's server and load every model it serves; on a setting's first
        start (`cold`, a group of one), time its cold start instead.

        A server servebench did not start has no cold start to measure (its "start" is an
        attach), and one that serves its own model configuration is only checked, never
        loaded: its start waited for each model to be ready.
        """
        names = [
            n for s in group.settings if s.id not in self.dead for n in group.names(s).values()
        ]
        if cold and server.owns_process:
            await self._cold_start(server, group.settings[0], names)
            return
        await asyncio.to_thread(start_serving, server, names)

    async def _cold_start(self, server: Server, setting: ServerSetting, names: list[str]) -> None:
        if not server.owns_process:
            await asyncio.to_thread(start_serving, server, names)
            return
        where = {"server": setting.server.name, "setting": setting.id}
        probe = client_probe(
            setting.server.server_kind.api.name,
            setting.server.protocol,
            timeout_s=self.scenario.workload.timeout_s,
            seed=self.scenario.seed,
        )
        await asyncio.to_thread(
            measure_cold_start,
            server,
            names,
            probe,
            repeats=self.scenario.cold_start.repeats,
            on_time=lambda measured: self.directory.add_cold_start({**where, **measured.row()}),
        )


def client_probe(api: str, protocol: str, *, timeout_s: float, seed: int = 0) -> Probe:
    """The cold-start probe for a server of API `api` (`ServerKind.api.name`) over
    `protocol` ("http", "grpc"): the client the trials use, so the first inference is timed
    as their requests are sent. It runs its own event loop, as the measurement runs in a
    thread."""
    client_protocol = for_server(api, protocol).name

    def probe(server: Server, model: str, count: int) -> list[float]:
        _, url = client_target(server, protocol)
        return asyncio.run(_timed_requests(client_protocol, url, model, count, timeout_s, seed))

    return probe


async def _timed_requests(
    protocol: str, url: str, model: str, count: int, timeout_s: float, seed: int
) -> list[float]:
    """Latencies of `count` batch-1 requests sent one after another on one connection."""
    client = create_client(protocol, url, model, timeout=timeout_s)
    await client.connect()
    try:
        payload = random_payload(client.encode, await client.signature(), 1, seed)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await client.infer(payload)
            times.append(time.perf_counter() - started)
    finally:
        await client.close()
    return times


def log_tail_note(server: Server, lines: int = 5) -> str:
    """The end of a dead server's log, on one line for trials.csv."""
    tail = " | ".join(line.strip() for line in server.log_tail(lines).splitlines() if line.strip())
    return f"; the end of its log: {tail}" if tail else ""


def alive(server: Server, attempts: int = 3) -> bool:
    """Whether the server still serves: its process exists and its health check answers.

    A busy machine can make one health check time out, so a live process gets a few
    tries before it is declared dead; a vanished process is dead at once.
    """
    if server.pid is not None and not psutil.pid_exists(server.pid):
        return False
    for attempt in range(attempts):
        try:
            if server.is_ready():
                return True
        except ServerError:  # never (re)started: a failed restart must be retried next trial
            return False
        if attempt + 1 < attempts:
            time.sleep(1.0)
    return False


def group_names(groups: Iterable[ServerGroup]) -> dict[str, ServerGroup]:
    """Each setting's group, by setting id."""
    return {setting.id: group for group in groups for setting in group.settings}
