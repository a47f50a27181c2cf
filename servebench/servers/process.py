"""Server subprocesses that cannot outlive servebench and stop as a whole process group.

A server's helpers (tritonserver's python-backend stubs) share its process group but are
not told when the server dies; everything here treats the group, not the leader, as the
server: it is killed as soon as its leader exits, and a stop waits until it is gone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path

from servebench.common.linux import set_parent_death_signal

_PROC = Path("/proc")
_GONE_POLL_S = 0.02


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn asking the kernel to SIGKILL the child when its parent dies.

    This covers the crash a context manager or atexit cannot (the caller SIGKILLed or
    segfaulting). SIGKILL rather than SIGTERM because a tritonserver stuck in a model load
    ignores SIGTERM. The kernel sends it when the *thread* that forked exits, which is why
    `spawn_server` forks only from the main thread or the long-lived spawner thread.
    Where prctl is missing (not Linux) only atexit/context-manager cleanup remains.
    """

    def preexec() -> None:
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class _Spawner:
    """One daemon thread, alive as long as the process, that forks servers for other threads.

    PDEATHSIG fires when the forking *thread* exits, so a server started from a worker
    thread that finishes (`asyncio.to_thread`, a short-lived pool) would be killed with it.
    Forking from this thread ties the server to the process instead.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="servebench-spawner", daemon=True).start()

    def _run(self) -> None:
        while True:
            job, future = self._jobs.get()
            try:
                future.set_result(job())
            except BaseException as err:  # handed back to the calling thread
                future.set_exception(err)

    def call(self, job: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        future: Future[subprocess.Popen] = Future()
        self._jobs.put((job, future))
        return future.result()


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def spawn_server(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen:
    """Start `argv` in its own session with stdout and stderr appended to `log_path`.

    Its own session (and so its own process group) lets a stop reach every helper process
    the server forks, without touching the caller's group. The kernel kills it if this
    process dies (see `_die_with_parent`), whichever thread asked for it; its helpers die
    when it does (see `_kill_group_when_leader_exits`).
    """
    global _spawner
    job = functools.partial(_spawn, list(argv), dict(env), log_path)
    if threading.current_thread() is threading.main_thread():
        proc = job()
    else:
        with _spawner_lock:
            if _spawner is None:
                _spawner = _Spawner()
        proc = _spawner.call(job)
    threading.Thread(
        target=_kill_group_when_leader_exits,
        args=(proc.pid,),
        name=f"servebench-reaper-{proc.pid}",
        daemon=True,
    ).start()
    return proc


def _spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )


def _kill_group_when_leader_exits(pid: int) -> None:
    """SIGKILL the server's process group as soon as its leader exits, however it ended.

    Nobody else would: tritonserver's python-backend stubs get no signal when the server is
    killed or crashes, and live on under init, holding memory, shared memory and their
    executable (a restart copying the backends then failed with ETXTBSY). `WNOWAIT` leaves
    the exit status for `Popen` to collect, and while the leader is an unreaped zombie its
    pid, the group's id, cannot be reused by another process.
    """
    with contextlib.suppress(ChildProcessError):  # Popen collected it first: still kill
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    _signal_group(pid, signal.SIGKILL)


def stop_process_group(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """SIGTERM the process group, SIGKILL it after `timeout_s`; return the exit code.

    A last SIGKILL to the group also reaches helpers that outlived the leader (the
    python-backend stubs), which are ours alone because the group is the server's session.
    Returns only once they have finished exiting (or `timeout_s` more has passed): a
    SIGKILLed process with many threads takes a while to release its memory and executable,
    and a restart right after must not find them still in use.
    """
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while _group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(_GONE_POLL_S)
    return proc.returncode


def _group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that have not finished exiting.

    A zombie counts as finished once its other threads are gone: by then every thread has
    released the memory and the executable, and it only waits for its parent (init, for an
    orphaned stub) to collect it. Empty where there is no /proc.
    """
    members = []
    try:
        entries = list(os.scandir(_PROC))
    except OSError:
        return members
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
            if int(group) != pgid:
                continue
            if state == "Z" and len(os.listdir(Path(entry.path, "task"))) <= 1:
                continue
        except (OSError, ValueError):  # it vanished while we looked
            continue
        members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is already gone
        os.killpg(pgid, sig)
