"""What disturbed a measured window from outside: CPU pressure, steal time, and the CPU
that processes other than the server and the generator used.

The scenario runner opens a window when a replicate's measurement starts (`start`) and
closes it when it ends (`stop`), which returns an `InterferenceRecord`; `disturbance.judge`
decides from it (and the load's own schedule lag) whether the replicate is measured again.

Each figure is a difference of two cumulative counters read at the window's ends, never a
kernel average, so it covers exactly the window:

- **CPU pressure**: `/proc/pressure/cpu`'s `some total=` (microseconds during which at
  least one runnable task waited for a CPU), over the window's wall time. The `avg10`
  beside it is a decaying 10 s average that would blur a replicate with its neighbour.
  Where the kernel has no PSI (before 4.20, `psi=0`, some containers) it is None and the
  sampler's `notes` say why, once.
- **Steal**: `/proc/stat`'s steal over all of it (psutil's `cpu_times`): time the
  hypervisor gave this machine's virtual CPUs to someone else.
- **Other CPU**: the machine's process time (user + nice + system in `/proc/stat`) minus
  the CPU time of the excluded processes, over all cores' time. Taken this way rather
  than by summing every other process's times at both ends, because a process that
  starts and ends inside the window (a compiler, a test run) is invisible to per-process
  sampling but is counted in `/proc/stat`, and because reading two numbers is cheaper
  than walking every process. The excluded trees are read through psutil: a member's
  time includes its reaped children's (`children_user`/`children_system`), so a server's
  or generator's short-lived child is excluded as well. IRQ time is left out of both
  sides: it is not a process's load. Both counters tick at USER_HZ (10 ms) on different
  clocks, so a small difference (a few ticks per core) is noise, not load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from servebench.telemetry.process import cpu_total
from servebench.telemetry.sampler import SamplerUnavailable

PSI_CPU_PATH = Path("/proc/pressure/cpu")
_MICROSECONDS = 1e-6


@dataclass(frozen=True)
class InterferenceRecord:
    """What disturbed one measured window; shares are 0-1, None where not measurable here."""

    window_s: float  # seconds: the window's wall-clock length
    cpu_pressure: float | None  # share of the window some task waited for a CPU (PSI some)
    steal: float | None  # share of all cores' time the hypervisor took (steal)
    other_cpu: float  # share of all cores' time used by processes not excluded
    other_cpu_s: float  # CPU seconds behind `other_cpu` (1.0 = one core for a second)


def parse_psi_some_total(text: str) -> float:
    """Seconds of `some` stall since boot from a `/proc/pressure/*` file's text.

    The file holds `some avg10=… avg60=… avg300=… total=<µs>` (and a `full` line);
    ValueError where no `some` line with a `total=` is in it."""
    for line in text.splitlines():
        kind, _, fields = line.partition(" ")
        if kind != "some":
            continue
        for field in fields.split():
            key, _, value = field.partition("=")
            if key == "total":
                return int(value) * _MICROSECONDS
    raise ValueError("no 'some ... total=' line")


def read_psi_some_total(path: Path = PSI_CPU_PATH) -> float:
    """`parse_psi_some_total` of the file at `path`; OSError or ValueError where the
    kernel has none (missing file, or EOPNOTSUPP when booted with psi=0)."""
    return parse_psi_some_total(path.read_text())


class MachineTimes(NamedTuple):
    """The whole machine's cumulative CPU seconds (all cores) at one instant."""

    process_s: float  # user + nice + system: time some process ran
    steal_s: float | None  # None where the platform does not count steal
    total_s: float  # every state, guest time counted once


def machine_times(times: Any) -> MachineTimes:
    """The parts of a `psutil.cpu_times()` tuple the record needs. Guest time is already
    inside user time on Linux (`cpu_total` subtracts it once, as psutil does)."""
    process = times.user + getattr(times, "nice", 0.0) + times.system
    return MachineTimes(process, getattr(times, "steal", None), cpu_total(times))


class ProcessKey(NamedTuple):
    """A process that stays one process when its pid is reused: pid and birth time."""

    pid: int
    born: float


class ProcessTime(NamedTuple):
    """One excluded process at one instant."""

    cpu_s: float  # its own user + system, plus its reaped children's where its tree counts
    parent: ProcessKey | None  # its parent, where the parent is excluded too


@dataclass(frozen=True)
class Snapshot:
    """Every counter the record needs, read at one instant."""

    at_s: float  # time.monotonic()
    psi_some_s: float | None
    machine: MachineTimes
    excluded: Mapping[ProcessKey, ProcessTime]


def excluded_cpu_s(
    start: Mapping[ProcessKey, ProcessTime],
    end: Mapping[ProcessKey, ProcessTime],
) -> float:
    """CPU seconds the excluded processes used between two snapshots.

    A process at both ends adds its difference; one only at the end was born within the
    window (a process cannot join a tree otherwise) and adds all of its time. One that
    ended within the window and was reaped by an excluded ancestor still there is in that
    ancestor's children's time for its whole life: its time at the start is taken off
    again, so only its time within the window stays. One whose excluded ancestors all
    ended too is lost (its time within the window reads as others')."""
    used = 0.0
    for key, now in end.items():
        before = start.get(key)
        used += now.cpu_s - (before.cpu_s if before is not None else 0.0)
    for key, before in start.items():
        if key not in end and _ancestor_remains(before.parent, start, end):
            used -= before.cpu_s
    return max(0.0, used)


def _ancestor_remains(
    parent: ProcessKey | None,
    start: Mapping[ProcessKey, ProcessTime],
    end: Mapping[ProcessKey, ProcessTime],
) -> bool:
    while parent is not None:
        if parent in end:
            return True
        above = start.get(parent)
        parent = above.parent if above is not None else None
    return False


def record_between(start: Snapshot, end: Snapshot) -> InterferenceRecord:
    """The record of the window between two snapshots."""
    window = max(0.0, end.at_s - start.at_s)
    capacity = end.machine.total_s - start.machine.total_s
    processes = end.machine.process_s - start.machine.process_s
    ours = excluded_cpu_s(start.excluded, end.excluded)
    other_s = max(0.0, processes - ours)
    pressure = None
    if start.psi_some_s is not None and end.psi_some_s is not None and window > 0:
        pressure = _share(end.psi_some_s - start.psi_some_s, window)
    steal = None
    if start.machine.steal_s is not None and end.machine.steal_s is not None:
        steal = _share(end.machine.steal_s - start.machine.steal_s, capacity)
    return InterferenceRecord(
        window_s=window,
        cpu_pressure=pressure,
        steal=steal,
        other_cpu=_share(other_s, capacity),
        other_cpu_s=other_s,
    )


def _share(part: float, whole: float) -> float:
    return min(1.0, max(0.0, part / whole)) if whole > 0 else 0.0


class InterferenceSampler:
    """Opens and closes measured windows, one at a time; one sampler serves a whole run.

    `start(exclude_trees=…, exclude_processes=…)` names what is ours: a tree is a process
    with all its descendants (the server and its python-backend stubs; the generator's
    process and a gang's local workers), a process alone is just that process (its
    threads included, its children not). Raises `SamplerUnavailable` where one of them
    does not exist: without it, its CPU would read as interference.
    """

    def __init__(
        self,
        *,
        psi_path: Path = PSI_CPU_PATH,
        cpu_times: Callable[[], Any] = psutil.cpu_times,
    ) -> None:
        self._psi_path = psi_path
        self._cpu_times = cpu_times
        notes = []
        try:
            read_psi_some_total(psi_path)
            self._has_psi = True
        except (OSError, ValueError) as err:
            self._has_psi = False
            notes.append(
                f"no CPU pressure: {psi_path} cannot be read ({err}); needs Linux 4.20+ with PSI"
            )
        if machine_times(cpu_times()).steal_s is None:
            notes.append("no steal time: this platform's CPU times do not count it")
        #: What this machine cannot measure, for a person; said once per sampler.
        self.notes: tuple[str, ...] = tuple(notes)
        self._opened: Snapshot | None = None
        self._trees: tuple[int, ...] = ()
        self._processes: tuple[int, ...] = ()

    def start(
        self, *, exclude_trees: Iterable[int] = (), exclude_processes: Iterable[int] = ()
    ) -> None:
        """Open a window now (the replicate's measurement starts)."""
        self._trees = tuple(exclude_trees)
        self._processes = tuple(exclude_processes)
        self._opened = self._snapshot(opening=True)

    def stop(self) -> InterferenceRecord:
        """Close the window opened by `start` and say what disturbed it."""
        if self._opened is None:
            raise RuntimeError("interference window not started")
        opened, self._opened = self._opened, None
        return record_between(opened, self._snapshot(opening=False))

    def _snapshot(self, *, opening: bool) -> Snapshot:
        # The excluded processes first, the machine's counters right after, in the same
        # order at both ends: what runs between the two reads falls on the same side.
        excluded = _excluded_times(self._trees, self._processes, must_exist=opening)
        return Snapshot(
            at_s=time.monotonic(),
            psi_some_s=self._read_psi(),
            machine=machine_times(self._cpu_times()),
            excluded=excluded,
        )

    def _read_psi(self) -> float | None:
        if not self._has_psi:
            return None
        try:
            return read_psi_some_total(self._psi_path)
        except (OSError, ValueError):
            return None


class _Member(NamedTuple):
    key: ProcessKey
    cpu_s: float
    ppid: int
    counts_children: bool  # a tree member: its reaped children's time is in `cpu_s`


def _excluded_times(
    trees: Iterable[int], processes: Iterable[int], *, must_exist: bool
) -> dict[ProcessKey, ProcessTime]:
    """Each excluded process's CPU seconds, keyed by (pid, birth time).

    At the window's start a missing pid raises `SamplerUnavailable`; at its end a process
    that has gone is simply absent (`excluded_cpu_s` accounts for it). A pid that is both
    a lone process and in a tree counts as the tree's."""
    members: dict[int, _Member] = {}
    for pid in trees:
        for proc in _tree(pid, must_exist=must_exist):
            _read(members, proc, counts_children=True)
    for pid in processes:
        if pid not in members:
            for proc in _tree(pid, must_exist=must_exist, alone=True):
                _read(members, proc, counts_children=False)
    # Parents only where they are tree members: only those count their reaped children.
    reapers = {pid: m.key for pid, m in members.items() if m.counts_children}
    return {m.key: ProcessTime(m.cpu_s, reapers.get(m.ppid)) for m in members.values()}


def _tree(pid: int, *, must_exist: bool, alone: bool = False) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root] if alone else [root, *root.children(recursive=True)]
    except psutil.Error as err:
        if must_exist:
            raise SamplerUnavailable(f"no interference sampling: pid {pid}: {err}") from None
        return []


def _read(members: dict[int, _Member], proc: psutil.Process, *, counts_children: bool) -> None:
    try:
        with proc.oneshot():
            cpu = proc.cpu_times()
            key = ProcessKey(proc.pid, proc.create_time())
            ppid = proc.ppid()
    except psutil.Error:
        return  # ended between listing and reading: its reaper's children count it
    seconds = cpu.user + cpu.system
    if counts_children:
        seconds += cpu.children_user + cpu.children_system
    members[proc.pid] = _Member(key, seconds, ppid, counts_children)
