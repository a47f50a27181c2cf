"""servebench.netem: emulated network links (wired, Wi-Fi, LTE, custom, trace-driven).

A user-space link emulator — a TCP proxy that delays, paces and "loses" bytes — because
this kernel has no sch_netem and most users cannot run `tc` as root. It imports nothing
else from servebench (it is the lowest layer).
"""

from servebench.netem.address import Address, parse_address
from servebench.netem.emulator import LinkEmulator
from servebench.netem.errors import (
    AddressError,
    EmulatorError,
    NetemError,
    ProfileError,
    UnknownLinkError,
)
from servebench.netem.profiles import (
    BUILTIN_PROFILES,
    LinkProfile,
    link_kind,
    profile_from_mapping,
    resolve_link,
)
from servebench.netem.proxy import LinkProxy
from servebench.netem.stats import ConnectionStats, DirectionStats, LinkStats
from servebench.netem.trace import MahimahiTrace

__all__ = [
    "BUILTIN_PROFILES",
    "Address",
    "AddressError",
    "ConnectionStats",
    "DirectionStats",
    "EmulatorError",
    "LinkEmulator",
    "LinkProfile",
    "LinkProxy",
    "LinkStats",
    "MahimahiTrace",
    "NetemError",
    "ProfileError",
    "UnknownLinkError",
    "link_kind",
    "parse_address",
    "profile_from_mapping",
    "resolve_link",
]
