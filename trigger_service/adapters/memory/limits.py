"""In-memory ``RateLimiter``, ``PendingQuota``, ``StreamSlots`` and ``SendBudget`` (one
process: tests only). Same arithmetic as the Redis scripts."""

from __future__ import annotations

from trigger_service.core.errors import CacheError
from trigger_service.core.ports import Clock
from trigger_service.core.ports.limit import BucketRule, Decision, take_token, take_tokens
from trigger_service.core.time.clock import SystemClock


class MemoryRateLimiter:
    """Token buckets by key on an injected clock; ``fail`` makes every call raise
    ``CacheError`` (a Redis outage)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._buckets: dict[str, tuple[float, int]] = {}  # key → (tokens, last refill ms)
        self.fail = False

    async def take(self, key: str, rule: BucketRule) -> Decision:
        if self.fail:
            raise CacheError("memory limiter told to fail")
        now_ms = self._clock.now_ms()
        tokens, last_ms = self._buckets.get(key, (float(rule.burst), now_ms))
        decision, left = take_token(tokens, last_ms, now_ms, rule)
        self._buckets[key] = (left, max(last_ms, now_ms))
        return decision

    async def take_up_to(self, key: str, rule: BucketRule, count: int) -> int:
        if self.fail:
            raise CacheError("memory limiter told to fail")
        now_ms = self._clock.now_ms()
        tokens, last_ms = self._buckets.get(key, (float(rule.burst), now_ms))
        granted, left = take_tokens(tokens, last_ms, now_ms, rule, count)
        self._buckets[key] = (left, max(last_ms, now_ms))
        return granted


class MemoryPendingQuota:
    def __init__(self) -> None:
        self.counted: dict[str, dict[str, int]] = {}  # caller → trigger id → until ms
        self.fail = False

    async def reserve(self, caller: str, trigger_id: str, until_ms: int, max_pending: int,
                      now_ms: int) -> bool:
        if self.fail:
            raise CacheError("memory quota told to fail")
        mine = self.counted.setdefault(caller, {})
        for tid in [t for t, until in mine.items() if until <= now_ms]:
            del mine[tid]
        if trigger_id not in mine and len(mine) >= max_pending:
            return False
        mine[trigger_id] = until_ms
        return True

    async def release(self, caller: str, trigger_id: str) -> None:
        if self.fail:
            raise CacheError("memory quota told to fail")
        self.counted.get(caller, {}).pop(trigger_id, None)


class MemoryStreamSlots:
    """``fail`` makes every call raise ``CacheError`` (a Redis outage)."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, int]] = {}  # caller → slot → until ms
        self.fail = False

    async def take(self, caller: str, slot: str, until_ms: int, cap: int,
                   now_ms: int) -> int | None:
        if self.fail:
            raise CacheError("memory stream slots told to fail")
        mine = self.held.setdefault(caller, {})
        for old in [k for k, until in mine.items() if until <= now_ms]:
            del mine[old]
        if slot not in mine and len(mine) >= cap:
            return min(mine.values())
        mine[slot] = until_ms
        return None

    async def give_back(self, caller: str, slot: str) -> None:
        if self.fail:
            raise CacheError("memory stream slots told to fail")
        self.held.get(caller, {}).pop(slot, None)


class MemorySendBudget:
    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}  # (caller, channel, day) → sends
        self.fail = False

    async def spent(self, caller: str, channel: str, day: str) -> int:
        if self.fail:
            raise CacheError("memory budget told to fail")
        return self.counts.get((caller, channel, day), 0)

    async def take(self, caller: str, channel: str, day: str, budget: int,
                   count: int = 1) -> bool:
        if self.fail:
            raise CacheError("memory budget told to fail")
        key = (caller, channel, day)
        if self.counts.get(key, 0) + count > budget:
            return False
        self.counts[key] = self.counts.get(key, 0) + count
        return True
