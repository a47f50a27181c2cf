"""Who owns a container, and removing the ones whose owner is gone.

Every container servebench starts carries labels naming its owner: the host, the pid of
the servebench process and that process's start time (a pid alone may be reused). A
normal stop removes the container; Ctrl-C goes through the same stop; a process that
exits with containers still running (a start abandoned half-way by a second Ctrl-C)
removes them at exit. Only SIGKILL (or a crash of the interpreter) leaves one behind:
the next docker start, in any servebench process on the same host, finds containers
whose owner process no longer exists and removes them, and says so in the log.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import psutil

OWNER_LABEL = "servebench.owner-pid"
OWNER_HOST_LABEL = "servebench.owner-host"
OWNER_STARTED_LABEL = "servebench.owner-started"

log = logging.getLogger(__name__)


def owner_labels() -> dict[str, str]:
    """The labels that tie a container to this process on this host."""
    return {
        OWNER_LABEL: str(os.getpid()),
        OWNER_HOST_LABEL: socket.gethostname(),
        OWNER_STARTED_LABEL: f"{psutil.Process().create_time():.2f}",
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process the labels name still runs (the same process, not a later one
    that got its pid: the start time must match where the labels give it)."""
    try:
        pid = int(labels[OWNER_LABEL])
        process = psutil.Process(pid)
        started = process.create_time()
    except (KeyError, ValueError):
        return True  # not a label servebench wrote: not ours to judge
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, but cannot be read: leave it
    recorded = labels.get(OWNER_STARTED_LABEL)
    return recorded is None or abs(float(recorded) - started) < 1.0


def reap_stale_containers(client: Any, *, local_engine: bool) -> list[str]:
    """Remove containers this host's servebench processes left when they were killed;
    return their names.

    A container labelled with another host is never touched; one without a host label
    (older servebench, other servebench tools) only where the engine is this machine's
    own (a unix socket), since only there do its pids mean processes here.
    """
    from docker.errors import DockerException

    here = socket.gethostname()
    removed = []
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        labels = dict(container.labels or {})
        host = labels.get(OWNER_HOST_LABEL)
        if (host is None and not local_engine) or (host is not None and host != here):
            continue
        if owner_alive(labels):
            continue
        try:
            container.remove(force=True)
        except DockerException as err:
            log.warning(
                "could not remove container %s left by servebench pid %s, which is gone: %s",
                container.name, labels.get(OWNER_LABEL), err,
            )  # fmt: skip
            continue
        log.warning(
            "removed container %s (%s) left by servebench pid %s, which is gone",
            container.name, container.short_id, labels.get(OWNER_LABEL),
        )  # fmt: skip
        removed.append(container.name)
    return removed


# Containers this process created and has not removed yet: container id → how to remove
# it. Strong references, so a server dropped without a stop is still cleaned up at exit.
_LIVE: dict[str, Callable[[], None]] = {}


def track(container_id: str, remove: Callable[[], None]) -> None:
    """Remember a container this process created, to remove it at exit if nobody did."""
    _LIVE[container_id] = remove


def untrack(container_id: str) -> None:
    _LIVE.pop(container_id, None)


@atexit.register
def _remove_all() -> None:
    """Remove containers still running when the interpreter exits (a start finished in a
    worker thread after its run was abandoned, a caller that never called stop)."""
    for container_id, remove in list(_LIVE.items()):
        with contextlib.suppress(Exception):
            remove()
        _LIVE.pop(container_id, None)
