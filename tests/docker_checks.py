"""What the container tests share: whether an engine answers, whether an image can run here
(skipping with the one-sentence reason where not), and which containers a servebench
process owns (to check none is left behind)."""

from __future__ import annotations

import os

import pytest

from servebench.common.wellknown import TRITON_CPU_IMAGE
from servebench.servers.docker_engine import connect_docker, docker_engine_problem
from servebench.servers.docker_images import ImageUnavailableError, ensure_image
from servebench.servers.docker_owner import OWNER_LABEL

ENGINE_PROBLEM = docker_engine_problem()
needs_engine = pytest.mark.skipif(ENGINE_PROBLEM is not None, reason=ENGINE_PROBLEM or "")
MISSING_IMAGE = "localhost/servebench-no-such-image:latest"


def image_problem(image: str, who: str) -> str | None:
    """Why a container of `image` cannot run here (one sentence), or None: no engine, or
    the image is absent and cannot be pulled (a pull with no registry fails in seconds)."""
    if ENGINE_PROBLEM is not None:
        return ENGINE_PROBLEM
    client = connect_docker()
    try:
        ensure_image(client, image, who=who)
    except ImageUnavailableError as err:
        return str(err)
    finally:
        client.close()
    return None


def needs_image(image: str, who: str = "triton-docker") -> None:
    """Skip the calling test, with the reason, where `image` cannot run here."""
    if problem := image_problem(image, who):
        if image == TRITON_CPU_IMAGE and ENGINE_PROBLEM is None:
            problem += "; run docker/images.sh"
        pytest.skip(problem)


def owned_containers(pid: int | None = None) -> list:
    """Containers labelled as started by servebench process `pid` (this one by default)."""
    client = connect_docker()
    try:
        label = f"{OWNER_LABEL}={pid or os.getpid()}"
        return client.containers.list(all=True, filters={"label": label})
    finally:
        client.close()
