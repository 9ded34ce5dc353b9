"""``DispatcherDeaths`` in memory, for unit tests: declared incarnations until their TTL
runs out on the given clock."""

from __future__ import annotations

from trigger_service.core.ports import Clock


class MemoryDispatcherDeaths:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._until_ms: dict[str, int] = {}

    async def declare(self, incarnation: str, ttl_s: int) -> None:
        self._until_ms[incarnation] = self._clock.now_ms() + ttl_s * 1000

    async def is_dead(self, incarnation: str) -> bool:
        return self._until_ms.get(incarnation, 0) > self._clock.now_ms()
