"""A cancel answered 200 is never delivered, whatever a keyed registration's requests did: the
API's use case and a dispatcher on one in-memory store that, like Cassandra, can hold rows of
one id at several homes and apply a write after its client timed out.

The sequence: POST A (Idempotency-Key, ``delaySeconds``) writes its index entries, its row
write times out three times (503 ``outcome_unknown``; the writes land later); the SDK's
retry B, three seconds later (another fire time), is answered 201; A's writes land; DELETE
is answered 200. Then every due-index entry of the id is enqueued (as the sweepers'
due-scan would, each message naming its home) and dispatched past both fire times.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.dispatcher.fakes import CALLER, Env
from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.app.registration import NewTrigger
from trigger_service.app.triggers import TriggerService
from trigger_service.core.errors import CacheError, IdempotencyKeyReused, OutcomeUnknown
from trigger_service.core.model import Status, keyed_trigger_id
from trigger_service.core.ports.values import OutgoingMessage

DELAY_MS = 10_000


def _service(env: Env, cache: MemoryIdempotencyCache) -> TriggerService:
    return TriggerService(env.settings, env.store, env.store, env.queue, cache, env.clock,
                          env.metrics)


def _request(env: Env, payload: str = '{"n": 1}') -> NewTrigger:
    now_ms = env.clock.now_ms()
    return NewTrigger(f"https://{CALLER}.internal/cb", payload, now_ms + DELAY_MS, now_ms)


async def _register(env: Env, svc: TriggerService, key: str, payload: str = '{"n": 1}',
                    request_hash: str = "h1") -> str:
    """What the API answers: the trigger id, or ``"503"``, or ``"422"``."""
    task = asyncio.create_task(svc.register_planned(CALLER, _request(env, payload), key,
                                                    request_hash))
    while not task.done():  # the repeats after a timeout pause on the manual clock
        await asyncio.sleep(0)
        env.clock.advance_ms(10)
    try:
        return task.result().trigger_id
    except OutcomeUnknown:
        return "503"
    except IdempotencyKeyReused:
        return "422"
    finally:
        await svc.drain()


async def _dispatch_every_entry(env: Env, trigger_id: str) -> None:
    """Enqueue a message for each due-index entry of the id (its home named, as the
    due-scan sends it), then run a dispatcher over them past every fire time."""
    entries = [e for bucket in env.store.buckets.values() for e in bucket
               if e.trigger_id == trigger_id]
    assert len({e.home_at_ms for e in entries}) >= 2, "the race left two homes to deliver"
    await env.queue.send_many([OutgoingMessage(e.trigger_id, e.fire_at_ms, 0, e.home_at_ms,
                                               e.shard) for e in entries])
    d = env.dispatcher()
    env.clock.advance_ms(2 * DELAY_MS)
    for m in await env.receive():
        await d.handle(m)


async def test_a_cancel_after_a_timed_out_keyed_create_and_its_retry_governs_every_row(
        env: Env) -> None:
    cache = MemoryIdempotencyCache(env.clock)
    svc = _service(env, cache)
    env.store.delayed_row_writes = 3  # every attempt of A: timed out, applied later
    assert await _register(env, svc, "k") == "503"
    env.clock.advance_ms(3_000)
    tid = await _register(env, svc, "k")
    env.store.land_delayed_writes()
    await svc.cancel(CALLER, tid)  # 200
    await _dispatch_every_entry(env, tid)
    assert env.channel.ids() == []
    t = await env.store.get(tid)
    assert t is not None and t.status is Status.CANCELLED
    assert [r for r in env.store.rows.values() if r.trigger_id == tid
            and not r.status.terminal] == []


@pytest.mark.parametrize("bodies", [1, 2])
async def test_without_redis_racing_requests_of_a_key_leave_one_cancellable_trigger(
        env: Env, bodies: int) -> None:
    """Redis lost (each request owns the key): A's row write is slow; B (a later fire
    time; the same body, or another) is answered; A's write lands. One trigger, and the
    cancel governs it."""
    cache = MemoryIdempotencyCache(env.clock)
    cache.failures["claim"] = CacheError("flushed")
    svc = _service(env, cache)
    env.store.delayed_row_writes = 1
    first = asyncio.create_task(_register(env, svc, "k"))
    for _ in range(3):
        await asyncio.sleep(0)
    env.clock.advance_ms(13)
    second = await _register(env, svc, "k",
                             payload='{"n": 2}' if bodies == 2 else '{"n": 1}',
                             request_hash="h2" if bodies == 2 else "h1")
    env.store.land_delayed_writes()
    tid = keyed_trigger_id(CALLER, "k")
    answers = {await first, second}
    assert tid in answers and answers <= {tid, "503", "422"}
    await svc.cancel(CALLER, tid)
    await _dispatch_every_entry(env, tid)
    assert env.channel.ids() == []
