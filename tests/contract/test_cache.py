"""``IdempotencyCache``: ``MemoryIdempotencyCache`` (on the system clock) and
``RedisIdempotencyCache`` against one contract."""

from __future__ import annotations

import asyncio

from tests.contract.support import unique
from trigger_service.core.ports import CachedKey, IdempotencyCache

FIRE_AT_MS = 1_924_992_000_000


async def test_lock_is_set_once_and_reads_as_in_progress(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    assert await cache.get(caller, key) is None
    assert await cache.lock(caller, key, "hash-1")
    assert not await cache.lock(caller, key, "hash-2")
    assert await cache.get(caller, key) == CachedKey(done=False, request_hash="hash-1")
    assert await cache.lock(caller, unique("key-"), "hash-1"), "another key is free"
    assert await cache.lock(unique("caller-"), key, "hash-1"), "another caller's key is free"


async def test_put_done_then_get_returns_the_outcome(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    assert await cache.lock(caller, key, "hash-1")
    done = CachedKey(done=True, request_hash="hash-1", trigger_id="trg_x", fire_at_ms=FIRE_AT_MS)
    await cache.put_done(caller, key, done, 60_000)
    assert await cache.get(caller, key) == done
    assert not await cache.lock(caller, key, "hash-1"), "a finished key is not taken again"
    other = unique("key-")
    await cache.put_done(caller, other, done, 60_000)  # without a lock first
    assert await cache.get(caller, other) == done


async def test_put_done_expires_after_its_ttl(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    done = CachedKey(done=True, request_hash="h", trigger_id="trg_y", fire_at_ms=FIRE_AT_MS)
    await cache.put_done(caller, key, done, 200)
    assert await cache.get(caller, key) == done
    await asyncio.sleep(0.35)
    assert await cache.get(caller, key) is None
    assert await cache.lock(caller, key, "h"), "an expired key can be locked again"
