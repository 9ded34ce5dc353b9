"""``HostResolver`` on the event loop's ``getaddrinfo`` (the system resolver: DNS and the
hosts file), bounded in time."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

from trigger_service.core.urls import IPAddress

RESOLVE_TIMEOUT_S = 2.0


class LoopResolver:
    """DNS for the API's registration check. Never raises for DNS trouble: a name that does
    not resolve in ``timeout_s`` has no addresses (the dispatcher checks again anyway)."""

    def __init__(self, timeout_s: float = RESOLVE_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s

    async def resolve(self, host: str, port: int) -> Sequence[IPAddress]:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), self._timeout_s)
        except (OSError, TimeoutError, UnicodeError):
            # NXDOMAIN, no resolver, too slow: no addresses now; delivery resolves again.
            return ()
        return tuple(address_of(info[4]) for info in infos
                     if info[0] in (socket.AF_INET, socket.AF_INET6))


def address_of(sockaddr: tuple[object, ...]) -> IPAddress:
    """The address of a ``getaddrinfo`` sockaddr (an IPv6 zone id dropped)."""
    return ipaddress.ip_address(str(sockaddr[0]).partition("%")[0])
