"""Which addresses a callback may reach without a prefix that names its host (the SSRF
guard). Pure: the address is classified, the caller resolves.

A caller's broad prefix (``https://``: any public host) must not become a way into the
service's own network: loopback, private (RFC 1918), shared (CGNAT, 100.64/10), link-local
(169.254/16, where cloud metadata answers, and fe80::/10), unique-local (fc00::/7),
multicast, unspecified, reserved and the other special-purpose ranges are refused, and so
are IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4), which
an OS may route to the embedded address. A prefix that names the host (``http://127.0.0.1:
9000/``, ``https://orders.internal/``) is the operator saying "this one, whatever it is".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Protocol

from trigger_service.core.urls import IPAddress

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# (network, why it is refused), most specific first where they overlap.
_FORBIDDEN: tuple[tuple[_V4 | _V6, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified (this network)"),
    (_V4("10.0.0.0/8"), "private (RFC 1918)"),
    (_V4("100.64.0.0/10"), "shared address space (CGNAT)"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local (cloud metadata)"),
    (_V4("172.16.0.0/12"), "private (RFC 1918)"),
    (_V4("192.0.0.0/24"), "IETF protocol assignments"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "6to4 relay anycast"),
    (_V4("192.168.0.0/16"), "private (RFC 1918)"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),  # 255.255.255.255 (broadcast) included
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("::ffff:0:0/96"), "IPv4-mapped IPv6"),
    (_V6("::/96"), "IPv4-compatible IPv6"),
    (_V6("64:ff9b::/96"), "NAT64 (an embedded IPv4 address)"),
    (_V6("64:ff9b:1::/48"), "NAT64 local use"),
    (_V6("100::/64"), "discard-only"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("2002::/16"), "6to4 (an embedded IPv4 address)"),
    (_V6("fc00::/7"), "unique-local"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local (deprecated)"),
    (_V6("ff00::/8"), "multicast"),
)


def forbidden_address(ip: IPAddress) -> str | None:
    """Why a callback without a prefix naming its host may not reach ``ip``; None when it
    may (a globally routable unicast address)."""
    for net, why in _FORBIDDEN:
        if ip.version == net.version and ip in net:
            return why
    # Anything else the IANA special-purpose registries do not call global (Teredo, ORCHID,
    # ranges Python knows and this table does not).
    if not ip.is_global or ip.is_reserved or ip.is_multicast:
        return "not globally routable"
    return None


def forbidden_name(host: str) -> str | None:
    """Names that are loopback by definition (RFC 6761), whatever a resolver says."""
    if host == "localhost" or host.endswith(".localhost"):
        return "localhost (loopback)"
    return None


class HostResolver(Protocol):
    """DNS, as the API checks a callback's host name at registration."""

    async def resolve(self, host: str, port: int) -> Sequence[IPAddress]:
        """The addresses ``host`` has now; empty when it does not resolve or not in the
        resolver's time bound (never raises for DNS failures)."""
        ...
