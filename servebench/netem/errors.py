"""Errors of the link emulator, as one small hierarchy so callers can catch the layer."""

from __future__ import annotations

from servebench.common.errors import ServebenchError


class NetemError(ServebenchError):
    """Base class of every error this package raises on purpose."""


class ProfileError(NetemError, ValueError):
    """A link profile, a profile file or a trace file is invalid (the message names the field)."""


class UnknownLinkError(ProfileError):
    """A link reference that is neither a built-in profile nor a profile file."""

    def __init__(self, reference: str, reason: str):
        super().__init__(f"link {reference!r}: {reason}")
        self.reason = reason


class EmulatorError(NetemError, RuntimeError):
    """The emulator could not start, answer or stop (the message says which address or why)."""


class AddressError(NetemError, ValueError):
    """A host:port could not be parsed (the message names the field and the value)."""
