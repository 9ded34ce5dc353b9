"""``RateLimiter``, ``PendingQuota``, ``StreamSlots`` and ``SendBudget``: the in-memory fakes
and the Redis scripts against one contract (real time: the Redis bucket runs on Redis' clock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.contract.conftest import REDIS_URL, _impls
from tests.contract.support import unique
from trigger_service.adapters import schema
from trigger_service.adapters.memory.limits import (
    MemoryPendingQuota,
    MemoryRateLimiter,
    MemorySendBudget,
    MemoryStreamSlots,
)
from trigger_service.adapters.redis.client import open_client
from trigger_service.adapters.redis.limits import (
    RedisPendingQuota,
    RedisRateLimiter,
    RedisSendBudget,
    RedisStreamSlots,
)
from trigger_service.core.ports.limit import (
    BucketRule,
    PendingQuota,
    RateLimiter,
    SendBudget,
    StreamSlots,
    seconds_to_next_day,
    utc_day,
)


@pytest.fixture(params=_impls("memory", "redis"))
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[RateLimiter]:
    """Buckets expire by themselves and tests use unique keys: nothing needs deleting."""
    if request.param == "memory":
        yield MemoryRateLimiter()
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisRateLimiter(client)
    finally:
        await client.aclose()


@pytest.fixture(params=_impls("memory", "redis"))
async def quota(request: pytest.FixtureRequest) -> AsyncIterator[PendingQuota]:
    if request.param == "memory":
        yield MemoryPendingQuota()
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisPendingQuota(client)
    finally:
        await client.aclose()


@pytest.fixture(params=_impls("memory", "redis"))
async def slots(request: pytest.FixtureRequest) -> AsyncIterator[StreamSlots]:
    """Keys expire with their slots and tests use unique callers: nothing needs deleting."""
    if request.param == "memory":
        yield MemoryStreamSlots()
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisStreamSlots(client)
    finally:
        await client.aclose()


@pytest.fixture(params=_impls("memory", "redis"))
async def budget(request: pytest.FixtureRequest) -> AsyncIterator[SendBudget]:
    """Counts expire by themselves and tests use unique callers: nothing needs deleting."""
    if request.param == "memory":
        yield MemorySendBudget()
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisSendBudget(client)
    finally:
        await client.aclose()


async def test_a_budget_counts_sends_up_to_its_limit_per_caller_channel_and_day(
        budget: SendBudget) -> None:
    caller = unique("budget-")
    assert await budget.spent(caller, "sms", "20261126") == 0
    assert [await budget.take(caller, "sms", "20261126", 2) for _ in range(3)] == [
        True, True, False]
    assert await budget.spent(caller, "sms", "20261126") == 2  # a refusal takes nothing
    assert await budget.take(caller, "email", "20261126", 2)  # another channel
    assert await budget.take(caller, "sms", "20261127", 2)  # another day
    assert await budget.take(unique("budget-"), "sms", "20261126", 2)  # another caller
    assert not await budget.take(caller, "push", "20261126", 0)  # a zero budget sends nothing


async def test_concurrent_takes_never_pass_the_budget(budget: SendBudget) -> None:
    caller = unique("budget-")
    taken = await asyncio.gather(*(budget.take(caller, "sms", "20261126", 5)
                                   for _ in range(20)))
    assert taken.count(True) == 5 and await budget.spent(caller, "sms", "20261126") == 5


async def test_a_send_takes_all_its_recipients_or_none(budget: SendBudget) -> None:
    caller = unique("budget-")
    assert await budget.take(caller, "email", "20261126", 5, 3)
    assert not await budget.take(caller, "email", "20261126", 5, 3)  # 2 left: none taken
    assert await budget.spent(caller, "email", "20261126") == 3
    assert await budget.take(caller, "email", "20261126", 5, 2)
    assert await budget.spent(caller, "email", "20261126") == 5
    taken = await asyncio.gather(*(budget.take(caller, "sms", "20261126", 10, 4)
                                   for _ in range(6)))
    assert taken.count(True) == 2 and await budget.spent(caller, "sms", "20261126") == 8


@pytest.mark.integration
async def test_sends_made_together_share_one_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """An occurrence's channels are sent at once, a herd's occurrences too, and a batch
    create reads its items' budgets at once: each such crowd is one pipeline to Redis per
    turn of the loop, not a round trip per send."""
    client = open_client(REDIS_URL)
    pipelines: list[object] = []
    make_pipeline = client.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        pipelines.append(None)
        return make_pipeline(*args, **kwargs)

    monkeypatch.setattr(client, "pipeline", counted)
    kinds = ("email", "sms", "push")
    try:
        budget, caller = RedisSendBudget(client), unique("budget-")
        taken = await asyncio.gather(*(budget.take(caller, k, "20261126", 10, 2)
                                       for k in kinds))
        spent = await asyncio.gather(*(budget.spent(caller, k, "20261126") for k in kinds))
    finally:
        await client.aclose()
    assert taken == [True] * 3 and spent == [2] * 3
    assert len(pipelines) == 2


def test_the_budget_day_is_utc() -> None:
    assert utc_day(1_700_000_000_000) == "20231114"  # 22:13:20Z
    assert utc_day(1_699_920_000_000) == "20231114"  # 00:00:00Z
    assert utc_day(1_699_919_999_999) == "20231113"
    assert seconds_to_next_day(1_700_000_000_000) == 6_400
    assert seconds_to_next_day(1_699_920_000_000) == 86_400
    assert seconds_to_next_day(1_699_919_999_999) == 1


async def test_a_bucket_allows_its_burst_then_refuses_until_a_token_is_back(
        limiter: RateLimiter) -> None:
    key, rule = unique("rate-"), BucketRule(rate_per_s=20.0, burst=3)
    decisions = [await limiter.take(key, rule) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert 0 < decisions[3].retry_after_ms <= 50 and decisions[3].retry_after_s == 1
    await asyncio.sleep(decisions[3].retry_after_ms / 1000 + 0.02)
    assert (await limiter.take(key, rule)).allowed
    assert (await limiter.take(unique("rate-"), rule)).allowed  # another key, its own bucket


async def test_take_up_to_takes_at_most_what_the_bucket_holds(limiter: RateLimiter) -> None:
    key, rule = unique("rate-"), BucketRule(rate_per_s=0.5, burst=5)
    assert await limiter.take_up_to(key, rule, 3) == 3
    assert await limiter.take_up_to(key, rule, 3) == 2
    assert await limiter.take_up_to(key, rule, 3) == 0
    assert not (await limiter.take(key, rule)).allowed  # one bucket for both


async def test_a_slow_rate_says_how_long_to_wait(limiter: RateLimiter) -> None:
    key, rule = unique("rate-"), BucketRule(rate_per_s=0.25, burst=1)
    assert (await limiter.take(key, rule)).allowed
    refused = await limiter.take(key, rule)
    assert not refused.allowed and 3_900 <= refused.retry_after_ms <= 4_000
    assert refused.retry_after_s == 4


async def test_the_quota_counts_until_each_entrys_time_and_releases(quota: PendingQuota) -> None:
    caller = unique("quota-")
    assert await quota.reserve(caller, "a", 1_000, 2, 0)
    assert await quota.reserve(caller, "b", 9_000, 2, 0)
    assert await quota.reserve(caller, "b", 9_000, 2, 0)  # counted already
    assert not await quota.reserve(caller, "c", 9_000, 2, 500)
    assert await quota.reserve(caller, "c", 9_000, 2, 1_000)  # "a" is due: forgotten
    await quota.release(caller, "b")
    await quota.release(caller, "b")
    assert await quota.reserve(caller, "d", 9_000, 2, 1_000)
    assert not await quota.reserve(caller, "e", 9_000, 2, 1_000)
    assert await quota.reserve(unique("quota-"), "e", 9_000, 2, 1_000)


def test_the_keys_are_tagged_per_caller() -> None:
    assert schema.rate_bucket_key("orders") == "rate:{orders}"
    assert schema.pending_key("orders") == "pending:{orders}"
    assert schema.budget_key("orders", "sms", "20261126") == "budget:{orders}:sms:20261126"


async def test_stream_slots_up_to_the_cap_then_the_earliest_end_until_one_is_back(
        slots: StreamSlots) -> None:
    caller, now_ms = unique("slots-"), 1_700_000_000_000
    assert await slots.take(caller, "a", now_ms + 60_000, 2, now_ms) is None
    assert await slots.take(caller, "b", now_ms + 30_000, 2, now_ms) is None
    assert await slots.take(caller, "a", now_ms + 90_000, 2, now_ms) is None  # held: renewed
    assert await slots.take(caller, "c", now_ms + 60_000, 2, now_ms) == now_ms + 30_000
    assert await slots.take(unique("slots-"), "c", now_ms + 60_000, 2, now_ms) is None
    await slots.give_back(caller, "a")
    await slots.give_back(caller, "a")  # idempotent
    assert await slots.take(caller, "c", now_ms + 60_000, 2, now_ms) is None
    assert await slots.take(caller, "d", now_ms + 60_000, 2, now_ms) == now_ms + 30_000
    # Past "b"'s end it no longer counts (a process that died never gives it back).
    assert await slots.take(caller, "d", now_ms + 90_000, 2, now_ms + 30_000) is None


@pytest.mark.integration
async def test_the_stream_slots_key_lives_as_long_as_its_latest_slot() -> None:
    client = open_client(REDIS_URL)
    try:
        slots, caller, now_ms = RedisStreamSlots(client), unique("slots-"), 1_700_000_000_000
        await slots.take(caller, "a", now_ms + 60_000, 5, now_ms)
        await slots.take(caller, "b", now_ms + 20_000, 5, now_ms)  # shorter: TTL kept
        ttl_ms = await client.pttl(schema.STREAM_SLOTS_KEY.format(caller=caller))
        assert 59_000 < ttl_ms <= 60_000
    finally:
        await client.aclose()
