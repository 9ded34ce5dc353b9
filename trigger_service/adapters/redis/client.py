"""The Redis clients a process opens (redis.asyncio): one bounded command pool, shared by the
cache, the lease, the limits and publishes; the API's inbox subscription has its own
(``inbox_bus``)."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.core.errors import CacheError

_TIMEOUT_S = 2


def open_client(url: str, max_connections: int = 64,
                client_name: str | None = None) -> aioredis.Redis:
    """A lazily connecting client: nothing is sent until the first command. Its pool holds
    at most ``max_connections``; a command finding them all busy waits up to 2 s for one,
    then fails (``ConnectionError``, a ``RedisError``), so a burst cannot open connections
    without bound. ``client_name``: its connections' name in Redis's CLIENT LIST. Closing the
    client closes its pool."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=_TIMEOUT_S, socket_timeout=_TIMEOUT_S,
        socket_connect_timeout=_TIMEOUT_S, decode_responses=True, client_name=client_name)
    client: aioredis.Redis = aioredis.Redis.from_pool(pool)
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
