"""Server subprocesses that cannot outlive servebench and stop as a whole process group."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc Linux: fall back to atexit/context-manager cleanup only
        return None


def _die_with_parent(libc: ctypes.CDLL | None, parent_pid: int):
    """A preexec_fn asking the kernel to SIGKILL the child when its parent dies.

    This covers the crash a context manager or atexit cannot (the caller SIGKILLed or
    segfaulting). SIGKILL rather than SIGTERM because a tritonserver stuck in a model load
    ignores SIGTERM. The kernel sends it when the *thread* that forked exits, which is why
    `spawn_server` forks only from the main thread or the long-lived spawner thread.
    """

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
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
    process dies (see `_die_with_parent`), whichever thread asked for it.
    """
    global _spawner
    job = functools.partial(_spawn, list(argv), dict(env), log_path)
    if threading.current_thread() is threading.main_thread():
        return job()
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
    return _spawner.call(job)


def _spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(_libc(), os.getpid()),
        )


def stop_process_group(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """SIGTERM the process group, SIGKILL it after `timeout_s`; return the exit code.

    A last SIGKILL to the group also reaches helpers that outlived the leader (the
    python-backend stubs), which are ours alone because the group is the server's session.
    """
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)
    return proc.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is already gone
        os.killpg(pgid, sig)
