"""``Lease`` on Redis: one owner per shard, with a fencing token.

Acquire is one Lua script (SET NX PX + INCR of the fence, atomically), renew and release only
act while the caller still holds the exact ``{owner}:{fence}`` value, and ``held`` reads all
leases of interest in one MGET: the sweeper calls it right before each promotion. Redis
errors become ``CacheError``; a sweeper that cannot reach Redis stops promoting (it can no
longer prove ownership) and the reconciler covers the gap.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.core.errors import CacheError

_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLease:
    """``Lease`` for one sweeper group; shares the process's Redis client (not closed here)."""

    def __init__(self, client: aioredis.Redis, ttl_ms: int, group: str) -> None:
        self._r = client
        self._group = group
        self._ttl_ms = ttl_ms
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    async def acquire(self, shard: int, owner: str) -> int | None:
        """Take the shard if nobody holds it; returns the new fencing token, else None."""
        try:
            fence = await self._acquire(
                keys=[schema.lease_key(self._group, shard),
                      schema.fence_key(self._group, shard)],
                args=[owner, self._ttl_ms])
        except RedisError as e:
            raise CacheError(f"redis lease acquire failed: {e}") from e
        return int(fence) if fence else None

    async def renew(self, leases: dict[int, int], owner: str) -> set[int]:
        """Extend every held lease (shard → fence); return the shards still held."""
        try:
            async with self._r.pipeline(transaction=False) as pipe:
                for shard, fence in leases.items():
                    await self._renew(keys=[schema.lease_key(self._group, shard)],
                                      args=[schema.lease_value(owner, fence), self._ttl_ms],
                                      client=pipe)
                results = await pipe.execute()
        except RedisError as e:
            raise CacheError(f"redis lease renew failed: {e}") from e
        return {shard for shard, ok in zip(leases, results, strict=True) if ok}

    async def held(self, leases: dict[int, int], owner: str) -> set[int]:
        """The fencing check: which of these (shard → fence) are still ours, right now."""
        shards = list(leases)
        if not shards:
            return set()
        try:
            values = await self._r.mget([schema.lease_key(self._group, s) for s in shards])
        except RedisError as e:
            raise CacheError(f"redis lease check failed: {e}") from e
        return {s for s, v in zip(shards, values, strict=True)
                if v == schema.lease_value(owner, leases[s])}

    async def release(self, shard: int, fence: int, owner: str) -> None:
        try:
            await self._release(keys=[schema.lease_key(self._group, shard)],
                                args=[schema.lease_value(owner, fence)])
        except RedisError as e:
            raise CacheError(f"redis lease release failed: {e}") from e

    async def heartbeat(self, member: str, now_ms: int, ttl_ms: int) -> int:
        """Record this sweeper as alive; return how many sweepers are alive (it included)."""
        key = schema.sweeper_members_key(self._group)
        try:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.zadd(key, {member: now_ms})
                pipe.zremrangebyscore(key, "-inf", now_ms - ttl_ms)
                pipe.zcard(key)
                results = await pipe.execute()
        except RedisError as e:
            raise CacheError(f"redis heartbeat failed: {e}") from e
        return int(results[-1])

    async def leave(self, member: str) -> None:
        try:
            await self._r.zrem(schema.sweeper_members_key(self._group), member)
        except RedisError as e:
            raise CacheError(f"redis leave failed: {e}") from e
