"""Emulated links for Locust users: one `LinkEmulator` per process, not per user.

Every user of a Locust process that sends through the same profile to the same server
shares one emulator (a link is the network between the load generator and the server,
not something each simulated user owns). The emulator runs in its own worker process
(`servebench.netem.emulator`), so gevent's loop in this process never sets its timing;
starting it blocks only the greenlet that asked (gevent patches `subprocess` and
`select`), and the others wait on the lock. Emulators stop when the swarm stops.
"""

from __future__ import annotations

import gevent.lock

from servebench.clients.endpoints import grpc_target, http_base
from servebench.locust.settings import UserSettings, link_profile
from servebench.netem import Address, LinkEmulator, LinkStats, parse_address


def server_address(settings: UserSettings) -> Address:
    """The server's TCP address, the one an emulator proxies to."""
    if settings.is_grpc:
        return parse_address(grpc_target(settings.url), "--grpc-host")
    base = http_base(settings.url)
    return Address(base.host or "", base.port or (443 if base.scheme == "https" else 80))


def through(settings: UserSettings, address: Address | None) -> str:
    """The URL (or gRPC target) a user connects to: the proxy's, or the server's own."""
    if address is None:
        return settings.url
    if settings.is_grpc:
        return str(address)
    return str(http_base(settings.url).with_host(address.host).with_port(address.port))


class LinkPool:
    """The emulators of this process, keyed by (profile, server address)."""

    def __init__(self) -> None:
        self._emulators: dict[tuple[str, Address], LinkEmulator] = {}
        self._lock = gevent.lock.RLock()

    def connect_url(self, settings: UserSettings) -> str:
        """Where `settings`' requests go; starts the link's emulator on first use.

        A profile that shapes nothing (`direct`) gets no proxy. Raises netem's errors
        (ProfileError naming the profile, EmulatorError with the worker's stderr).
        """
        profile = link_profile(settings.link)
        if not profile.shapes_traffic:
            return through(settings, None)
        key = (settings.link, server_address(settings))
        with self._lock:
            emulator = self._emulators.get(key)
            if emulator is None:
                emulator = LinkEmulator(profile, key[1])
                emulator.start()
                self._emulators[key] = emulator
        return through(settings, emulator.address)

    def stop_all(self) -> dict[str, LinkStats]:
        """Stop every emulator; returns each link's final counters by `profile->server`."""
        with self._lock:
            emulators, self._emulators = self._emulators, {}
        stats = {}
        for (link, target), emulator in emulators.items():
            final = emulator.stop()
            if final is not None:
                stats[f"{link}->{target}"] = final
        return stats
