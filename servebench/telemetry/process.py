"""CPU and memory of a server's process tree, and of the host, through psutil.

The server is a tree: tritonserver plus one python-backend stub per model instance, or a
container's init plus its children. CPU is accounted here from cumulative CPU times
rather than with `psutil.Process.cpu_percent()`, because the latter forgets the CPU of a
child that exits between two samples and cannot count one that was born within the
interval; summing time deltas over the tree counts both.
"""

from __future__ import annotations

import time

import psutil

from servebench.telemetry.rows import Reading
from servebench.telemetry.sampler import SamplerUnavailable


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


class ProcessTreeSampler:
    """`cpu_cores` (CPU seconds per wall second over the last interval, summed over the
    tree: 1.0 = one core busy), `rss_bytes` (summed), `processes` (tree size)."""

    source = "server_process"

    def __init__(self, pid: int) -> None:
        try:
            self._root = psutil.Process(pid)
            self._root.cpu_times()
        except psutil.Error as err:
            raise SamplerUnavailable(f"no process telemetry: pid {pid}: {err}") from None
        self.pid = pid
        self._last_cpu: dict[int, float] = {}
        self._last_time: float | None = None  # monotonic, for the interval
        self._last_epoch = 0.0  # wall clock, to compare with process birth times

    def sample(self) -> list[Reading]:
        now = time.monotonic()
        try:
            tree = [self._root, *self._root.children(recursive=True)]
        except psutil.NoSuchProcess:
            raise SamplerUnavailable(f"no process telemetry: pid {self.pid} has exited") from None
        cpu_now: dict[int, float] = {}
        busy = 0.0
        rss = 0.0
        alive = 0
        for proc in tree:
            try:
                with proc.oneshot():
                    seconds = _cpu_seconds(proc)
                    rss += proc.memory_info().rss
                    born = proc.create_time()
            except psutil.Error:
                continue  # exited between listing and reading
            alive += 1
            cpu_now[proc.pid] = seconds
            if proc.pid in self._last_cpu:
                busy += max(0.0, seconds - self._last_cpu[proc.pid])
            elif self._last_time is not None and born >= self._last_epoch:
                busy += seconds  # born within this interval: all its CPU is new
        readings = [
            Reading("rss_bytes", rss, {"pid": str(self.pid)}),
            Reading("processes", float(alive), {"pid": str(self.pid)}),
        ]
        if self._last_time is not None and now > self._last_time:
            cores = busy / (now - self._last_time)
            readings.append(Reading("cpu_cores", cores, {"pid": str(self.pid)}))
        self._last_cpu = cpu_now
        self._last_time = now
        self._last_epoch = time.time()
        return readings

    def close(self) -> None:
        pass


class HostSampler:
    """`cpu_utilization` (0-1 over all cores, last interval), `cpu_count`,
    `memory_used_bytes` and `memory_available_bytes` of the whole machine."""

    source = "host"

    def __init__(self) -> None:
        self._last = psutil.cpu_times()
        self._count = float(psutil.cpu_count() or 1)

    def sample(self) -> list[Reading]:
        times = psutil.cpu_times()
        total = cpu_total(times) - cpu_total(self._last)
        idle = _idle(times) - _idle(self._last)
        self._last = times
        memory = psutil.virtual_memory()
        readings = [
            Reading("cpu_count", self._count),
            Reading("memory_used_bytes", float(memory.used)),
            Reading("memory_available_bytes", float(memory.available)),
        ]
        if total > 0:
            readings.append(Reading("cpu_utilization", min(1.0, max(0.0, 1 - idle / total))))
        return readings

    def close(self) -> None:
        pass


def cpu_total(times) -> float:
    """All CPU seconds of a `psutil.cpu_times()` tuple, every state. On Linux guest time is
    already counted in user time (psutil's own cpu_percent does the same subtraction)."""
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _idle(times) -> float:
    return getattr(times, "idle", 0.0) + getattr(times, "iowait", 0.0)
