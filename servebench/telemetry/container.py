"""CPU and memory of a server's container, as its engine reports them (the stats API).

For a server in a container the container is the server's process tree, and its cgroup
counts what a process walk would miss (processes that came and went between samples), so
the engine's figures stand in for `ProcessTreeSampler`'s: `cpu_cores` under the same
source and name (the trial's `server_cpu_mean` / `server_cpu_max` read either), and the
container's memory as the engine accounts it, `memory_bytes`. That figure is the cgroup's
usage, page cache included, less the inactive file cache where the engine breaks it out
(what `docker stats` shows); it is not a resident set size and is kept under its own
name (`server_mem_max`), never mixed with `rss_bytes`.

The engine is reached through a client the caller's factory makes (telemetry does not
know how servebench finds an engine), one per sampler, since samples are taken on the
recorder's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from servebench.telemetry.rows import Reading
from servebench.telemetry.sampler import SamplerUnavailable

SOURCE = "server_process"
# cgroup v2 and v1 names of the file cache the kernel may drop first.
_INACTIVE_FILE = ("inactive_file", "total_inactive_file")


class ContainerStatsSampler:
    """`cpu_cores` (CPU seconds per wall second since the last sample, all of the
    container's processes), `memory_bytes` and `processes` of one container."""

    source = SOURCE

    def __init__(self, container_id: str, connect: Callable[[], Any]) -> None:
        self.container_id = container_id
        self._labels = {"container": container_id[:12]}
        try:
            self._client = connect()
        except Exception as err:
            raise SamplerUnavailable(f"no container telemetry: {err}") from None
        self._last: tuple[float, float] | None = None  # (monotonic time, CPU seconds)
        self._stats()  # a container that is not there fails now, not at every sample

    def sample(self) -> list[Reading]:
        now = time.monotonic()
        stats = self._stats()
        readings = []
        cpu = _cpu_seconds(stats)
        if cpu is not None:
            if self._last is not None and now > self._last[0]:
                cores = max(0.0, cpu - self._last[1]) / (now - self._last[0])
                readings.append(Reading("cpu_cores", cores, self._labels))
            self._last = (now, cpu)
        memory = memory_in_use(stats.get("memory_stats") or {})
        if memory is not None:
            readings.append(Reading("memory_bytes", memory, self._labels))
        processes = (stats.get("pids_stats") or {}).get("current")
        if processes is not None:
            readings.append(Reading("processes", float(processes), self._labels))
        return readings

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()

    def _stats(self) -> Mapping[str, Any]:
        from docker.errors import NotFound  # the docker SDK, which the caller's client is

        try:
            return self._client.api.stats(self.container_id, stream=False)
        except NotFound:
            raise SamplerUnavailable(
                f"no container telemetry: container {self.container_id[:12]} is gone"
            ) from None


def _cpu_seconds(stats: Mapping[str, Any]) -> float | None:
    usage = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    return usage / 1e9 if usage is not None else None  # the engine counts nanoseconds


def memory_in_use(memory_stats: Mapping[str, Any]) -> float | None:
    """The container's memory as `docker stats` shows it: usage less inactive file cache
    where the engine reports that (Docker does, podman's compatible API does not)."""
    usage = memory_stats.get("usage")
    if usage is None:
        return None
    breakdown = memory_stats.get("stats") or {}
    cache = next((breakdown[k] for k in _INACTIVE_FILE if k in breakdown), 0)
    return float(max(0, usage - cache))
