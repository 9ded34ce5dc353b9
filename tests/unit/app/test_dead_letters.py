"""Dead-letter use cases on the in-memory fakes: scope, replay (one-time and series), purge,
bulk replay jobs (resumed after a crash, never replaying a letter twice)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from tests.unit.app.support import CALLBACK, NOW_MS, Env, make_env
from trigger_service.app.dead_letters import DeadLetterService
from trigger_service.app.replay_jobs import ReplayJobRunner
from trigger_service.core.dead_letters import (
    DeadLetter,
    DeadLetterQuery,
    DeadLetterReason,
    DeadLetterState,
    ItemState,
    JobStatus,
)
from trigger_service.core.errors import AlreadyReplayed, NotFound, NotReplayable
from trigger_service.core.model import Priority, Route, Status, Trigger, new_trigger_id
from trigger_service.core.time import series
from trigger_service.core.time.recurrence import Recurrence

ALL = DeadLetterQuery(None, 0, NOW_MS + 10**9)


def service(env: Env) -> DeadLetterService:
    return DeadLetterService(env.settings, env.store, env.service, env.clock, env.metrics)


async def dead(env: Env, caller: str = "orders", *, n: int = 0,
               reason: DeadLetterReason = DeadLetterReason.MAX_ATTEMPTS) -> DeadLetter:
    """A one-time trigger that failed (as the dispatcher leaves it) and its letter."""
    tid = new_trigger_id(NOW_MS - 60_000 + n)
    t = Trigger(tid, caller, CALLBACK, json.dumps({"n": n}), NOW_MS - 50_000, NOW_MS - 60_000,
                0, Route.DIRECT, status=Status.IN_FLIGHT, attempts=3, claim_id="c")
    failed = series.finished(t, fired=False, now_ms=NOW_MS - 1_000, error="HTTP 500")
    env.store.triggers[tid] = failed
    d = DeadLetter(t.occurrence_id, tid, caller, reason, "HTTP 500", 3, NOW_MS - 1_000 + n,
                   t.fire_at_ms, CALLBACK)
    await env.store.put_dead_letter(d, 60)
    return d


async def test_replay_revives_the_same_occurrence_once() -> None:
    env = make_env()
    d = await dead(env)
    new = await service(env).replay("orders", d.id)
    await env.service.drain()  # the SQS send runs after the answer
    assert (new.status, new.attempts, new.occurrence_id, new.fire_at_ms) == (
        Status.PENDING, 0, d.id, NOW_MS)
    assert env.store.triggers[d.trigger_id] == new
    assert [m.trigger_id for m in env.queue.messages] == [d.trigger_id]
    assert env.store.dead_letters[d.id].state is DeadLetterState.REPLAYED
    assert (await service(env).list_letters(ALL, None, 10)).items == []
    with pytest.raises(AlreadyReplayed):
        await service(env).replay("orders", d.id)
    assert len(env.queue.messages) == 1


async def test_a_jittered_trigger_is_replayed_exactly_when_asked() -> None:
    env = make_env()
    d = await dead(env)
    failed = env.store.triggers[d.trigger_id]
    env.store.triggers[d.trigger_id] = replace(failed, jitter_s=3600)
    new = await service(env).replay("orders", d.id, NOW_MS + 60_000)
    assert (new.fire_at_ms, new.scheduled_at_ms, new.jitter_s) == (
        NOW_MS + 60_000, NOW_MS + 60_000, 0)


@pytest.mark.parametrize(("expires_in_ms", "kept"), [(-10_000, False), (120_000, True)])
async def test_a_replay_of_an_expired_letter_drops_an_expiry_that_has_passed(
        expires_in_ms: int, kept: bool) -> None:
    env = make_env()
    d = await dead(env, reason=DeadLetterReason.EXPIRED)
    failed = env.store.triggers[d.trigger_id]
    expires_at_ms = NOW_MS + expires_in_ms
    env.store.triggers[d.trigger_id] = replace(failed, expires_at_ms=expires_at_ms,
                                               max_lateness_s=30)
    new = await service(env).replay("orders", d.id, NOW_MS + 60_000)
    assert new.expires_at_ms == (expires_at_ms if kept else None)
    assert new.max_lateness_s == 30  # relative to the replay's own fire time: kept


async def test_replay_later_and_scope() -> None:
    env = make_env()
    d = await dead(env)
    with pytest.raises(NotFound):
        await service(env).replay("billing", d.id)  # another caller's: as if unknown
    with pytest.raises(NotFound):
        await service(env).get("orders", "trg_nope.1")
    new = await service(env).replay(None, d.id, NOW_MS + 3_600_000)  # an operator
    assert new.fire_at_ms == NOW_MS + 3_600_000 and new.route is Route.SWEEP


async def test_a_letter_whose_trigger_was_revived_by_a_crashed_replay_is_not_revived_again(
        ) -> None:
    env = make_env()
    d = await dead(env)
    t = env.store.triggers[d.trigger_id]
    # The revival applied, then the process died before marking the letter.
    env.store.triggers[d.trigger_id] = replace(t, status=Status.PENDING, attempts=0,
                                                     occurrence_seq=t.occurrence_seq - 1)
    with pytest.raises(AlreadyReplayed):
        await service(env).replay(None, d.id)
    assert env.store.dead_letters[d.id].state is DeadLetterState.REPLAYED
    assert env.queue.messages == []


async def test_expired_trigger_is_not_replayable() -> None:
    env = make_env()
    d = await dead(env)
    del env.store.triggers[d.trigger_id]
    with pytest.raises(NotReplayable):
        await service(env).replay(None, d.id)


async def test_purge_takes_it_off_the_list_for_good() -> None:
    env = make_env()
    d, other = await dead(env, n=1), await dead(env, n=2)
    await service(env).purge("orders", d.id)
    assert [x.id for x in (await service(env).list_letters(ALL, None, 10)).items] == [other.id]
    with pytest.raises(NotFound):
        await service(env).get(None, d.id)
    assert d.trigger_id in env.store.triggers  # the trigger and its history stay


async def test_a_series_occurrence_is_replayed_by_a_one_time_copy_once() -> None:
    env = make_env()
    rec = Recurrence.from_dict({"kind": "rrule", "rule": "FREQ=DAILY",
                                "dtstart": "2023-11-14T09:00:00", "timeZone": "UTC",
                                "gap": "shift", "overlap": "first", "exdates": []})
    tid = new_trigger_id(NOW_MS - 60_000)
    live = Trigger(tid, "orders", CALLBACK, '{"s":1}', NOW_MS + 86_400_000, NOW_MS - 60_000, 0,
                   Route.SWEEP, schedule=rec, occurrence_seq=1)
    env.store.triggers[tid] = live  # it went on to its next occurrence
    d = DeadLetter(f"{tid}.1", tid, "orders", DeadLetterReason.GONE, "gone: HTTP 410", 1,
                   NOW_MS - 1_000, NOW_MS - 2_000, CALLBACK)
    await env.store.put_dead_letter(d, 60)
    copy = await service(env).replay("orders", d.id)
    assert copy.trigger_id != tid and copy.schedule is None and copy.snoozed_from == tid
    assert (copy.payload_json, copy.callback_url, copy.status) == ('{"s":1}', CALLBACK,
                                                                   Status.PENDING)
    assert env.store.triggers[tid] == live  # the series is untouched
    await env.store.put_dead_letter(d, 60)  # even if the letter showed up open again
    with pytest.raises(AlreadyReplayed):
        await service(env).replay("orders", d.id)


async def test_a_replay_keeps_the_priority_in_place_and_in_a_series_copy() -> None:
    env = make_env()
    d = await dead(env)
    env.store.triggers[d.trigger_id] = replace(env.store.triggers[d.trigger_id],
                                               priority=Priority.LOW)
    assert (await service(env).replay("orders", d.id)).priority is Priority.LOW
    rec = Recurrence.from_dict({"kind": "rrule", "rule": "FREQ=DAILY",
                                "dtstart": "2023-11-14T09:00:00", "timeZone": "UTC",
                                "gap": "shift", "overlap": "first", "exdates": []})
    tid = new_trigger_id(NOW_MS - 60_000)
    env.store.triggers[tid] = Trigger(tid, "orders", CALLBACK, "null", NOW_MS + 86_400_000,
                                      NOW_MS - 60_000, 0, Route.SWEEP, schedule=rec,
                                      occurrence_seq=1, priority=Priority.HIGH)
    letter = DeadLetter(f"{tid}.1", tid, "orders", DeadLetterReason.GONE, "gone: HTTP 410",
                        1, NOW_MS - 1_000, NOW_MS - 2_000, CALLBACK)
    await env.store.put_dead_letter(letter, 60)
    copy = await service(env).replay("orders", letter.id)
    assert copy.trigger_id != tid and copy.priority is Priority.HIGH


async def test_bulk_replay_runs_every_matching_letter_once() -> None:
    env = make_env()
    letters = [await dead(env, n=i) for i in range(12)]
    gone = await dead(env, n=99, reason=DeadLetterReason.GONE)
    svc = service(env)
    job = await svc.start_bulk(DeadLetterQuery(None, 0, NOW_MS + 10**9,
                                               DeadLetterReason.MAX_ATTEMPTS))
    assert job.total == 12
    runner = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="a")
    assert await runner.run_once() == 12
    final = await svc.job(None, job.job_id)
    assert (final.status, final.done, final.failed) == (JobStatus.DONE, 12, 0)
    assert all(env.store.triggers[d.trigger_id].status is Status.PENDING for d in letters)
    assert env.store.triggers[gone.trigger_id].status is Status.FAILED
    await env.service.drain()
    assert len(env.queue.messages) == 12
    assert await runner.run_once() == 0  # nothing open any more
    with pytest.raises(NotFound):
        await svc.job("billing", job.job_id)


async def test_bulk_replay_resumed_after_a_crash_replays_nothing_twice() -> None:
    env = make_env()
    letters = [await dead(env, n=i) for i in range(10)]
    svc = service(env)
    job = await svc.start_bulk(ALL)
    # The first runner replayed three letters and died before marking the third.
    for d in letters[:3]:
        await svc.replay(None, d.id)
    items = {i.id: i async for page in env.store.job_items(job.job_id) for i in page}
    for d in letters[:2]:
        await env.store.set_item_state(job.job_id, items[d.id], ItemState.DONE, 60)
    await env.store.claim_job(job.job_id, "dead-runner", env.clock.now_ms(), 30_000)
    other = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="b")
    assert await other.run_once() == 0  # the dead runner's lease still holds
    env.clock.advance_ms(30_001)
    # Two runners at once after the lease expired: one wins the job.
    counts = await asyncio.gather(other.run_once(), ReplayJobRunner(
        env.settings, svc, env.store, env.clock, owner="c").run_once())
    assert sorted(counts) == [0, 8]
    final = await svc.job(None, job.job_id)
    assert (final.status, final.done, final.failed) == (JobStatus.DONE, 10, 0)
    revisions = [env.store.triggers[d.trigger_id].revision for d in letters]
    assert revisions == [1] * 10  # each revived exactly once
    await env.service.drain()
    assert len(env.queue.messages) == 10


async def test_bulk_replay_goes_through_every_page_of_items_renewing_its_lease() -> None:
    env = make_env()
    env.store.page_size = 7  # 45 items: seven pages, the last of three
    letters = [await dead(env, n=i) for i in range(45)]
    svc = service(env)
    job = await svc.start_bulk(ALL)
    runner = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="a")
    assert await runner.run_once() == 45
    final = await svc.job(None, job.job_id)
    assert (final.status, final.done, final.failed) == (JobStatus.DONE, 45, 0)
    assert all(env.store.triggers[d.trigger_id].status is Status.PENDING for d in letters)
    assert env.store.calls["job_items"] == 1  # one read, page by page
    # The round's claim, then a renewal once 20 items were worked on since the last one.
    assert env.store.calls["claim_job"] == 3


async def test_a_runner_that_loses_its_lease_between_pages_stops_and_another_finishes() -> None:
    env = make_env()
    env.store.page_size = 7
    letters = [await dead(env, n=i) for i in range(30)]
    svc = service(env)
    job = await svc.start_bulk(ALL)
    a = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="a")
    # Another runner took the lease while "a" worked (its own had expired, say).
    real_claim = env.store.claim_job

    async def stolen(job_id: str, owner: str, now_ms: int, lease_ms: int) -> bool:
        if env.store.calls.get("claim_job", 0) >= 1:
            env.store.job_leases[job_id] = ("b", now_ms + lease_ms)
        return await real_claim(job_id, owner, now_ms, lease_ms)

    env.store.claim_job = stolen  # type: ignore[method-assign]
    assert await a.run_once() == 21  # three pages of seven, then the renewal failed
    assert (await svc.job(None, job.job_id)).status is JobStatus.RUNNING
    env.store.claim_job = real_claim  # type: ignore[method-assign]
    env.store.job_leases.clear()
    b = ReplayJobRunner(env.settings, svc, env.store, env.clock, owner="b")
    assert await b.run_once() == 9  # only the items still pending
    final = await svc.job(None, job.job_id)
    assert (final.status, final.done, final.failed) == (JobStatus.DONE, 30, 0)
    assert [env.store.triggers[d.trigger_id].revision for d in letters] == [1] * 30
