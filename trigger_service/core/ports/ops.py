"""What dispatchers publish for the ops page (``core.ports`` holds the other boundaries;
the same rules apply): breaker states and fire lag, across processes and hosts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BreakerView:
    """One dispatcher's circuit for one caller's callbacks to one origin, as published for
    the ops page."""
    origin: str  # scheme://host:port
    state: str  # closed | open | half_open
    changed_at_ms: int  # when it entered this state
    source: str = ""  # the dispatcher that published it
    caller: str = ""  # whose callbacks


class OpsBoard(Protocol):
    """What dispatchers publish for the ops page (breaker states, fire lag) where the API
    reads it, across processes and hosts. Published again every second: losing it loses
    at most a few seconds of lag, never a trigger. Raises ``CacheError``. A published
    breaker is shown for ``ttl_s`` unless published again, or until it is ``dropped``."""

    async def publish_breakers(self, source: str, breakers: Sequence[BreakerView],
                               now_ms: int, ttl_s: int,
                               dropped: Sequence[tuple[str, str]] = ()) -> None:
        """Publish ``source``'s circuits and delete its ``dropped`` (caller, origin) ones."""
        ...

    async def read_breakers(self, now_ms: int) -> list[BreakerView]: ...  # live entries

    async def add_lag(self, slots: dict[int, list[int]]) -> None:
        """Add fire-lag bucket counts per slot (``core.time.lag``); kept for the lag window."""
        ...

    async def read_lag(self, slots: Sequence[int]) -> list[int]: ...  # summed over slots
