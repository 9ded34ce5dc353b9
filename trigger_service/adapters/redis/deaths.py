"""``DispatcherDeaths`` on Redis: one key per dead dispatcher process, with a TTL. Redis
errors become ``CacheError``; a lost key only makes a takeover wait for the claim's lease."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.core.errors import CacheError


class RedisDispatcherDeaths:
    """Shares the process's Redis client (not closed here)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    async def declare(self, incarnation: str, ttl_s: int) -> None:
        try:
            await self._r.set(schema.dead_dispatcher_key(incarnation), b"1", ex=ttl_s)
        except RedisError as e:
            raise CacheError(f"redis dispatcher death declare failed: {e}") from e

    async def is_dead(self, incarnation: str) -> bool:
        try:
            return bool(await self._r.exists(schema.dead_dispatcher_key(incarnation)))
        except RedisError as e:
            raise CacheError(f"redis dispatcher death read failed: {e}") from e
