"""``IdempotencyCache`` on Redis (redis.asyncio): the fast path in front of Cassandra's
``idempotency`` table. Losing everything here loses nothing; errors become ``CacheError``.
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service import schema
from trigger_service.errors import CacheError


class RedisIdempotencyCache:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    @classmethod
    def from_url(cls, url: str) -> RedisIdempotencyCache:
        return cls(aioredis.Redis.from_url(
            url, socket_timeout=2, socket_connect_timeout=2, decode_responses=True))

    async def close(self) -> None:
        await self._r.aclose()

    async def get(self, caller: str, idem_key: str) -> dict[str, Any] | None:
        try:
            raw = await self._r.get(schema.redis_idem_key(caller, idem_key))
        except RedisError as e:
            raise CacheError(f"redis get failed: {e}") from e
        return json.loads(raw) if raw else None

    async def lock(self, caller: str, idem_key: str, request_hash: str) -> bool:
        value = json.dumps({"state": "pending", "hash": request_hash})
        try:
            return bool(await self._r.set(
                schema.redis_idem_key(caller, idem_key), value,
                nx=True, px=schema.IDEM_LOCK_TTL_MS))
        except RedisError as e:
            raise CacheError(f"redis set nx failed: {e}") from e

    async def put_done(
        self, caller: str, idem_key: str, request_hash: str, response_json: str, ttl_ms: int
    ) -> None:
        value = json.dumps({"state": "done", "hash": request_hash, "response": response_json})
        try:
            await self._r.set(schema.redis_idem_key(caller, idem_key), value, px=max(1, ttl_ms))
        except RedisError as e:
            raise CacheError(f"redis set failed: {e}") from e

    async def ping(self) -> None:
        try:
            await self._r.ping()
        except (RedisError, OSError) as e:
            raise CacheError(f"redis unreachable: {e}") from e

    async def flush_for_tests(self) -> None:
        await self._r.flushdb()
