"""Server subprocesses that cannot outlive servebench and stop as a whole process group."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
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
    ignores SIGTERM. The kernel sends it when the *thread* that forked exits, so servers
    should be started from a long-lived thread (the main thread in practice).
    """

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def spawn_server(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen:
    """Start `argv` in its own session with stdout and stderr appended to `log_path`.

    Its own session (and so its own process group) lets a stop reach every helper process
    the server forks, without touching the caller's group.
    """
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
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
