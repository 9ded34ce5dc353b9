"""The token bucket's arithmetic (shared by the fake and the Lua script) on a manual clock,
and the pending quota's fake."""

from __future__ import annotations

import pytest

from trigger_service.adapters.memory.limits import MemoryPendingQuota, MemoryRateLimiter
from trigger_service.core.errors import CacheError
from trigger_service.core.ports.limit import BucketRule, Decision, take_token, take_tokens
from trigger_service.core.time.clock import ManualClock

RULE = BucketRule(rate_per_s=2.0, burst=3)


async def test_a_full_bucket_allows_burst_requests_then_refuses_until_a_token_is_back() -> None:
    clock = ManualClock()
    limiter = MemoryRateLimiter(clock)
    assert [(await limiter.take("a", RULE)).allowed for _ in range(3)] == [True] * 3
    refused = await limiter.take("a", RULE)
    assert refused == Decision(False, 500)  # 2 per second: one token every 500 ms
    assert refused.retry_after_s == 1
    clock.advance_ms(499)
    assert not (await limiter.take("a", RULE)).allowed
    clock.advance_ms(1)
    assert (await limiter.take("a", RULE)).allowed
    assert not (await limiter.take("a", RULE)).allowed


async def test_buckets_are_per_key_and_refill_no_further_than_the_burst() -> None:
    clock = ManualClock()
    limiter = MemoryRateLimiter(clock)
    for _ in range(3):
        await limiter.take("a", RULE)
    assert (await limiter.take("b", RULE)).allowed  # b has its own bucket
    clock.advance_ms(3_600_000)
    assert [(await limiter.take("a", RULE)).allowed for _ in range(4)] == [True] * 3 + [False]


def test_retry_after_rounds_up_to_whole_seconds() -> None:
    slow = BucketRule(rate_per_s=0.1, burst=1)
    decision, left = take_token(0.0, 0, 0, slow)
    assert not decision.allowed and decision.retry_after_ms == 10_000
    assert decision.retry_after_s == 10 and left == 0.0
    assert take_token(0.95, 0, 0, slow)[0].retry_after_s == 1  # 500 ms → 1 s
    assert Decision(False, 1001).retry_after_s == 2
    assert Decision(True).retry_after_s == 0


def test_a_clock_that_goes_backwards_refills_nothing() -> None:
    decision, left = take_token(0.5, 10_000, 9_000, RULE)
    assert not decision.allowed and left == 0.5


async def test_the_fake_can_fail_like_redis() -> None:
    limiter = MemoryRateLimiter(ManualClock())
    limiter.fail = True
    with pytest.raises(CacheError):
        await limiter.take("a", RULE)


async def test_the_quota_counts_until_the_fire_time_and_forgets_released_ones() -> None:
    quota = MemoryPendingQuota()
    assert await quota.reserve("c", "t1", 1_000, 2, now_ms=0)
    assert await quota.reserve("c", "t2", 5_000, 2, now_ms=0)
    assert await quota.reserve("c", "t2", 5_000, 2, now_ms=0)  # already counted: still True
    assert not await quota.reserve("c", "t3", 5_000, 2, now_ms=0)
    assert await quota.reserve("other", "t3", 5_000, 2, now_ms=0)  # per caller
    assert await quota.reserve("c", "t3", 5_000, 2, now_ms=1_000)  # t1 fired: not counted
    await quota.release("c", "t2")
    await quota.release("c", "t2")  # idempotent
    assert await quota.reserve("c", "t4", 5_000, 2, now_ms=1_000)
    assert set(quota.counted["c"]) == {"t3", "t4"}


async def test_take_up_to_takes_what_the_bucket_holds_and_refills_as_one_take() -> None:
    clock = ManualClock()
    limiter = MemoryRateLimiter(clock)
    assert await limiter.take_up_to("a", RULE, 2) == 2
    assert await limiter.take_up_to("a", RULE, 5) == 1  # 3 in the bucket
    assert await limiter.take_up_to("a", RULE, 5) == 0
    assert not (await limiter.take("a", RULE)).allowed
    clock.advance_ms(1_000)  # 2 tokens back
    assert await limiter.take_up_to("a", RULE, 5) == 2
    assert take_tokens(2.5, 0, 0, RULE, 1) == (1, 1.5)
    assert take_tokens(0.5, 0, 250, RULE, 3) == (1, 0.0)  # refilled to 1.0 first
