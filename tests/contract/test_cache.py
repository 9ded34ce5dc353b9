"""``IdempotencyCache``: ``MemoryIdempotencyCache`` (on the system clock) and
``RedisIdempotencyCache`` against one contract."""

from __future__ import annotations

import asyncio

from tests.contract.support import unique
from trigger_service.core.ports.idempotency import CachedKey, IdempotencyCache

FIRE_AT_MS = 1_924_992_000_000


async def test_claim_is_taken_once_and_answers_what_it_found(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    assert await cache.get(caller, key) is None
    assert await cache.claim(caller, key, "hash-1") is None, "nothing there: ours"
    pending = CachedKey(done=False, request_hash="hash-1")
    assert await cache.claim(caller, key, "hash-2") == pending, "the owner's marker, unchanged"
    assert await cache.get(caller, key) == pending
    assert await cache.claim(caller, unique("key-"), "hash-1") is None, "another key is free"
    assert await cache.claim(unique("caller-"), key, "hash-1") is None, \
        "another caller's key is free"


async def test_concurrent_claims_have_one_owner(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    got = await asyncio.gather(*(cache.claim(caller, key, f"hash-{i}") for i in range(20)))
    owners = [i for i, held in enumerate(got) if held is None]
    assert len(owners) == 1
    mine = CachedKey(done=False, request_hash=f"hash-{owners[0]}")
    assert all(held == mine for held in got if held is not None)


async def test_put_done_then_get_and_claim_answer_the_outcome(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    assert await cache.claim(caller, key, "hash-1") is None
    done = CachedKey(done=True, request_hash="hash-1", trigger_id="trg_x", fire_at_ms=FIRE_AT_MS)
    await cache.put_done(caller, key, done, 60_000)
    assert await cache.get(caller, key) == done
    assert await cache.claim(caller, key, "hash-1") == done, "a finished key is not taken again"
    assert await cache.get(caller, key) == done
    other = unique("key-")
    await cache.put_done(caller, other, done, 60_000)  # without a claim first
    assert await cache.get(caller, other) == done


async def test_release_gives_the_key_back(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    assert await cache.claim(caller, key, "hash-1") is None
    await cache.release(caller, key)
    assert await cache.get(caller, key) is None
    assert await cache.claim(caller, key, "hash-2") is None, "free again"
    await cache.release(caller, unique("key-"))  # nothing there: fine


async def test_put_done_expires_after_its_ttl(cache: IdempotencyCache) -> None:
    caller, key = unique("caller-"), unique("key-")
    done = CachedKey(done=True, request_hash="h", trigger_id="trg_y", fire_at_ms=FIRE_AT_MS)
    await cache.put_done(caller, key, done, 200)
    assert await cache.get(caller, key) == done
    await asyncio.sleep(0.35)
    assert await cache.get(caller, key) is None
    assert await cache.claim(caller, key, "h") is None, "an expired key can be claimed again"
