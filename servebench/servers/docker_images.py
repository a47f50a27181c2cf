"""Images for the docker launchers: present, or pulled before a server's clock starts.

The docker SDK's `images.pull` reports success when the engine streams an error instead
of an image (podman's Docker API does: a registry that cannot be reached is an `error`
line in a 200 answer), and the caller then learns only "no such image". Pulling through
the low-level stream reads that line, so a missing image is refused in one sentence that
says why it could not be fetched — quickly, since a registry that is unreachable fails
its first request (no registry is reachable on the development machines).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from servebench.servers.base import ServerStartError

# A pull streams progress lines; a registry that stalls longer than this between two of
# them ends the pull (a pull must never hang a start).
PULL_READ_TIMEOUT_S = 120.0
_REGISTRY = re.compile(r"pinging container registry ([^:\s]+)")


class ImageUnavailableError(ServerStartError):
    """The image is neither present nor pullable; the message is one sentence."""


def ensure_image(client: Any, image: str, *, who: str, pull: bool = True) -> None:
    """Return once `image` is present in the engine (pulling it if allowed), else raise
    `ImageUnavailableError` naming the image and why it could not be had."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(image)
        return
    except ImageNotFound:
        pass
    if not pull:
        raise ImageUnavailableError(
            f"{who}: image {image} is not present and pulling is off; "
            f"build it or run `docker pull {image}`"
        )
    error = pull_image(client, image)
    try:
        client.images.get(image)
    except ImageNotFound:
        why = pull_reason(error) if error else "the engine returned no image"
        raise ImageUnavailableError(
            f"{who}: image {image} is not present and could not be pulled ({why})"
        ) from None


def pull_image(client: Any, image: str) -> str | None:
    """Pull `image`; the engine's error text, or None when it reported none."""
    from docker.errors import DockerException
    from docker.utils import parse_repository_tag
    from requests.exceptions import RequestException

    repository, tag = parse_repository_tag(image)
    try:
        with _read_timeout(client, PULL_READ_TIMEOUT_S):
            for message in client.api.pull(repository, tag=tag or "latest", stream=True,
                                           decode=True):  # fmt: skip
                if isinstance(message, dict) and message.get("error"):
                    return str(message["error"])
    except (DockerException, RequestException, OSError) as err:
        return str(err) or type(err).__name__
    return None


def pull_reason(error: str) -> str:
    """The engine's pull error, cut to what a person needs: the registry and the failure.

    'initializing source docker://localhost/nope:latest: pinging container registry
    localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443: connect: connection
    refused' becomes 'registry localhost: connection refused'.
    """
    text = error.strip().splitlines()[0] if error.strip() else "no reason given"
    last = text.rsplit(": ", 1)[-1]
    if match := _REGISTRY.search(text):
        return f"registry {match.group(1)}: {last}"
    return text[:200]


def image_labels(client: Any, image: str) -> dict[str, str]:
    """The labels of a present image ({} when it has none)."""
    return dict(client.images.get(image).labels or {})


@contextlib.contextmanager
def _read_timeout(client: Any, seconds: float) -> Iterator[None]:
    """The client's socket read timeout raised for the length of a pull (its default is
    meant for short API calls), restored after."""
    api = client.api
    before = api.timeout
    api.timeout = max(before or 0, seconds)
    try:
        yield
    finally:
        api.timeout = before
