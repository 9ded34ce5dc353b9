"""``FlowLimiter`` and ``FlowBoard`` on Redis (keys in ``adapters.schema``): one Lua script
each for the reservation and the admission, so every dispatcher shares one schedule and one
semaphore per key of a caller (``core.flow.FlowScope``) and each check-and-take is atomic.
Times are the callers' (the injected clock; dispatchers' clocks are kept in step by NTP, as
claims already require). Redis errors become ``CacheError`` (the dispatcher then fails
open)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.adapters.redis.pipelining import Coalescer
from trigger_service.core.errors import CacheError
from trigger_service.core.flow import FlowScope
from trigger_service.core.ports.flow import Admission, FlowView

# A member's slot is remembered this long after its start; every key lives this long after
# its last slot or lease.
KEEP_MS = 600_000

# The admission (``_ADMIT``) never counts a start before one already counted: an ask whose
# time is behind the latest start (asks from several processes, or pipelines, arrive out of
# order) waits until that start, so each admission sees every earlier start in its window
# (a later ask's trim had dropped starts an earlier one still needed: 21 in one second).
# KEYS: runs zset (member: start as text, score: start), run ends hash (member → end),
# reserved zset (member → start ms). ARGV: member, at ms, width ms, now ms, keep ms.
# Runs are the reserved slots laid end to end (a herd is one run): the earliest gap at or
# after ``at`` as wide as a slot is found in O(log n) per run skipped (core.flow.earliest_gap).
_RESERVE = """
local now = tonumber(ARGV[4])
local keep = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - keep)
local known = redis.call('ZSCORE', KEYS[3], ARGV[1])
if known then return tonumber(known) end
local eps = 1e-6
local w = tonumber(ARGV[3])
local function end_of(m) return tonumber(redis.call('HGET', KEYS[2], m)) end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 64)) do
  local e = end_of(m)
  if e == nil or e <= now then
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
  end
end
local t = math.max(tonumber(ARGV[2]), now)
local prev = redis.call('ZREVRANGEBYSCORE', KEYS[1], t, '-inf', 'LIMIT', 0, 1)[1]
if prev and end_of(prev) > t + eps then t = end_of(prev) end
while true do
  local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], t, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if not nxt[1] or tonumber(nxt[2]) >= t + w - eps then break end
  t = end_of(nxt[1])
end
local start, finish = t, t + w
local left = redis.call('ZREVRANGEBYSCORE', KEYS[1], t, '-inf', 'LIMIT', 0, 1)[1]
local right = redis.call('ZRANGEBYSCORE', KEYS[1], finish - eps, finish + eps, 'LIMIT', 0, 1)[1]
if right then
  finish = end_of(right)
  redis.call('ZREM', KEYS[1], right)
  redis.call('HDEL', KEYS[2], right)
end
if left and math.abs(end_of(left) - t) < eps then
  redis.call('HSET', KEYS[2], left, string.format('%.6f', finish))
else
  local m = string.format('%.6f', start)
  redis.call('ZADD', KEYS[1], start, m)
  redis.call('HSET', KEYS[2], m, string.format('%.6f', finish))
end
local slot = math.ceil(t - eps)
redis.call('ZADD', KEYS[3], slot, ARGV[1])
local ttl = math.ceil(finish - now + keep)
for i = 1, 3 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return slot
"""
# KEYS: leases zset (holder → until ms), starts zset (holder → admitted at ms).
# ARGV: holder, now ms, lease ms, parallelism (0: none), count (0: no rate), window ms.
# Returns {verdict (core.ports.flow.Admission), ms to wait}.
_ADMIT = """
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, 0} end
local p = tonumber(ARGV[4])
if p > 0 and redis.call('ZCARD', KEYS[1]) >= p then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {2, math.max(1, tonumber(first[2]) - now)}
end
local count = tonumber(ARGV[5])
local window = tonumber(ARGV[6])
if count > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) > now then
    return {3, math.max(1, tonumber(last[2]) - now)}
  end
  if redis.call('ZCARD', KEYS[2]) >= count then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {3, math.max(1, tonumber(oldest[2]) + window - now)}
  end
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[2], window + 1000)
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, 0}
"""


def _key(scope: FlowScope, part: str) -> str:
    return schema.flow_key(scope.caller, scope.key, scope.default, part)


class RedisFlowLimiter:
    """Shares the process's Redis client (not closed here)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client
        self._reserve = client.register_script(_RESERVE)
        self._admit = client.register_script(_ADMIT)
        # A herd's reservations and admissions (hundreds at once) share round trips and a pool
        # connection: one pipeline of scripts per turn of the loop (adapters.redis.pipelining).
        self._pipe = Coalescer(client)

    def _reserve_in(self, pipe: Pipeline, keys: list[str], args: list[object]) -> None:
        pipe.scripts.add(self._reserve)  # type: ignore[arg-type]  # loaded if Redis lacks it
        pipe.evalsha(self._reserve.sha, len(keys), *keys, *args)  # type: ignore[arg-type]

    async def reserve(self, scope: FlowScope, member: str, at_ms: int, width_ms: float,
                      now_ms: int) -> int:
        keys = [_key(scope, "runs"), _key(scope, "ends"), _key(scope, "reserved")]
        args: list[object] = [member, at_ms, repr(width_ms), now_ms, KEEP_MS]
        try:
            start = await self._pipe.run(lambda p: self._reserve_in(p, keys, args))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis flow reserve failed: {e}") from e
        return int(start)

    async def admit(self, scope: FlowScope, holder: str, now_ms: int, lease_ms: int,
                    parallelism: int | None, window: tuple[int, int] | None
                    ) -> tuple[Admission, int]:
        count, window_ms = window or (0, 0)
        keys = [_key(scope, "leases"), _key(scope, "starts")]
        args = [holder, now_ms, lease_ms, parallelism or 0, count, window_ms]

        def add(pipe: Pipeline) -> None:
            pipe.scripts.add(self._admit)  # type: ignore[arg-type]
            pipe.evalsha(self._admit.sha, len(keys), *keys, *args)  # type: ignore[arg-type]

        try:
            verdict, wait_ms = await self._pipe.run(add)
        except (RedisError, OSError) as e:
            raise CacheError(f"redis flow admit failed: {e}") from e
        return Admission(int(verdict)), int(wait_ms)

    async def release(self, scope: FlowScope, holder: str) -> None:
        try:
            # In the turn's pipeline with the admissions: a herd's sends end together.
            await self._pipe.run(lambda p: p.zrem(_key(scope, "leases"), holder))
        except (RedisError, OSError) as e:
            raise CacheError(f"redis flow release failed: {e}") from e


def _board_field(source: str, v: FlowView) -> str:
    return f"{source}|{schema.flow_scope_name(v.caller, v.key, v.default)}"


class RedisFlowBoard:
    def __init__(self, client: aioredis.Redis, namespace: str) -> None:
        self._r = client
        self._ns = namespace

    async def publish_flow(self, source: str, views: Sequence[FlowView], now_ms: int,
                           ttl_s: int) -> None:
        if not views:
            return
        key = schema.ops_flow_key(self._ns)
        fields = {_board_field(source, v): json.dumps(
            {"key": v.key, "caller": v.caller, "default": v.default,
             "rate": v.rate_per_second, "parallelism": v.parallelism,
             "open": v.open_now, "p50": v.delay_p50_s, "max": v.delay_max_s,
             "recent": v.recent, "expiresAtMs": now_ms + ttl_s * 1000}) for v in views}
        try:
            async with self._r.pipeline(transaction=False) as p:
                p.hset(key, mapping=fields)
                p.expire(key, ttl_s)
                await p.execute()
        except (RedisError, OSError) as e:
            raise CacheError(f"redis flow publish failed: {e}") from e

    async def read_flow(self, now_ms: int) -> list[FlowView]:
        key = schema.ops_flow_key(self._ns)
        try:
            raw: dict[str, str] = await self._r.hgetall(key)  # type: ignore[misc]
        except (RedisError, OSError) as e:
            raise CacheError(f"redis flow read failed: {e}") from e
        live, expired = [], []
        for field, value in raw.items():
            try:
                entry = json.loads(value)
                view = FlowView(str(entry["key"]), entry["rate"], entry["parallelism"],
                                int(entry["open"]), float(entry["p50"]), float(entry["max"]),
                                int(entry["recent"]), field.partition("|")[0],
                                str(entry.get("caller", "")), bool(entry.get("default")))
                alive = int(entry["expiresAtMs"]) > now_ms
            except (ValueError, KeyError, TypeError):
                expired.append(field)  # not ours to read (another release's format)
                continue
            (live.append(view) if alive else expired.append(field))
        if expired:
            try:
                await self._r.hdel(key, *expired)  # type: ignore[misc]
            except (RedisError, OSError):
                pass  # only tidying: the next read tries again
        return live
