"""A registration whose write timed out: the idempotent write is repeated a bounded
number of times, and what cannot be settled is answered ``OutcomeUnknown`` (never "nothing
was accepted"); a quota refusal is never the answer for a key whose trigger exists."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.unit.app.support import (
    Env,
    RecordingStore,
    TimedOutStore,
    drive,
    make_env,
    request,
)
from trigger_service.adapters.memory.limits import MemoryPendingQuota
from trigger_service.app.creation import UNKNOWN_OUTCOME_ATTEMPTS
from trigger_service.app.idempotency import Registered
from trigger_service.app.quota import QuotaGate
from trigger_service.core.errors import (
    CacheError,
    OutcomeUnknown,
    QuotaExceeded,
    StoreError,
    StoreTimeout,
)
from trigger_service.core.model import keyed_trigger_id
from trigger_service.platform.metrics import InMemoryMetrics

DELAY_MS = 60_000  # direct: enqueued once written


async def register(env: Env, key: str | None, req_hash: str = "h1") -> Registered:
    """A registration while the manual clock moves (the repeats pause on it)."""
    async def run() -> Registered:
        try:
            return await env.service.register_planned("orders", request(env, DELAY_MS), key,
                                                      req_hash)
        finally:
            await env.service.drain()
    task = asyncio.create_task(run())
    await drive(env.clock, task)
    return task.result()


def quota_env(limit: int, store: RecordingStore | None = None
              ) -> tuple[Env, MemoryPendingQuota]:
    quota = MemoryPendingQuota()
    return make_env(store=store,
                    quota=QuotaGate(quota, lambda _: limit, InMemoryMetrics())), quota


@pytest.mark.parametrize("key", [None, "k1"])
async def test_a_write_that_timed_out_once_is_written_again_and_answered(
        key: str | None) -> None:
    store = TimedOutStore()
    env = make_env(store=store)
    store.timeouts = UNKNOWN_OUTCOME_ATTEMPTS - 1  # the last attempt is answered
    result = await register(env, key)
    assert not result.replayed
    assert list(store.triggers) == [result.trigger_id]
    assert [m.trigger_id for m in env.queue.sent] == [result.trigger_id]  # enqueued once
    assert store.calls["create" if key is None else "create_keyed"] == UNKNOWN_OUTCOME_ATTEMPTS
    counts = env.metrics.snapshot()
    assert counts["registration_write_retries_total"] == UNKNOWN_OUTCOME_ATTEMPTS - 1
    assert "registration_outcome_unknown_total" not in counts


async def test_an_unkeyed_write_never_answered_is_outcome_unknown_naming_its_id() -> None:
    """Not "nothing was accepted": the row is there and will fire."""
    store = TimedOutStore()
    env, quota = quota_env(5, store)
    store.timeouts = UNKNOWN_OUTCOME_ATTEMPTS
    with pytest.raises(OutcomeUnknown) as caught:
        await register(env, None)
    (tid,) = store.triggers
    assert caught.value.status == 503 and caught.value.code == "outcome_unknown"
    assert caught.value.to_json()["triggerId"] == tid
    assert "10.0.0.5" not in caught.value.message  # the driver's text stays in the log
    assert isinstance(caught.value.__cause__, StoreTimeout)
    assert list(quota.counted["orders"]) == [tid]  # it may exist: its place stays taken
    assert store.calls["create"] == UNKNOWN_OUTCOME_ATTEMPTS
    assert env.metrics.snapshot()["registration_outcome_unknown_total"] == 1


async def test_a_keyed_retry_after_outcome_unknown_settles_it_either_way() -> None:
    env = make_env()
    env.store.failures["create_keyed"] = StoreTimeout("timed out")  # never written
    with pytest.raises(OutcomeUnknown) as caught:
        await register(env, "k1")
    assert caught.value.to_json()["triggerId"] == keyed_trigger_id("orders", "k1")
    assert env.store.triggers == {}
    del env.store.failures["create_keyed"]
    retry = await register(env, "k1")  # it was not written: the retry creates it
    assert (retry.trigger_id, retry.replayed) == (keyed_trigger_id("orders", "k1"), False)
    assert list(env.store.triggers) == [retry.trigger_id]


async def test_other_store_errors_are_not_repeated_and_give_the_quota_place_back() -> None:
    env, quota = quota_env(5)
    env.store.failures["create"] = StoreError("cassandra create failed: unavailable")
    with pytest.raises(StoreError):
        await register(env, None)
    assert env.store.calls["create"] == 1 and quota.counted["orders"] == {}


async def test_a_keyed_create_that_timed_out_but_landed_is_answered_as_the_trigger() -> None:
    """Redis down: the repeat of a creation that landed finds its own home alone, and that
    is this request's trigger, written once."""
    store = TimedOutStore()
    store.timeouts = 1
    env = make_env(store=store)
    env.cache.failures["claim"] = CacheError("redis down")
    result = await register(env, "k1")
    assert (result.trigger_id, result.replayed) == (keyed_trigger_id("orders", "k1"), False)
    assert list(env.store.triggers) == [result.trigger_id]
    assert [m.trigger_id for m in env.queue.sent] == [result.trigger_id]  # and enqueued
    assert env.store.calls["create_keyed"] == 2
    assert [k for k in store.rows if k[0] == result.trigger_id] == [
        (result.trigger_id, result.fire_at_ms)]


async def test_a_retry_at_the_quota_limit_is_answered_its_trigger_not_429() -> None:
    """The first attempt's row landed late (a timed-out write) and Redis has no answer: the
    retry's quota refusal is checked against the row, and the trigger is the answer."""
    store = RecordingStore()
    env, quota = quota_env(1, store)
    other = await register(env, "k0")  # the caller is at its max_pending
    landed = replace(env.store.triggers[other.trigger_id],
                     trigger_id=keyed_trigger_id("orders", "k1"))
    await store.create(landed, 3_600)  # k1's first write, timed out, landed late
    result = await register(env, "k1")
    assert result == Registered(landed.trigger_id, landed.fire_at_ms, replayed=True)
    assert list(quota.counted["orders"]) == [other.trigger_id]
    with pytest.raises(QuotaExceeded):  # a new key at the limit is still refused
        await register(env, "k2")
