"""``OpsBoard`` on Redis (keys in ``adapters.schema``): what dispatchers publish for the ops
page. Errors become ``CacheError``; an entry that cannot be read is skipped."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.core.errors import CacheError
from trigger_service.core.ports.ops import BreakerView
from trigger_service.core.time.lag import BUCKETS


class RedisOpsBoard:
    def __init__(self, client: aioredis.Redis, namespace: str) -> None:
        self._r = client
        self._ns = namespace

    async def publish_breakers(self, source: str, breakers: Sequence[BreakerView],
                               now_ms: int, ttl_s: int,
                               dropped: Sequence[tuple[str, str]] = ()) -> None:
        if not breakers and not dropped:
            return
        key = schema.ops_breakers_key(self._ns)
        fields = {schema.ops_breaker_field(source, b.caller, b.origin): json.dumps(
            {"state": b.state, "changedAtMs": b.changed_at_ms,
             "expiresAtMs": now_ms + ttl_s * 1000}) for b in breakers}
        try:
            async with self._r.pipeline(transaction=False) as p:
                if dropped:
                    p.hdel(key, *(schema.ops_breaker_field(source, caller, origin)
                                  for caller, origin in dropped))
                if fields:
                    p.hset(key, mapping=fields)
                    p.expire(key, ttl_s)
                await p.execute()
        except RedisError as e:
            raise CacheError(f"redis breaker publish failed: {e}") from e

    async def read_breakers(self, now_ms: int) -> list[BreakerView]:
        key = schema.ops_breakers_key(self._ns)
        try:
            raw: dict[str, str] = await self._r.hgetall(key)  # type: ignore[misc]
        except RedisError as e:
            raise CacheError(f"redis breaker read failed: {e}") from e
        live, expired = [], []
        for field, value in raw.items():
            source, _, rest = field.partition("|")
            caller, _, origin = rest.partition("|")
            try:
                if not origin:
                    raise ValueError(field)  # an earlier release's field: no caller
                entry = json.loads(value)
                view = BreakerView(origin, str(entry["state"]), int(entry["changedAtMs"]),
                                   source, caller)
                expires_at_ms = int(entry["expiresAtMs"])
            except (ValueError, KeyError, TypeError):
                expired.append(field)  # not ours to read (another release's format)
                continue
            (live.append(view) if expires_at_ms > now_ms else expired.append(field))
        if expired:
            try:
                await self._r.hdel(key, *expired)  # type: ignore[misc]
            except RedisError:
                pass  # only tidying: the next read tries again
        return live

    async def add_lag(self, slots: dict[int, list[int]]) -> None:
        try:
            async with self._r.pipeline(transaction=False) as p:
                for slot, counts in slots.items():
                    key = schema.ops_lag_key(self._ns, slot)
                    for bucket, n in enumerate(counts):
                        if n:
                            p.hincrby(key, str(bucket), n)
                    p.expire(key, schema.OPS_LAG_TTL_S)
                await p.execute()
        except RedisError as e:
            raise CacheError(f"redis lag publish failed: {e}") from e

    async def read_lag(self, slots: Sequence[int]) -> list[int]:
        try:
            async with self._r.pipeline(transaction=False) as p:
                for slot in slots:
                    p.hgetall(schema.ops_lag_key(self._ns, slot))
                results: list[dict[str, str]] = await p.execute()
        except RedisError as e:
            raise CacheError(f"redis lag read failed: {e}") from e
        counts = [0] * BUCKETS
        for result in results:
            for bucket, n in result.items():
                if bucket.isdigit() and int(bucket) < BUCKETS:
                    counts[int(bucket)] += int(n)
        return counts
