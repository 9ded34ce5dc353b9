"""The one Redis client a process opens (redis.asyncio), shared by the cache and the lease."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.core.errors import CacheError

_TIMEOUT_S = 2


def open_client(url: str) -> aioredis.Redis:
    """A lazily connecting client: nothing is sent until the first command."""
    client: aioredis.Redis = aioredis.Redis.from_url(
        url, socket_timeout=_TIMEOUT_S, socket_connect_timeout=_TIMEOUT_S,
        decode_responses=True)
    return client


class RedisPing:
    """``Pingable`` for readiness checks."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    async def ping(self) -> None:
        try:
            await self._r.ping()
        except (RedisError, OSError) as e:
            raise CacheError(f"redis unreachable: {e}") from e
