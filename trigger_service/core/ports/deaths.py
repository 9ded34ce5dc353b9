"""The port of dispatcher deaths: a dispatcher process proven dead by its successor
(``dispatcher.succession``), so that another dispatcher that finds one of its claims on a row
takes it over at once, without first watching the claim for its lease.

A record only ever shortens a takeover: a death not declared, expired or lost (a Redis
flush) leaves the claim to be watched for its lease, as without this port."""

from __future__ import annotations

from typing import Protocol


class DispatcherDeaths(Protocol):
    async def declare(self, incarnation: str, ttl_s: int) -> None:
        """Record that the dispatcher process ``incarnation`` is dead and can send nothing
        more, for ``ttl_s`` (declared again, kept that long from then). Raises
        ``CacheError``."""
        ...

    async def is_dead(self, incarnation: str) -> bool:
        """Whether ``incarnation`` was declared dead and the record is still kept (False
        proves nothing). Raises ``CacheError``."""
        ...
