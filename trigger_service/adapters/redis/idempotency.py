"""``IdempotencyCache`` on Redis: one round trip orders the requests of a key (``SET NX GET``,
Redis 7.0 and later), then the ``done`` entry answers replays without Cassandra. The truth is
the trigger row (its id derived from the key), so losing everything here loses nothing;
errors become ``CacheError``. ``get`` reads an entry of another release's format as a miss;
``claim`` raises ``CacheError`` on one, so the caller takes the path that needs no Redis.
"""

from __future__ import annotations

import json

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.adapters.redis.pipelining import Coalescer
from trigger_service.core.errors import CacheError
from trigger_service.core.ports.idempotency import CachedKey


class RedisIdempotencyCache:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client
        # Claims and done entries of concurrent registrations (a batch create's hundreds)
        # share round trips (adapters.redis.pipelining).
        self._pipe = Coalescer(client)

    async def get(self, caller: str, idem_key: str) -> CachedKey | None:
        try:
            raw = await self._r.get(schema.redis_idem_key(caller, idem_key))
        except RedisError as e:
            raise CacheError(f"redis get failed: {e}") from e
        return _decode(raw) if raw else None

    async def claim(self, caller: str, idem_key: str, request_hash: str) -> CachedKey | None:
        value = json.dumps({schema.IDEM_STATE: schema.IDEM_STATE_PENDING,
                            schema.IDEM_HASH: request_hash})
        try:
            # NX with GET: sets only if absent, and answers the old value either way (nil
            # when absent, so nil means the marker is ours).
            raw = await self._pipe.run(lambda p: p.set(
                schema.redis_idem_key(caller, idem_key), value, nx=True, get=True,
                px=schema.IDEM_LOCK_TTL_MS))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis set nx get failed: {e}") from e
        if raw is None:
            return None
        held = _decode(raw)
        if held is None:
            raise CacheError(f"redis entry of {caller}'s key is in an unknown format")
        return held

    async def put_done(self, caller: str, idem_key: str, entry: CachedKey, ttl_ms: int) -> None:
        value = json.dumps({
            schema.IDEM_STATE: schema.IDEM_STATE_DONE, schema.IDEM_HASH: entry.request_hash,
            schema.IDEM_TRIGGER_ID: entry.trigger_id, schema.IDEM_FIRE_AT_MS: entry.fire_at_ms,
        })
        try:
            await self._pipe.run(lambda p: p.set(schema.redis_idem_key(caller, idem_key), value,
                                                 px=max(1, ttl_ms)))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis set failed: {e}") from e

    async def release(self, caller: str, idem_key: str) -> None:
        try:
            await self._r.delete(schema.redis_idem_key(caller, idem_key))
        except RedisError as e:
            raise CacheError(f"redis del failed: {e}") from e


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
