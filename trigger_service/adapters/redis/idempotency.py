"""``IdempotencyCache`` on Redis: the fast path in front of Cassandra's ``idempotency`` table.
Losing everything here loses nothing; errors become ``CacheError``, and an entry that cannot
be read (another release's format) is a miss."""

from __future__ import annotations

import json

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.core.errors import CacheError
from trigger_service.core.ports import CachedKey


class RedisIdempotencyCache:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    async def get(self, caller: str, idem_key: str) -> CachedKey | None:
        try:
            raw = await self._r.get(schema.redis_idem_key(caller, idem_key))
        except RedisError as e:
            raise CacheError(f"redis get failed: {e}") from e
        return _decode(raw) if raw else None

    async def lock(self, caller: str, idem_key: str, request_hash: str) -> bool:
        value = json.dumps({schema.IDEM_STATE: schema.IDEM_STATE_PENDING,
                            schema.IDEM_HASH: request_hash})
        try:
            return bool(await self._r.set(
                schema.redis_idem_key(caller, idem_key), value,
                nx=True, px=schema.IDEM_LOCK_TTL_MS))
        except RedisError as e:
            raise CacheError(f"redis set nx failed: {e}") from e

    async def put_done(self, caller: str, idem_key: str, entry: CachedKey, ttl_ms: int) -> None:
        value = json.dumps({
            schema.IDEM_STATE: schema.IDEM_STATE_DONE, schema.IDEM_HASH: entry.request_hash,
            schema.IDEM_TRIGGER_ID: entry.trigger_id, schema.IDEM_FIRE_AT_MS: entry.fire_at_ms,
        })
        try:
            await self._r.set(schema.redis_idem_key(caller, idem_key), value, px=max(1, ttl_ms))
        except RedisError as e:
            raise CacheError(f"redis set failed: {e}") from e


def _decode(raw: str) -> CachedKey | None:
    try:
        d = json.loads(raw)
        if d[schema.IDEM_STATE] == schema.IDEM_STATE_PENDING:
            return CachedKey(done=False, request_hash=str(d[schema.IDEM_HASH]))
        return CachedKey(done=True, request_hash=str(d[schema.IDEM_HASH]),
                         trigger_id=str(d[schema.IDEM_TRIGGER_ID]),
                         fire_at_ms=int(d[schema.IDEM_FIRE_AT_MS]))
    except (ValueError, KeyError, TypeError):
        return None
