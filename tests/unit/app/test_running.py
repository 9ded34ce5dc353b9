"""TriggerService.run (run now) on the in-memory fakes with a manual clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.app.support import NOW_MS, Env, make_env
from tests.unit.app.test_pausing import _one_time, _series
from tests.unit.core.test_catchup import HOUR
from trigger_service.app.running import Run, copy_request
from trigger_service.core.errors import IdempotencyKeyReused, NotFound, NotRunnable
from trigger_service.core.model import Priority, Route, Status, Trigger, keyed_trigger_id

HASH = "run-hash"


async def _run(env: Env, t: Trigger, key: str | None = None,
               request_hash: str = HASH) -> Run:
    return await env.service.run("orders", t.trigger_id, key, request_hash)


async def test_a_pending_one_time_trigger_fires_now_as_the_same_occurrence() -> None:
    env = make_env()
    t = await _one_time(env, 3_600_000)
    env.clock.advance_ms(1_000)
    run = await _run(env, t)
    now = env.clock.now_ms()
    assert (run.trigger_id, run.run_trigger_id) == (t.trigger_id, t.trigger_id)
    assert run.occurrence_id == t.occurrence_id == f"{t.trigger_id}.1"
    assert run.fire_at_ms == now and not run.replayed
    stored = env.store.triggers[t.trigger_id]
    assert stored.status is Status.PENDING and stored.fire_at_ms == now
    assert stored.route is Route.DIRECT and stored.revision == (t.revision or 0) + 1
    await env.service.drain()
    assert [(m.trigger_id, m.fire_at_ms) for m in env.queue.sent][-1] == (t.trigger_id, now)
    # Run again: due already, nothing moves and nothing more is sent.
    sent = len(env.queue.sent)
    again = await _run(env, t)
    assert again.occurrence_id == run.occurrence_id and again.fire_at_ms == now
    await env.service.drain()
    assert len(env.queue.sent) == sent


async def test_a_jittered_trigger_in_retry_backoff_fires_now_without_jitter() -> None:
    env = make_env()
    t = await _one_time(env, 0)
    env.store.triggers[t.trigger_id] = replace(t, jitter_s=30, attempts=2,
                                               next_attempt_at_ms=NOW_MS + 600_000)
    run = await _run(env, t)
    stored = env.store.triggers[t.trigger_id]
    assert stored.next_attempt_at_ms is None and stored.jitter_s == 0
    assert stored.fire_at_ms == run.fire_at_ms == NOW_MS and stored.due_at_ms() == NOW_MS


async def test_a_series_gets_an_extra_occurrence_and_keeps_its_schedule() -> None:
    env = make_env()
    t = await _series(env)
    run = await _run(env, t)
    assert run.trigger_id == t.trigger_id and run.run_trigger_id != t.trigger_id
    assert run.occurrence_id == f"{run.run_trigger_id}.1" and run.fire_at_ms == NOW_MS
    copy = env.store.triggers[run.run_trigger_id]
    assert copy.schedule is None and copy.snoozed_from == t.trigger_id
    assert (copy.callback_url, copy.payload_json) == (t.callback_url, t.payload_json)
    assert copy.fire_at_ms == NOW_MS and copy.status is Status.PENDING
    assert env.store.triggers[t.trigger_id] == t  # the series itself untouched
    await env.service.drain()
    assert [m.trigger_id for m in env.queue.sent] == [run.run_trigger_id]
    # Without a key every run is another occurrence.
    assert (await _run(env, t)).run_trigger_id not in (t.trigger_id, run.run_trigger_id)


@pytest.mark.parametrize("paused", [False, True])
async def test_a_runs_copy_keeps_the_priority(paused: bool) -> None:
    env = make_env()
    t = await _series(env)
    env.store.triggers[t.trigger_id] = t = replace(t, priority=Priority.HIGH)
    if paused:
        t = await env.service.pause("orders", t.trigger_id)
    run = await _run(env, t)
    assert run.run_trigger_id != t.trigger_id
    assert env.store.triggers[run.run_trigger_id].priority is Priority.HIGH
    assert copy_request(t, NOW_MS, NOW_MS).priority is Priority.HIGH  # a backfill's too


@pytest.mark.parametrize("kind", ["one_time", "series"])
async def test_a_paused_trigger_fires_a_copy_and_stays_paused(kind: str) -> None:
    env = make_env()
    t = await (_one_time(env, HOUR) if kind == "one_time" else _series(env))
    paused = await env.service.pause("orders", t.trigger_id)
    run = await _run(env, t)
    assert run.run_trigger_id != t.trigger_id and run.fire_at_ms == NOW_MS
    assert env.store.triggers[t.trigger_id] == paused
    assert env.store.triggers[run.run_trigger_id].status is Status.PENDING


async def test_a_one_time_trigger_being_delivered_is_answered_as_it_is() -> None:
    env = make_env()
    t = await _one_time(env, 0)
    flying = replace(t, status=Status.IN_FLIGHT, claim_id="c")
    env.store.triggers[t.trigger_id] = flying
    run = await _run(env, t)
    assert run.occurrence_id == f"{t.trigger_id}.1" and run.fire_at_ms == t.fire_at_ms
    assert env.store.triggers[t.trigger_id] == flying


@pytest.mark.parametrize("status", [Status.FIRED, Status.FAILED, Status.CANCELLED])
@pytest.mark.parametrize("kind", ["one_time", "series"])
async def test_a_finished_trigger_is_not_runnable(status: Status, kind: str) -> None:
    env = make_env()
    t = await (_one_time(env, HOUR) if kind == "one_time" else _series(env))
    env.store.triggers[t.trigger_id] = replace(t, status=status)
    with pytest.raises(NotRunnable) as e:
        await _run(env, t)
    assert e.value.status == 409 and e.value.extra["status"] == status.value
    assert len(env.store.triggers) == 1  # no copy


async def test_another_callers_trigger_is_not_found() -> None:
    env = make_env()
    t = await _one_time(env, HOUR)
    with pytest.raises(NotFound):
        await env.service.run("someone-else", t.trigger_id, None, HASH)


async def test_a_claim_that_wins_the_race_is_looked_at_again() -> None:
    env = make_env()
    t = await _one_time(env, HOUR)
    store = env.store
    real_advance = store.advance

    async def claimed_first(old: Trigger, new: Trigger, index_ttl_s: int, now_ms: int, *,
                            patient: bool = False) -> bool:
        # The dispatcher claims the row between the run's read and its LWT.
        store.triggers[old.trigger_id] = replace(old, status=Status.IN_FLIGHT, claim_id="c")
        return await real_advance(old, new, index_ttl_s, now_ms, patient=patient)

    store.advance = claimed_first  # type: ignore[method-assign]
    run = await _run(env, t)
    assert run.fire_at_ms == t.fire_at_ms  # answered as it is: being delivered
    assert store.triggers[t.trigger_id].status is Status.IN_FLIGHT


async def test_a_keyed_run_of_a_one_time_trigger_is_replayed_after_it_fired() -> None:
    env = make_env()
    t = await _one_time(env, HOUR)
    first = await _run(env, t, "k1")
    fired = replace(env.store.triggers[t.trigger_id], status=Status.FIRED, occurrence_seq=1,
                    occurrences_fired=1)
    env.store.triggers[t.trigger_id] = fired
    again = await _run(env, t, "k1")
    assert again.replayed and (again.occurrence_id, again.fire_at_ms) == (
        first.occurrence_id, first.fire_at_ms)
    with pytest.raises(IdempotencyKeyReused):
        await _run(env, t, "k1", request_hash="another request")
    with pytest.raises(NotRunnable):  # another key: it finished
        await _run(env, t, "k2")
    # Redis lost: the retry is run again, and a finished trigger is not runnable.
    env.cache.entries.clear()
    with pytest.raises(NotRunnable):
        await _run(env, t, "k1")


async def test_a_keyed_run_of_a_series_makes_one_copy_even_when_redis_forgot() -> None:
    env = make_env()
    t = await _series(env)
    first = await _run(env, t, "k1")
    assert first.run_trigger_id == keyed_trigger_id("orders", "k1")
    env.clock.advance_ms(5_000)
    again = await _run(env, t, "k1")
    assert again.replayed and again == replace(first, replayed=True)
    env.cache.entries.clear()
    durable = await _run(env, t, "k1")
    assert durable.replayed and durable.run_trigger_id == first.run_trigger_id
    assert durable.fire_at_ms == first.fire_at_ms
    assert len(env.store.triggers) == 2  # the series and one copy
