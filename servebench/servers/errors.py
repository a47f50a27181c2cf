"""The one error hierarchy of the servers package: callers catch `ServerError`.

Kept apart from `base` because the control plane (`control`), which `base` builds on,
raises them too; `base` re-exports them for the callers that already import from there.
"""

from __future__ import annotations

from servebench.common.errors import ServebenchError


class ServerError(ServebenchError, RuntimeError):
    """Base of every server error; the message names the server and the reason."""


class ServerStartError(ServerError):
    """The server did not come up (or could not be attached to)."""


class ServerModelError(ServerError):
    """A model did not load, unload or become ready."""


class ServerKindError(ServerError, ValueError):
    """A server kind, or a kind's construction argument, servebench does not know: bad
    input (a scenario's kind and launch, a caller's settings), named in the message."""
