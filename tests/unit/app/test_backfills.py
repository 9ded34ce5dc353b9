"""Backfills (``app.backfills`` run as trigger jobs) on the in-memory fakes with a manual
clock: each past occurrence fired once, oldest first, paced; a repeat fires nothing; the
refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.app.support import NOW_MS, Env, make_env
from tests.unit.app.test_pausing import _one_time
from tests.unit.core.test_catchup import HOUR, series_trigger
from trigger_service.app.trigger_jobs import TriggerJobRunner
from trigger_service.config.callers import Caller
from trigger_service.config.flow_defaults import FlowDefault
from trigger_service.core.backfill import (
    DEFAULT_PACE_MS,
    MAX_BACKFILL_OCCURRENCES,
    occurrence_key,
)
from trigger_service.core.dead_letters import ItemState, JobStatus
from trigger_service.core.errors import InvalidRequest, NotBackfillable, NotFound, StoreError
from trigger_service.core.flow import FlowControl
from trigger_service.core.model import Status, Trigger, keyed_trigger_id, new_trigger_id
from trigger_service.core.time.catchup import CatchUp
from trigger_service.core.trigger_jobs import JobAction

ORDERS = Caller("orders", (), ())
START = NOW_MS - 10 * HOUR  # the series' first occurrence: 10 are past


async def _series(env: Env, **changes: object) -> Trigger:
    t = replace(series_trigger(CatchUp(), first_ms=START), trigger_id=new_trigger_id(START),
                created_at_ms=START, fire_at_ms=NOW_MS, **changes)  # type: ignore[arg-type]
    await env.store.create(t, 3600)
    return env.store.triggers[t.trigger_id]


def _runner(env: Env) -> TriggerJobRunner:
    return TriggerJobRunner(env.settings, env.service, env.store, env.clock, owner="a")


def _copy_id(t: Trigger, at_ms: int) -> str:
    return keyed_trigger_id("orders", occurrence_key(t.trigger_id, at_ms))


async def test_each_past_occurrence_fires_once_oldest_first_and_paced() -> None:
    env = make_env()
    t = await _series(env)
    runner = _runner(env)
    job = await runner.start_backfill(ORDERS, t.trigger_id, START, NOW_MS + HOUR)
    assert (job.action, job.total, job.filter.to_json()) == (JobAction.BACKFILL, 10, {})
    assert job.backfill is not None and job.backfill.pace_ms == DEFAULT_PACE_MS
    await runner.run_once()
    got = await runner.get("orders", job.job_id)
    assert (got.status, got.done, got.failed) == (JobStatus.DONE, 10, 0)
    instants = [START + k * HOUR for k in range(10)]  # [from, now): not the one due now
    copies = [env.store.triggers[_copy_id(t, at)] for at in instants]
    assert all(c.snoozed_from == t.trigger_id and c.schedule is None for c in copies)
    fire_times = [c.fire_at_ms for c in copies]
    assert fire_times == [fire_times[0] + k * DEFAULT_PACE_MS for k in range(10)]
    assert env.store.triggers[t.trigger_id] == t  # the series is not touched

    count = len(env.store.triggers)
    again = await runner.start_backfill(ORDERS, t.trigger_id, START, NOW_MS)
    await runner.run_once()
    assert (await runner.get("orders", again.job_id)).done == 10
    assert len(env.store.triggers) == count  # nothing new: each copy was found
    assert env.metrics.snapshot().get("triggers_backfilled_total") == 10


async def test_a_part_of_the_range_overlapping_an_earlier_backfill_fires_only_the_new() -> None:
    env = make_env()
    t = await _series(env)
    runner = _runner(env)
    await runner.start_backfill(ORDERS, t.trigger_id, START, START + 3 * HOUR)
    await runner.run_once()
    await runner.start_backfill(ORDERS, t.trigger_id, START + HOUR, START + 5 * HOUR)
    await runner.run_once()
    assert env.metrics.snapshot().get("triggers_backfilled_total") == 5


async def test_the_pace_is_the_series_flow_control_else_the_callers_default() -> None:
    env = make_env()
    own = await _series(env, flow_control=FlowControl("k", 4.0))
    runner = _runner(env)
    job = await runner.start_backfill(ORDERS, own.trigger_id, START, NOW_MS)
    assert job.backfill is not None and job.backfill.pace_ms == 250
    plain = await _series(env, callback_url="http://127.0.0.1:9000/cb")
    caller = replace(ORDERS, flow_defaults=(FlowDefault("http://127.0.0.1:9000", 3.0, None),))
    job = await runner.start_backfill(caller, plain.trigger_id, START, NOW_MS)
    assert job.backfill is not None and job.backfill.pace_ms == 334  # 1000 / 3, rounded up


@pytest.mark.parametrize("status", [Status.PAUSED, Status.CANCELLED, Status.FIRED])
async def test_a_paused_or_finished_series_is_backfilled_and_stays_as_it_is(
        status: Status) -> None:
    env = make_env()
    t = await _series(env, status=status)
    runner = _runner(env)
    job = await runner.start_backfill(ORDERS, t.trigger_id, START, START + 2 * HOUR)
    await runner.run_once()
    assert (await runner.get("orders", job.job_id)).done == 2
    assert env.store.triggers[t.trigger_id].status is status


async def test_refusals_before_any_job_is_made() -> None:
    env = make_env()
    t = await _series(env)
    once = await _one_time(env, 60_000)
    runner = _runner(env)
    with pytest.raises(NotBackfillable):
        await runner.start_backfill(ORDERS, once.trigger_id, START, NOW_MS)
    with pytest.raises(NotBackfillable):  # nothing in it is past
        await runner.start_backfill(ORDERS, t.trigger_id, NOW_MS, NOW_MS + HOUR)
    with pytest.raises(InvalidRequest):
        await runner.start_backfill(ORDERS, t.trigger_id, START, START)
    with pytest.raises(NotFound):
        await runner.start_backfill(replace(ORDERS, name="other"), t.trigger_id, START,
                                    NOW_MS)
    too_far = START - MAX_BACKFILL_OCCURRENCES * HOUR  # before DTSTART: only 10 occurrences
    assert (await runner.start_backfill(ORDERS, t.trigger_id, too_far, NOW_MS)).total == 10
    env.clock.advance_ms(MAX_BACKFILL_OCCURRENCES * HOUR)
    with pytest.raises(InvalidRequest) as e:
        await runner.start_backfill(ORDERS, t.trigger_id, START, env.clock.now_ms())
    assert e.value.extra.get("field") == "to"
    assert len(env.store.trigger_jobs) == 1


async def test_a_job_taken_over_goes_on_paced_from_now() -> None:
    env = make_env()
    t = await _series(env)
    a = _runner(env)
    env.store.failures["claim_trigger_job"] = StoreError("down")  # a's kick gets nowhere
    job = await a.start_backfill(ORDERS, t.trigger_id, START, NOW_MS)
    del env.store.failures["claim_trigger_job"]
    # As if a died after the first five, an hour ago.
    items = [i async for page in env.store.trigger_job_items(job.job_id) for i in page]
    for item in items[:5]:
        await env.store.set_trigger_item_state(job.job_id, item, ItemState.DONE, 60)
    env.clock.advance_ms(HOUR)
    b = TriggerJobRunner(env.settings, env.service, env.store, env.clock, owner="b")
    assert await b.run_once() == 5
    later = [env.store.triggers[_copy_id(t, START + k * HOUR)].fire_at_ms for k in range(5, 10)]
    now = env.clock.now_ms()
    assert later == [now + k * DEFAULT_PACE_MS for k in range(5)]
