"""Idempotency-Key through ``TriggerService.register``: replays, key reuse, a Redis that is
down or lost, keys of earlier releases, failed and timed-out writes, and concurrent
duplicates. The trigger row (its id derived from the key) is the record; Redis orders."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.unit.app.support import (
    CALLBACK,
    NOW_MS,
    SETTINGS,
    Env,
    GatedStore,
    RecordingStore,
    TimedOutStore,
    drive,
    make_env,
    request,
)
from trigger_service.adapters.memory.limits import MemoryPendingQuota
from trigger_service.app.creation import UNKNOWN_OUTCOME_ATTEMPTS
from trigger_service.app.idempotency import CACHE_MAX_MS, Registered
from trigger_service.app.quota import QuotaGate
from trigger_service.core.errors import (
    CacheError,
    IdempotencyKeyReused,
    OutcomeUnknown,
    QuotaExceeded,
    StoreError,
)
from trigger_service.core.model import (
    Route,
    Status,
    Trigger,
    keyed_trigger_id,
    new_trigger_id,
    shard_of,
)
from trigger_service.core.ports.idempotency import IdempotencyRecord
from trigger_service.core.ports.values import KeyedCreation, OutgoingMessage
from trigger_service.core.time.clock import ManualClock
from trigger_service.core.time.timing import DAY_MS

DELAY_MS = 600_000
# The port methods that are conditional writes (a Paxos round on Cassandra).
CONDITIONAL = ("elect", "seal", "put_if_absent", "compare_and_set")


async def reg(env: Env, key: str, req_hash: str = "h1", *, delay_ms: int = DELAY_MS,
              caller: str = "orders") -> Registered:
    try:
        return await env.service.register_planned(caller, request(env, delay_ms), key, req_hash)
    finally:
        await env.service.drain()  # the SQS send runs after the answer


async def reg_driven(env: Env, key: str, req_hash: str = "h1") -> Registered:
    """``reg`` in a task while the manual clock moves (for requests that may poll)."""
    task = asyncio.create_task(reg(env, key, req_hash))
    await drive(env.clock, task)
    return task.result()


def assert_one_trigger(env: Env, trigger_id: str) -> None:
    assert list(env.store.triggers) == [trigger_id]
    assert [m.trigger_id for m in env.queue.sent] == [trigger_id]


def conditional_calls(env: Env) -> dict[str, int]:
    return {op: n for op, n in env.store.calls.items() if op in CONDITIONAL}


async def test_same_key_and_body_replays_the_first_trigger() -> None:
    env = make_env()
    first = await reg(env, "k1")
    env.clock.advance_ms(5_000)  # a delaySeconds body sent again later: same hash
    second = await reg(env, "k1")
    assert first == Registered(keyed_trigger_id("orders", "k1"), NOW_MS + DELAY_MS, False)
    assert second == Registered(first.trigger_id, NOW_MS + DELAY_MS, replayed=True)
    assert_one_trigger(env, first.trigger_id)
    row = env.store.triggers[first.trigger_id]
    assert (row.request_hash, row.registered_fire_at_ms, row.idem_key) == (
        "h1", NOW_MS + DELAY_MS, "k1")
    assert env.metrics.snapshot() == {"triggers_registered_total": 1,
                                      "idempotent_replays_total": 1}


async def test_the_normal_keyed_path_issues_no_conditional_write() -> None:
    """No Paxos: the first request and its replay from Redis are plain reads and writes
    (the statement-level spy is in tests/unit/adapters/test_keyed_statements.py). A replay
    Redis forgot, with another fire time, elects the row there once."""
    env = make_env()
    first = await reg(env, "k1")
    await reg(env, "k1")
    assert conditional_calls(env) == {}
    assert env.store.calls["create_keyed"] == 1
    env.cache.entries.clear()
    env.clock.advance_ms(1_000)
    again = await reg(env, "k1")
    assert again == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert conditional_calls(env) == {"elect": 1}
    assert_one_trigger(env, first.trigger_id)


async def test_same_key_other_body_is_rejected_from_the_cache() -> None:
    env = make_env()
    first = await reg(env, "k1", "h1")
    calls = dict(env.store.calls)
    with pytest.raises(IdempotencyKeyReused) as e:
        await reg(env, "k1", "h2")
    assert e.value.status == 422 and e.value.code == "idempotency_key_reused"
    assert env.store.calls == calls  # the cache alone answered
    assert_one_trigger(env, first.trigger_id)


async def test_same_key_other_body_is_rejected_by_the_row_when_redis_forgot() -> None:
    env = make_env()
    first = await reg(env, "k1", "h1")
    env.cache.entries.clear()
    with pytest.raises(IdempotencyKeyReused):
        await reg(env, "k1", "h2")
    assert_one_trigger(env, first.trigger_id)
    assert env.cache.entries == {}, "a refused request gives the key back"


async def test_the_same_key_from_another_caller_is_another_key() -> None:
    env = make_env()
    a = await reg(env, "k1", caller="orders")
    b = await reg(env, "k1", caller="billing")
    assert not a.replayed and not b.replayed and a.trigger_id != b.trigger_id
    assert b.trigger_id == keyed_trigger_id("billing", "k1")
    assert env.store.triggers[b.trigger_id].caller == "billing"


async def test_cache_lost_between_requests_replays_from_the_row() -> None:
    env = make_env()
    first = await reg(env, "k1")
    env.cache.entries.clear()  # FLUSHALL, a failover, an eviction
    env.clock.advance_ms(5_000)
    second = await reg(env, "k1")
    assert second == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert_one_trigger(env, first.trigger_id)
    done = await env.cache.get("orders", "k1")
    assert done is not None and done.done and done.trigger_id == first.trigger_id


async def test_a_replay_answers_the_first_fire_time_after_the_row_moved_on() -> None:
    """A series' row points at its next occurrence (an edit moves it too): the replay still
    answers the fire time the first request was answered."""
    env = make_env()
    first = await reg(env, "k1")
    row = env.store.triggers[first.trigger_id]
    assert await env.store.compare_and_set(row, replace(row, fire_at_ms=row.fire_at_ms + DAY_MS,
                                                        occurrence_seq=1))
    env.cache.entries.clear()
    env.clock.advance_ms(1_000)
    again = await reg(env, "k1")
    assert again == Registered(first.trigger_id, NOW_MS + DELAY_MS, replayed=True)


@pytest.mark.parametrize("ops", [("get",), ("put_done",), ("release",),
                                 ("get", "put_done", "release")])
async def test_cache_errors_after_the_claim_change_no_answer(ops: tuple[str, ...]) -> None:
    env = make_env()
    for op in ops:
        env.cache.failures[op] = CacheError("redis down")
    first = await reg_driven(env, "k1")
    env.clock.advance_ms(1)
    second = await reg_driven(env, "k1")
    assert not first.replayed
    assert second == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert_one_trigger(env, first.trigger_id)


async def test_redis_down_decides_in_the_store() -> None:
    env = make_env()
    env.cache.failures["claim"] = CacheError("redis down")
    first = await reg(env, "k1")
    env.clock.advance_ms(1_000)
    second = await reg(env, "k1")
    assert not first.replayed and first.trigger_id == keyed_trigger_id("orders", "k1")
    assert second == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert env.store.calls["create_keyed"] == 2 and "create" not in env.store.calls
    assert_one_trigger(env, first.trigger_id)
    with pytest.raises(IdempotencyKeyReused):
        await reg(env, "k1", "h2")


async def test_redis_down_concurrent_duplicates_make_one_trigger() -> None:
    env = make_env()
    # (Another key's legacy record: each request reads both tables, as many steps as the
    # test needs for every read to run before any write.)
    await env.store.put_if_absent(
        IdempotencyRecord("orders", "other", "h1", ghost(Route.DIRECT, DELAY_MS)), 3_600)
    env.cache.failures["claim"] = CacheError("redis down")
    requests = []
    for _ in range(20):  # received a millisecond apart: 20 fire times, 20 homes
        requests.append(request(env, DELAY_MS))
        env.clock.advance_ms(1)
    results = await asyncio.gather(*(env.service.register_planned("orders", r, "same", "h1")
                                     for r in requests))
    await env.service.drain()
    assert {r.trigger_id for r in results} == {keyed_trigger_id("orders", "same")}
    assert sum(not r.replayed for r in results) == 1
    assert {r.fire_at_ms for r in results} == {NOW_MS + DELAY_MS}  # the first's, for all
    assert env.store.calls["create_keyed"] == 20
    assert_one_trigger(env, results[0].trigger_id)


async def test_concurrent_duplicates_make_exactly_one_trigger() -> None:
    clock = ManualClock(NOW_MS)
    store = GatedStore()
    env = make_env(store=store, clock=clock)
    store.gate.clear()  # the owner's write is slow: every other request finds it pending
    tasks = [asyncio.create_task(reg(env, "same")) for _ in range(20)]
    for _ in range(10):
        await asyncio.sleep(0)
    assert env.cache.calls["claim"] == 20
    store.gate.set()
    gathered = asyncio.gather(*tasks)
    await drive(clock, gathered)  # type: ignore[arg-type]
    results = gathered.result()
    assert {r.trigger_id for r in results} == {keyed_trigger_id("orders", "same")}
    assert sum(not r.replayed for r in results) == 1
    assert store.calls["create_keyed"] == 1 and conditional_calls(env) == {}
    assert_one_trigger(env, results[0].trigger_id)


async def test_request_that_finds_the_key_in_progress_waits_for_the_owners_answer() -> None:
    clock = ManualClock(NOW_MS)
    store = GatedStore()
    env = make_env(store=store, clock=clock)
    store.gate.clear()  # the owner is slow to write its row
    owner = asyncio.create_task(reg(env, "k1"))
    for _ in range(5):
        await asyncio.sleep(0)
    waiter = asyncio.create_task(reg(env, "k1"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not owner.done() and not waiter.done()
    store.gate.set()
    first = await owner
    waited_ms = await drive(clock, waiter)
    assert waiter.result() == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert 0 < waited_ms < 2_000
    assert store.calls["create_keyed"] == 1  # the waiter never asked Cassandra
    assert "get" not in store.calls
    assert_one_trigger(env, first.trigger_id)


async def test_claim_left_by_a_dead_owner_delays_then_paxos_decides() -> None:
    env = make_env()
    assert await env.cache.claim("orders", "k1", "h1") is None  # its owner died right after
    task = asyncio.create_task(reg(env, "k1"))
    waited_ms = await drive(env.clock, task)
    result = task.result()
    assert not result.replayed and 2_000 <= waited_ms <= 2_040  # the wait, then the send
    assert env.store.calls["create_keyed"] == 1 and conditional_calls(env) == {}
    assert_one_trigger(env, result.trigger_id)
    assert env.metrics.snapshot()["idempotent_wait_timeouts_total"] == 1
    # The message is aimed at the fire time from the moment it is sent, not the arrival.
    assert env.queue.sent[0].delay_s == (DELAY_MS - 2_000) // 1000 - SETTINGS.sqs.enqueue_lead_s
    again = await reg(env, "k1")
    assert again == Registered(result.trigger_id, result.fire_at_ms, replayed=True)


async def test_an_owner_slower_than_the_wait_still_makes_one_trigger() -> None:
    """The waiter gives up after 2 s and creates while the owner's write is still on its
    way: one id, one row; both are answered as first, with one fire time."""

    class SlowFirst(RecordingStore):
        gate = asyncio.Event()
        waited = False

        async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
            if not self.waited:
                self.waited = True
                await self.gate.wait()
            return await super().create_keyed(trigger, index_ttl_s)

    clock = ManualClock(NOW_MS)
    store = SlowFirst()
    env = make_env(store=store, clock=clock)
    owner = asyncio.create_task(reg(env, "k1"))
    for _ in range(5):
        await asyncio.sleep(0)
    waiter = asyncio.create_task(reg(env, "k1"))
    await drive(clock, waiter)
    store.gate.set()
    first = await owner
    assert first.trigger_id == waiter.result().trigger_id
    assert first.fire_at_ms == waiter.result().fire_at_ms
    assert list(store.triggers) == [first.trigger_id]
    assert [k for k in store.rows if k[0] == first.trigger_id] == [
        (first.trigger_id, first.fire_at_ms)]


async def test_store_error_on_the_write_accepts_nothing_and_gives_the_key_back() -> None:
    env = make_env()
    env.store.failures["create_keyed"] = StoreError("down")
    with pytest.raises(StoreError):
        await reg(env, "k1")
    assert env.store.triggers == {} and env.queue.sent == []
    assert env.cache.entries == {}, "the retry need not wait for the claim to expire"
    del env.store.failures["create_keyed"]
    retry = await reg(env, "k1")
    assert retry == Registered(keyed_trigger_id("orders", "k1"), NOW_MS + DELAY_MS, False)
    assert_one_trigger(env, retry.trigger_id)


async def test_a_write_that_timed_out_but_landed_is_replayed_by_the_retry() -> None:
    store = TimedOutStore()
    env = make_env(store=store)
    store.timeouts = UNKNOWN_OUTCOME_ATTEMPTS  # every attempt of the first request
    with pytest.raises(OutcomeUnknown):
        await reg_driven(env, "k1")
    env.clock.advance_ms(3_000)  # the caller retries the same body (a delaySeconds one)
    retry = await reg(env, "k1")
    assert retry == Registered(keyed_trigger_id("orders", "k1"), NOW_MS + DELAY_MS, True)
    assert list(store.triggers) == [retry.trigger_id]
    assert [k for k in store.rows if k[0] == retry.trigger_id] == [
        (retry.trigger_id, NOW_MS + DELAY_MS)]  # the retry wrote no row
    # Not enqueued by either: the sweepers' due-scan heals a PENDING row without a message.
    assert env.queue.sent == []


async def test_a_crash_between_the_row_and_the_done_entry_is_replayed() -> None:
    """The owner wrote the row and died before ``done`` (its claim still there): the retry
    waits for the claim, then finds the row."""
    env = make_env()
    first = await reg(env, "k1")
    env.cache.entries.clear()
    env.clock.advance_ms(1_000)
    assert await env.cache.claim("orders", "k1", "h1") is None  # the dead owner's claim
    task = asyncio.create_task(reg(env, "k1"))
    await drive(env.clock, task)
    assert task.result() == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    assert_one_trigger(env, first.trigger_id)


async def test_done_entry_and_keyed_row_outlive_the_key_promise() -> None:
    env = make_env()
    first = await reg(env, "k1", delay_ms=60 * DAY_MS)  # fires long after the retention
    ttl_s = 60 * DAY_MS // 1000 + SETTINGS.idempotency_retention_s
    # Redis holds the done entry a day at most (not 60 days): a cache, not the record.
    assert env.cache.entries[("orders", "k1")][1] == NOW_MS + CACHE_MAX_MS
    await env.service.cancel("orders", first.trigger_id)
    # Cancelled now, the row must still answer the key until fire time + retention.
    assert env.store.cas_ttls[-1] == ttl_s > SETTINGS.retention_s
    env.clock.advance_ms(CACHE_MAX_MS + 1)  # the done entry is gone: the row answers
    again = await reg(env, "k1", delay_ms=60 * DAY_MS - CACHE_MAX_MS - 1)
    assert again == Registered(first.trigger_id, first.fire_at_ms, replayed=True)
    plain = await env.service.register_planned("orders", request(env, 60 * DAY_MS), None, "h")
    await env.service.cancel("orders", plain.trigger_id)
    assert env.store.cas_ttls[-1] == SETTINGS.retention_s


def test_terminal_ttl_is_the_retention_or_the_key_promise_whichever_is_longer() -> None:
    s = SETTINGS
    assert s.terminal_ttl_s(None, NOW_MS) == s.retention_s
    assert s.terminal_ttl_s(NOW_MS - DAY_MS, NOW_MS) == s.retention_s
    far = NOW_MS + 100 * DAY_MS + 1
    assert s.terminal_ttl_s(far, NOW_MS) == 100 * 86_400 + 1 + s.idempotency_retention_s


def ghost(route: Route, fire_in_ms: int) -> Trigger:
    """What a release before this one created for key "died": a random id."""
    tid = new_trigger_id(NOW_MS - 1_000)
    return Trigger(tid, "orders", CALLBACK, "null", NOW_MS + fire_in_ms, NOW_MS - 1_000,
                   shard_of(tid, SETTINGS.shards), route, idem_key="died")


async def test_a_key_recorded_by_an_earlier_release_is_honoured() -> None:
    env = make_env()
    t = ghost(Route.DIRECT, DELAY_MS)
    await env.store.put_if_absent(IdempotencyRecord("orders", "died", "h1", t), 3_600)
    await env.store.create(t, 3_600)  # the old code path wrote both
    result = await reg(env, "died")
    assert result == Registered(t.trigger_id, t.fire_at_ms, replayed=True)
    assert list(env.store.triggers) == [t.trigger_id] and env.queue.sent == []
    with pytest.raises(IdempotencyKeyReused):
        await reg(env, "died", "h2")
    env.cache.entries.clear()
    with pytest.raises(IdempotencyKeyReused):
        await reg(env, "died", "h2")


async def test_legacy_record_without_its_row_is_repaired_by_the_next_request() -> None:
    env = make_env()
    t = ghost(Route.DIRECT, DELAY_MS)
    await env.store.put_if_absent(IdempotencyRecord("orders", "died", "h1", t), 3_600)
    result = await reg(env, "died")
    assert result == Registered(t.trigger_id, t.fire_at_ms, replayed=True)
    assert env.store.triggers == {t.trigger_id: t}
    assert env.queue.sent == [
        OutgoingMessage(t.trigger_id, t.fire_at_ms, DELAY_MS // 1000 - SETTINGS.sqs.enqueue_lead_s)]


async def test_repaired_legacy_sweep_trigger_is_written_but_not_sent() -> None:
    env = make_env()
    t = ghost(Route.SWEEP, 3_600_000)
    await env.store.put_if_absent(IdempotencyRecord("orders", "died", "h1", t), 3_600)
    result = await reg(env, "died")
    assert result.trigger_id == t.trigger_id and result.replayed
    assert env.store.triggers[t.trigger_id].status is Status.PENDING
    assert env.queue.sent == []


async def test_a_replay_takes_no_quota_place_and_a_failed_write_gives_it_back() -> None:
    quota = MemoryPendingQuota()
    gate = QuotaGate(quota, lambda _: 1, make_env().metrics)
    env = make_env(quota=gate)
    first = await reg(env, "k1")
    again = await reg(env, "k1")  # the caller is at its max_pending: a replay still answers
    assert again.replayed and again.trigger_id == first.trigger_id
    assert list(quota.counted["orders"]) == [first.trigger_id]
    with pytest.raises(QuotaExceeded):
        await reg(env, "k2")
    assert env.cache.entries.get(("orders", "k2")) is None
    await env.service.cancel("orders", first.trigger_id)
    env.store.failures["create_keyed"] = StoreError("down")
    with pytest.raises(StoreError):
        await reg(env, "k3")
    assert quota.counted["orders"] == {}


async def test_an_empty_legacy_table_is_not_read_per_key_and_is_asked_again_each_minute() -> None:
    env = make_env()
    await reg(env, "a")
    await reg(env, "b")
    assert env.store.calls.get("legacy_record", 0) == 0
    assert env.store.calls["legacy_records_exist"] == 1  # asked once for both keys
    # An old process records a key (a rolling upgrade) and Redis loses it: after the next
    # probe the record is found and honoured.
    t = ghost(Route.DIRECT, DELAY_MS)
    await env.store.put_if_absent(IdempotencyRecord("orders", "old", "h1", t), 3_600)
    await env.store.create(t, 3_600)
    env.clock.advance_ms(60_000)
    assert await reg(env, "old") == Registered(t.trigger_id, t.fire_at_ms, replayed=True)
    assert env.store.calls["legacy_records_exist"] == 2
    assert env.store.calls["legacy_record"] == 1


async def test_a_legacy_probe_that_fails_reads_the_legacy_table() -> None:
    env = make_env()
    env.store.failures["legacy_records_exist"] = StoreError("timeout")
    t = ghost(Route.DIRECT, DELAY_MS)
    await env.store.put_if_absent(IdempotencyRecord("orders", "old", "h1", t), 3_600)
    await env.store.create(t, 3_600)
    assert await reg(env, "old") == Registered(t.trigger_id, t.fire_at_ms, replayed=True)
