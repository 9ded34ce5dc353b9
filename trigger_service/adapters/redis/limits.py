"""``RateLimiter``, ``PendingQuota``, ``StreamSlots`` and ``SendBudget`` on Redis, each one
Lua script, so every process shares one bucket and one count per caller and a check-and-take
is atomic.

The bucket's clock is Redis' own (``TIME``), not the API hosts': hosts whose clocks differ
still refill one bucket consistently. Redis errors become ``CacheError`` (the API then fails
open).
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.adapters.redis.pipelining import Coalescer
from trigger_service.core.errors import CacheError
from trigger_service.core.ports.limit import BucketRule, Decision

# KEYS[1] bucket hash {tokens, ms}; ARGV: rate per second, burst, key TTL in ms, how many
# tokens are wanted. Returns {taken, ms until the next whole token (0 when all were taken)}.
# Same arithmetic as core.ports.limit.take_tokens (and take_token: one wanted).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local wanted = tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ms')
local tokens = tonumber(state[1])
local last = tonumber(state[2])
if tokens == nil or last == nil then tokens = burst; last = now end
local elapsed = now - last
if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate / 1000)
local taken = math.max(0, math.min(wanted, math.floor(tokens)))
tokens = tokens - taken
local wait = 0
if taken < wanted then wait = math.ceil((1 - tokens) * 1000 / rate) end
if now > last then last = now end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ms', last)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {taken, wait}
"""
# KEYS[1] sorted set trigger id → until ms; ARGV: trigger id, until ms, max, now ms.
_RESERVE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
"""
# KEYS[1] integer: recipients counted that day; ARGV: budget, TTL in s, recipients of this
# send. Returns 1 if counted (all of them), 0 if they would pass the budget (none counted).
_TAKE_SEND = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local count = tonumber(ARGV[3])
if n + count > tonumber(ARGV[1]) then return 0 end
redis.call('INCRBY', KEYS[1], count)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
# A day's count outlives the day by one: a host whose clock is a little behind still finds it.
BUDGET_TTL_S = 2 * 86_400

# KEYS[1] sorted set slot → until ms; ARGV: slot, until ms, cap, now ms, key TTL ms.
# Returns -1 when held, else the earliest until ms of the held slots.
_TAKE_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return -1
"""


class RedisRateLimiter:
    """Shares the process's Redis client (not closed here)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._take = client.register_script(_TAKE)

    async def take(self, key: str, rule: BucketRule) -> Decision:
        taken, wait_ms = await self._take_tokens(key, rule, 1)
        return Decision(taken == 1, wait_ms)

    async def take_up_to(self, key: str, rule: BucketRule, count: int) -> int:
        return (await self._take_tokens(key, rule, count))[0]

    async def _take_tokens(self, key: str, rule: BucketRule, count: int) -> tuple[int, int]:
        # The bucket may be forgotten once it would be full again anyway.
        ttl_ms = int(rule.burst / rule.rate_per_s * 1000) + 1000
        try:
            taken, wait_ms = await self._take(keys=[schema.rate_bucket_key(key)],
                                              args=[rule.rate_per_s, rule.burst, ttl_ms, count])
        except (RedisError, OSError) as e:
            raise CacheError(f"redis rate limit failed: {e}") from e
        return int(taken), int(wait_ms)


class RedisPendingQuota:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client
        self._reserve = client.register_script(_RESERVE)
        # A batch create's reservations (one per item, all at once) share round trips: one
        # pipeline of scripts per turn of the loop (adapters.redis.pipelining).
        self._pipe = Coalescer(client)

    def _reserve_in(self, pipe: Pipeline, key: str, args: list[str]) -> None:
        pipe.scripts.add(self._reserve)  # type: ignore[arg-type]  # loaded if Redis lacks it
        pipe.evalsha(self._reserve.sha, 1, key, *args)

    async def reserve(self, caller: str, trigger_id: str, until_ms: int, max_pending: int,
                      now_ms: int) -> bool:
        args = [trigger_id, str(until_ms), str(max_pending), str(now_ms)]
        try:
            ok = await self._pipe.run(
                lambda p: self._reserve_in(p, schema.pending_key(caller), args))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis quota reserve failed: {e}") from e
        return bool(ok)

    async def release(self, caller: str, trigger_id: str) -> None:
        try:
            await self._r.zrem(schema.pending_key(caller), trigger_id)
        except (RedisError, OSError) as e:
            raise CacheError(f"redis quota release failed: {e}") from e


class RedisStreamSlots:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client
        self._take = client.register_script(_TAKE_SLOT)

    async def take(self, caller: str, slot: str, until_ms: int, cap: int,
                   now_ms: int) -> int | None:
        try:
            first = await self._take(keys=[schema.STREAM_SLOTS_KEY.format(caller=caller)],
                                     args=[slot, until_ms, cap, now_ms, until_ms - now_ms])
        except (RedisError, OSError) as e:
            raise CacheError(f"redis stream slot failed: {e}") from e
        return None if int(first) < 0 else int(first)

    async def give_back(self, caller: str, slot: str) -> None:
        try:
            await self._r.zrem(schema.STREAM_SLOTS_KEY.format(caller=caller), slot)
        except (RedisError, OSError) as e:
            raise CacheError(f"redis stream slot give-back failed: {e}") from e


class RedisSendBudget:
    def __init__(self, client: aioredis.Redis) -> None:
        self._take = client.register_script(_TAKE_SEND)
        # A herd's sends (an occurrence's channels at once, occurrences due together) and a
        # batch create's budget reads share round trips: one pipeline per turn of the loop.
        self._pipe = Coalescer(client)

    def _take_in(self, pipe: Pipeline, key: str, args: list[object]) -> None:
        pipe.scripts.add(self._take)  # type: ignore[arg-type]  # loaded if Redis lacks it
        pipe.evalsha(self._take.sha, 1, key, *args)  # type: ignore[arg-type]

    async def spent(self, caller: str, channel: str, day: str) -> int:
        key = schema.budget_key(caller, channel, day)
        try:
            raw = await self._pipe.run(lambda p: p.get(key))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis budget read failed: {e}") from e
        return int(raw or 0)

    async def take(self, caller: str, channel: str, day: str, budget: int,
                   count: int = 1) -> bool:
        key = schema.budget_key(caller, channel, day)
        args: list[object] = [budget, BUDGET_TTL_S, count]
        try:
            ok = await self._pipe.run(lambda p: self._take_in(p, key, args))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis budget take failed: {e}") from e
        return bool(ok)
