"""``Lease``: ``MemoryLease`` (on the system clock) and ``RedisLease`` against one contract.
TTL tests shrink the lease to a few hundred ms; the rest use the default 10 s."""

from __future__ import annotations

import asyncio

import pytest

from trigger_service.core.ports import Lease

A, B = "sweeper-a", "sweeper-b"
SHORT_TTL = pytest.mark.parametrize("lease_ttl_ms", [400])


async def test_acquire_once_then_others_get_none(lease: Lease) -> None:
    fence = await lease.acquire(3, A)
    assert fence is not None
    assert await lease.acquire(3, B) is None
    assert await lease.acquire(3, A) is None, "not even the holder takes it twice"
    assert await lease.acquire(4, B) is not None, "shards are independent"


async def test_fences_increase_with_every_acquisition(lease: Lease) -> None:
    fences: list[int] = []
    for owner in (A, B, A, A):
        fence = await lease.acquire(5, owner)
        assert fence is not None
        fences.append(fence)
        await lease.release(5, fence, owner)
    assert fences == sorted(set(fences)), fences


@SHORT_TTL
async def test_renew_extends_only_the_leases_still_held(lease: Lease) -> None:
    mine = {s: await lease.acquire(s, A) for s in (1, 2)}
    theirs = await lease.acquire(3, B)
    assert None not in mine.values() and theirs is not None
    held = {s: f for s, f in mine.items() if f is not None}
    assert await lease.renew({**held, 3: theirs}, A) == {1, 2}
    assert await lease.renew({1: held[1] + 1}, A) == set(), "a wrong fence is not renewed"
    assert await lease.renew({}, A) == set()
    await asyncio.sleep(0.25)
    assert await lease.renew(held, A) == {1, 2}
    await asyncio.sleep(0.25)  # past the first TTL, within the renewed one
    assert await lease.held(held, A) == {1, 2}
    assert await lease.held({3: theirs}, B) == set(), "B never renewed"
    await asyncio.sleep(0.4)
    assert await lease.renew(held, A) == set(), "an expired lease is not renewed"


@SHORT_TTL
async def test_held_is_the_fencing_check(lease: Lease) -> None:
    fence_a = await lease.acquire(7, A)
    assert fence_a is not None
    assert await lease.held({7: fence_a}, A) == {7}
    assert await lease.held({7: fence_a + 1}, A) == set()
    assert await lease.held({7: fence_a}, B) == set()
    assert await lease.held({}, A) == set()
    await asyncio.sleep(0.5)
    assert await lease.held({7: fence_a}, A) == set(), "expired"
    fence_b = await lease.acquire(7, B)
    assert fence_b is not None and fence_b > fence_a
    assert await lease.held({7: fence_a}, A) == set()
    assert await lease.renew({7: fence_a}, A) == set()
    assert await lease.held({7: fence_b}, B) == {7}


async def test_release_only_by_the_holder(lease: Lease) -> None:
    fence = await lease.acquire(9, A)
    assert fence is not None
    await lease.release(9, fence, B)
    await lease.release(9, fence + 1, A)
    assert await lease.held({9: fence}, A) == {9}
    assert await lease.acquire(9, B) is None
    await lease.release(9, fence, A)
    assert await lease.held({9: fence}, A) == set()
    await lease.release(9, fence, A)  # again: nothing held, no error
    assert await lease.acquire(9, B) is not None


async def test_heartbeat_counts_live_members_and_ages_out_old_ones(lease: Lease) -> None:
    now, ttl = 1_700_000_000_000, 1_000
    assert await lease.heartbeat("m1", now, ttl) == 1
    assert await lease.heartbeat("m2", now + 10, ttl) == 2
    assert await lease.heartbeat("m1", now + 500, ttl) == 2, "a member counts once"
    # m2 was last seen exactly ttl ago: gone; m1 (500 ms ago) is still alive.
    assert await lease.heartbeat("m3", now + 1_010, ttl) == 2
    await lease.leave("m1")
    await lease.leave("never-joined")
    assert await lease.heartbeat("m3", now + 1_020, ttl) == 1
