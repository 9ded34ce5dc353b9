"""The delivery half of the SSRF guard: the webhook channel's DNS resolver.

aiohttp connects to the addresses its resolver returns, so a resolver that checks each
address and returns only checked ones leaves no DNS-rebinding window: the address dialled is
the address classified, never a second lookup's. A name with any forbidden address
(``core/notify/addresses.py``) is refused as a whole (a name that mixes public and loopback
addresses is not one to half-trust); the refusal is an ``AddressRefused``, which aiohttp
hands back as the ``os_error`` of a ``ClientConnectorDNSError``.

IP literals never reach a resolver (aiohttp dials them directly): the channel classifies
those itself before sending.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult

from trigger_service.core.notify.addresses import forbidden_address
from trigger_service.core.urls import IPAddress

# (family, address, port) of each answer, like getaddrinfo's.
Answer = tuple[socket.AddressFamily, str, int]
Lookup = Callable[[str, int, socket.AddressFamily], Awaitable[Sequence[Answer]]]


class AddressRefused(OSError):
    """The host resolved to an address callbacks may not reach without a naming prefix."""

    def __init__(self, host: str, ip: IPAddress, why: str) -> None:
        super().__init__(f"{host} resolves to {ip}, {why}: not allowed for this callback")
        self.host, self.ip, self.why = host, ip, why


async def system_lookup(host: str, port: int,
                        family: socket.AddressFamily) -> Sequence[Answer]:
    """The event loop's ``getaddrinfo`` (DNS and the hosts file); raises ``OSError``."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, family=family)
    return [(fam, str(sockaddr[0]), int(sockaddr[1])) for fam, _, _, _, sockaddr in infos
            if fam in (socket.AF_INET, socket.AF_INET6)]


class GuardedResolver(AbstractResolver):
    """Resolves with ``lookup``; with ``guard`` every address is checked first.

    The unguarded form serves hosts that a caller's prefix names (the operator chose them,
    internal addresses included); it resolves the same way, so tests that replace
    ``lookup`` see both paths."""

    def __init__(self, lookup: Lookup = system_lookup, *, guard: bool = True) -> None:
        self._lookup = lookup
        self._guard = guard

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        """The checked addresses of ``host``; raises ``AddressRefused`` or another
        ``OSError`` (no such name, no address)."""
        out: list[ResolveResult] = []
        for fam, address, answer_port in await self._lookup(host, port, family):
            if self._guard:
                ip = _address(address)
                why = forbidden_address(ip)
                if why is not None:
                    raise AddressRefused(host, ip, why)
            out.append(ResolveResult(hostname=host, host=address, port=answer_port,
                                     family=fam, proto=0,
                                     flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV))
        if not out:
            raise OSError(f"{host}: no IPv4 or IPv6 address")
        return out

    async def close(self) -> None:
        """Nothing to release."""


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text.partition("%")[0])  # an IPv6 zone id is not the address
