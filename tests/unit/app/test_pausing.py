"""TriggerService.pause / resume on the in-memory fakes with a manual clock."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.unit.app.support import CALLBACK, NOW_MS, Env, drive, make_env
from tests.unit.core.test_catchup import HOUR, series_trigger
from trigger_service.app.registration import NewTrigger
from trigger_service.core.errors import NotEditable
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id
from trigger_service.core.pause import MISSED_WHILE_PAUSED
from trigger_service.core.time.catchup import CatchUp, CatchUpPolicy


async def _one_time(env: Env, delay_ms: int) -> Trigger:
    now = env.clock.now_ms()
    t = Trigger(new_trigger_id(now), "orders", CALLBACK, "null", now + delay_ms, now, 0,
                Route.DIRECT)
    await env.store.create(t, 3600)
    return env.store.triggers[t.trigger_id]


async def _series(env: Env, catch_up: CatchUp | None = None) -> Trigger:
    t = replace(series_trigger(catch_up or CatchUp(), first_ms=NOW_MS + HOUR),
                trigger_id=new_trigger_id(NOW_MS), created_at_ms=NOW_MS)
    await env.store.create(t, 3600)
    return env.store.triggers[t.trigger_id]


async def test_pause_is_idempotent_and_listed_as_paused() -> None:
    env = make_env()
    t = await _one_time(env, 60_000)
    first = await env.service.pause("orders", t.trigger_id)
    again = await env.service.pause("orders", t.trigger_id)
    assert first.status is again.status is Status.PAUSED and again == first
    page = await env.service.list_triggers("orders", status=Status.PAUSED, limit=10,
                                           cursor=None)
    assert [x.trigger_id for x in page.triggers] == [t.trigger_id]
    pending = await env.service.list_triggers("orders", status=Status.PENDING, limit=10,
                                              cursor=None)
    assert pending.triggers == []


@pytest.mark.parametrize("status", [Status.FIRED, Status.FAILED, Status.CANCELLED])
async def test_a_finished_trigger_cannot_be_paused_or_resumed(status: Status) -> None:
    env = make_env()
    t = await _one_time(env, 60_000)
    env.store.triggers[t.trigger_id] = replace(t, status=status)
    for call in (env.service.pause("orders", t.trigger_id),
                 env.service.resume("orders", t.trigger_id, None)):
        with pytest.raises(NotEditable) as e:
            await call
        assert e.value.extra["status"] == status.value


async def test_a_one_time_trigger_being_delivered_cannot_be_paused() -> None:
    env = make_env()
    t = await _one_time(env, 0)
    env.store.triggers[t.trigger_id] = replace(t, status=Status.IN_FLIGHT, claim_id="c")
    with pytest.raises(NotEditable):
        await env.service.pause("orders", t.trigger_id)


async def test_a_series_pause_waits_for_the_occurrence_in_flight() -> None:
    env = make_env()
    t = await _series(env)
    env.store.triggers[t.trigger_id] = replace(t, status=Status.IN_FLIGHT, claim_id="c")
    task = asyncio.ensure_future(env.service.pause("orders", t.trigger_id))
    with pytest.raises(AssertionError, match="still running"):
        await drive(env.clock, task, max_steps=10)
    env.store.triggers[t.trigger_id] = t  # the occurrence finished (back to PENDING)
    await drive(env.clock, task)
    assert task.result().status is Status.PAUSED


async def test_resume_of_a_paused_trigger_not_yet_due_enqueues_it() -> None:
    env = make_env()
    t = await _one_time(env, 60_000)
    await env.service.pause("orders", t.trigger_id)
    new = await env.service.resume("orders", t.trigger_id, None)
    assert new.status is Status.PENDING and new.fire_at_ms == t.fire_at_ms
    await env.service.drain()
    assert [m.trigger_id for m in env.queue.sent] == [t.trigger_id]
    assert await env.service.resume("orders", t.trigger_id, None) == new  # idempotent


async def test_resume_none_cancels_a_one_time_trigger_that_passed() -> None:
    env = make_env()
    t = await _one_time(env, 60_000)
    await env.service.pause("orders", t.trigger_id)
    env.clock.advance_ms(10 * 60_000)
    new = await env.service.resume("orders", t.trigger_id, CatchUpPolicy.NONE)
    assert new.status is Status.CANCELLED and new.last_error == MISSED_WHILE_PAUSED
    assert env.store.triggers[t.trigger_id].status is Status.CANCELLED


@pytest.mark.parametrize(("policy", "hours"), [(None, 1), (CatchUpPolicy.ALL, 1),
                                               (CatchUpPolicy.LATEST, 3),
                                               (CatchUpPolicy.NONE, 4)])
async def test_a_series_paused_over_three_occurrences(policy: CatchUpPolicy | None,
                                                      hours: int) -> None:
    env = make_env()
    t = await _series(env)
    await env.service.pause("orders", t.trigger_id)
    env.clock.set_ms(NOW_MS + 3 * HOUR + 10 * 60_000)  # 1, 2 and 3 h came due
    new = await env.service.resume("orders", t.trigger_id, policy)
    assert new.status is Status.PENDING and new.fire_at_ms == NOW_MS + hours * HOUR
    assert env.store.triggers[t.trigger_id].fire_at_ms == new.fire_at_ms
    skipped = sum(v for k, v in env.metrics.snapshot().items()
                  if k.startswith("occurrences_skipped_total"))
    assert skipped == hours - 1


async def test_cancel_and_patch_of_a_paused_trigger() -> None:
    env = make_env()
    t = await _one_time(env, 60_000)
    paused = await env.service.pause("orders", t.trigger_id)
    now = env.clock.now_ms()
    new = NewTrigger(CALLBACK, "null", now + 120_000, now)
    edited = await env.service.edit(paused, new, retime=True)
    assert edited.status is Status.PAUSED and edited.fire_at_ms == new.fire_at_ms
    assert not env.queue.sent  # nothing is sent for a paused trigger
    cancelled = await env.service.cancel("orders", t.trigger_id)
    assert cancelled.status is Status.CANCELLED
