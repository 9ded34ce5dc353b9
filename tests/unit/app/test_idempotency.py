"""Idempotency-Key through ``TriggerService.register``: replays, key reuse, a Redis that is
down or lost, repair of a trigger whose first writer died, and concurrent duplicates."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.app.support import (
    CALLBACK,
    NOW_MS,
    SETTINGS,
    Env,
    GatedStore,
    StaleGetCache,
    drive,
    make_env,
    request,
)
from trigger_service.app.idempotency import Registered
from trigger_service.core.clock import ManualClock
from trigger_service.core.errors import CacheError, IdempotencyKeyReused, StoreError
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id, shard_of
from trigger_service.core.ports import IdempotencyRecord, OutgoingMessage

DELAY_MS = 600_000


async def reg(env: Env, key: str, req_hash: str = "h1", *, delay_ms: int = DELAY_MS,
              caller: str = "orders") -> Registered:
    return await env.service.register(caller, request(env, delay_ms), key, req_hash)


async def reg_driven(env: Env, key: str, req_hash: str = "h1") -> Registered:
    """``reg`` in a task while the manual clock moves (for requests that may poll)."""
    task = asyncio.create_task(reg(env, key, req_hash))
    await drive(env.clock, task)
    return task.result()


def assert_one_trigger(env: Env, trigger_id: str) -> None:
    assert list(env.store.triggers) == [trigger_id]
    assert [m.trigger_id for m in env.queue.sent] == [trigger_id]


async def test_same_key_and_body_replays_the_first_trigger() -> None:
    env = make_env()
    first = await reg(env, "k1")
    env.clock.advance_ms(5_000)  # a delaySeconds body sent again later: same hash
    second = await reg(env, "k1")
    assert first.replayed is False
    assert second == Registered(first.trigger_id, NOW_MS + DELAY_MS, replayed=True)
    assert_one_trigger(env, first.trigger_id)
    assert env.metrics.snapshot() == {"triggers_registered_total": 1,
                                      "idempotent_replays_total": 1}


async def test_same_key_other_body_is_rejected_from_the_cache() -> None:
    env = make_env()
    first = await reg(env, "k1", "h1")
    with pytest.raises(IdempotencyKeyReused) as e:
        await reg(env, "k1", "h2")
    assert e.value.status == 422 and e.value.code == "idempotency_key_reused"
    assert env.store.calls["put_if_absent"] == 1  # the cache alone answered
    assert_one_trigger(env, first.trigger_id)


async def test_same_key_other_body_is_rejected_by_the_store_when_redis_forgot() -> None:
    env = make_env()
    first = await reg(env, "k1", "h1")
    env.cache.entries.clear()
    with pytest.raises(IdempotencyKeyReused):
        await reg(env, "k1", "h2")
    assert_one_trigger(env, first.trigger_id)


async def test_the_same_key_from_another_caller_is_another_key() -> None:
    env = make_env()
    a = await reg(env, "k1", caller="orders")
    b = await reg(env, "k1", caller="billing")
    assert not a.replayed and not b.replayed and a.trigger_id != b.trigger_id
    assert env.store.triggers[b.trigger_id].caller == "billing"


@pytest.mark.parametrize("ops", [("get",), ("lock",), ("put_done",), ("get", "lock", "put_done")])
async def test_cache_errors_fall_back_to_the_store(ops: tuple[str, ...]) -> None:
    env = make_env()
    for op in ops:
        env.cache.failures[op] = CacheError("redis down")
    first = await reg_driven(env, "k1")
    second = await reg_driven(env, "k1")
    assert not first.replayed
    assert second == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert_one_trigger(env, first.trigger_id)
    assert env.store.calls["create"] == 1


async def test_cache_lost_between_requests_replays_from_the_store() -> None:
    env = make_env()
    first = await reg(env, "k1")
    env.cache.entries.clear()  # FLUSHDB, a failover, an eviction
    second = await reg(env, "k1")
    assert second == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert env.store.calls["create"] == 1  # the row exists: no repair write
    assert_one_trigger(env, first.trigger_id)
    done = await env.cache.get("orders", "k1")
    assert done is not None and done.done and done.trigger_id == first.trigger_id


async def test_record_and_cache_expire_with_the_fire_time_plus_retention() -> None:
    env = make_env()
    await reg(env, "k1")
    ttl_s = DELAY_MS // 1000 + SETTINGS.idempotency_retention_s
    assert env.store.record_ttls == [ttl_s]
    assert env.cache.entries[("orders", "k1")][1] == NOW_MS + ttl_s * 1000


def ghost(route: Route, fire_in_ms: int) -> Trigger:
    tid = new_trigger_id(NOW_MS - 1_000)
    return Trigger(tid, "orders", CALLBACK, "null", NOW_MS + fire_in_ms, NOW_MS - 1_000,
                   shard_of(tid, SETTINGS.shards), route, idem_key="died")


async def test_record_without_its_row_is_repaired_by_the_next_request() -> None:
    env = make_env()
    t = ghost(Route.DIRECT, DELAY_MS)
    await env.store.put_if_absent(IdempotencyRecord("orders", "died", "h1", t), 3_600)
    result = await reg(env, "died")
    assert result == Registered(t.trigger_id, t.fire_at_ms, replayed=True)
    assert env.store.triggers[t.trigger_id] == t
    assert env.queue.sent == [
        OutgoingMessage(t.trigger_id, t.fire_at_ms, DELAY_MS // 1000 - SETTINGS.sqs.enqueue_lead_s)]


async def test_repaired_sweep_trigger_is_written_but_not_sent() -> None:
    env = make_env()
    t = ghost(Route.SWEEP, 3_600_000)
    await env.store.put_if_absent(IdempotencyRecord("orders", "died", "h1", t), 3_600)
    result = await reg(env, "died")
    assert result.trigger_id == t.trigger_id and result.replayed
    assert env.store.triggers[t.trigger_id].status is Status.PENDING
    assert env.queue.sent == []


async def test_store_error_on_the_record_accepts_nothing() -> None:
    env = make_env()
    env.store.failures["put_if_absent"] = StoreError("down")
    with pytest.raises(StoreError):
        await reg(env, "k1")
    assert env.store.triggers == {} and env.queue.sent == []
    del env.store.failures["put_if_absent"]
    retry = await reg_driven(env, "k1")
    assert not retry.replayed
    assert_one_trigger(env, retry.trigger_id)


async def test_store_error_on_the_row_is_repaired_by_the_retry() -> None:
    env = make_env()
    env.store.failures["create"] = StoreError("down")
    with pytest.raises(StoreError):
        await reg(env, "k1")
    recorded = env.store.idempotency[("orders", "k1")].trigger
    assert env.store.triggers == {} and env.queue.sent == []
    del env.store.failures["create"]
    retry = await reg_driven(env, "k1")
    assert retry.trigger_id == recorded.trigger_id
    assert_one_trigger(env, recorded.trigger_id)


async def test_request_that_loses_the_lock_waits_for_the_winners_answer() -> None:
    clock = ManualClock(NOW_MS)
    store, cache = GatedStore(), StaleGetCache(clock)
    env = make_env(store=store, cache=cache, clock=clock)
    store.gate.clear()  # the winner is slow to write its row
    winner = asyncio.create_task(reg(env, "k1"))
    loser = asyncio.create_task(reg(env, "k1"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert cache.calls["lock"] == 2 and not winner.done() and not loser.done()
    store.gate.set()
    first = await winner
    assert not loser.done()  # still polling the cache on the manual clock
    waited_ms = await drive(clock, loser)
    assert loser.result() == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert 0 < waited_ms < 2_000
    assert store.calls["put_if_absent"] == 1  # the loser never asked Cassandra
    assert_one_trigger(env, first.trigger_id)


async def test_lock_left_by_a_dead_request_delays_then_the_store_decides() -> None:
    clock = ManualClock(NOW_MS)
    cache = StaleGetCache(clock)
    env = make_env(cache=cache, clock=clock)
    assert await cache.lock("orders", "k1", "h1")  # its holder died right after SET NX
    cache.blind_gets = 1  # our GET raced that SET NX
    task = asyncio.create_task(reg(env, "k1"))
    waited_ms = await drive(clock, task)
    result = task.result()
    assert not result.replayed and waited_ms == 2_000
    assert_one_trigger(env, result.trigger_id)
    # The message is aimed at the fire time from the moment it is sent, not the arrival.
    assert env.queue.sent[0].delay_s == (DELAY_MS - 2_000) // 1000 - SETTINGS.sqs.enqueue_lead_s


async def test_request_that_sees_the_key_in_progress_waits_for_the_winner() -> None:
    clock = ManualClock(NOW_MS)
    store = GatedStore()
    env = make_env(store=store, clock=clock)
    store.gate.clear()
    winner = asyncio.create_task(reg(env, "k1"))
    for _ in range(5):
        await asyncio.sleep(0)  # the winner has locked and recorded the key; row pending
    loser = asyncio.create_task(reg(env, "k1"))
    for _ in range(5):
        await asyncio.sleep(0)
    store.gate.set()
    first = await winner
    await drive(clock, loser)
    assert loser.result() == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert store.calls["create"] == 1
    assert_one_trigger(env, first.trigger_id)
