"""The in-memory ``OpsBoard`` (tests, and a runtime built without Redis)."""

from __future__ import annotations

from collections.abc import Sequence

from trigger_service.core.ports.ops import BreakerView
from trigger_service.core.time.lag import BUCKETS


class MemoryOpsBoard:
    def __init__(self) -> None:
        self._breakers: dict[tuple[str, str, str], tuple[BreakerView, int]] = {}
        self._lag: dict[int, list[int]] = {}

    async def publish_breakers(self, source: str, breakers: Sequence[BreakerView],
                               now_ms: int, ttl_s: int,
                               dropped: Sequence[tuple[str, str]] = ()) -> None:
        for caller, origin in dropped:
            self._breakers.pop((source, caller, origin), None)
        for b in breakers:
            view = BreakerView(b.origin, b.state, b.changed_at_ms, source, b.caller)
            self._breakers[(source, b.caller, b.origin)] = (view, now_ms + ttl_s * 1000)

    async def read_breakers(self, now_ms: int) -> list[BreakerView]:
        return [view for view, expires_at_ms in self._breakers.values()
                if expires_at_ms > now_ms]

    async def add_lag(self, slots: dict[int, list[int]]) -> None:
        for slot, counts in slots.items():
            mine = self._lag.setdefault(slot, [0] * BUCKETS)
            for i, n in enumerate(counts):
                mine[i] += n

    async def read_lag(self, slots: Sequence[int]) -> list[int]:
        counts = [0] * BUCKETS
        for slot in slots:
            for i, n in enumerate(self._lag.get(slot, ())):
                counts[i] += n
        return counts
