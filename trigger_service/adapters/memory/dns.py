"""An in-memory ``HostResolver``: a fixed table of names (tests)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from trigger_service.core.urls import IPAddress


class StaticResolver:
    """Resolves only the names in its table; any other name does not resolve."""

    def __init__(self, table: Mapping[str, Sequence[str]] | None = None) -> None:
        self.table = {h: tuple(ipaddress.ip_address(a) for a in addrs)
                      for h, addrs in (table or {}).items()}
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> Sequence[IPAddress]:
        self.asked.append(host)
        return self.table.get(host, ())
