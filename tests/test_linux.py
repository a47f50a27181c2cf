"""The one Linux binding (timerfd, prctl) that the load generator, the link emulator and
the server launcher share. Timing is checked from below only: a timer may fire late on a
busy machine, never early."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import until

from servebench.common import linux

pytestmark = pytest.mark.skipif(not linux.TIMERFD_AVAILABLE, reason="needs Linux timerfd")


def _wait_readable(fd: int, timeout_s: float = 10.0) -> bool:
    with select.epoll() as poll:
        poll.register(fd, select.EPOLLIN)
        return bool(poll.poll(timeout_s))


def test_absolute_and_relative_timers_fire_no_earlier_than_asked():
    timer = linux.Timerfd()
    try:
        assert not timer.drain()  # not armed: nothing to read
        deadline = time.perf_counter() + 0.02
        timer.arm_at(deadline)
        assert _wait_readable(timer.fd)
        assert time.perf_counter() >= deadline
        assert timer.drain() and not timer.drain()

        start = time.monotonic()
        timer.arm_after(0.02)
        assert _wait_readable(timer.fd)
        assert time.monotonic() - start >= 0.02
        assert timer.drain()

        timer.arm_at(time.perf_counter() - 1.0)  # a deadline in the past fires at once
        assert _wait_readable(timer.fd)
    finally:
        timer.close()
    assert timer.fd == -1
    timer.close()  # closing twice is harmless


@pytest.mark.skipif(not Path("/proc/self/timerslack_ns").exists(), reason="no timerslack_ns")
def test_timer_slack_is_set_for_the_calling_thread():
    path = Path("/proc/self/timerslack_ns")
    before = int(path.read_text())
    try:
        assert linux.set_timer_slack(1)
        assert int(path.read_text()) == 1
    finally:
        linux.set_timer_slack(before)


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_parent_death_signal_reaches_the_child():
    # The middle process sets PDEATHSIG in its child, prints the child's pid, and is killed.
    middle = (
        "import signal, subprocess, sys, time\n"
        "from servebench.common.linux import set_parent_death_signal\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "    preexec_fn=lambda: set_parent_death_signal(signal.SIGKILL))\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", middle], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        proc.kill()
        proc.wait()
        until(lambda: _gone(child), timeout_s=10, what="the child to die with its parent")
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)
