"""Reconciler passes on the in-memory fakes and a ManualClock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import pytest

from reconciler.reconciler import PassReport, Reconciler
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.config.settings import Settings
from trigger_service.core.errors import QueueError, StoreError
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id, shard_of
from trigger_service.core.ports.values import BucketEntry, OutgoingMessage
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

NOW_MS = 1_700_000_000_000
SHARDS = 4
SETTINGS = replace(Settings(), shards=SHARDS)
GRACE_MS = SETTINGS.reconcile.grace_s * 1000
WINDOW_MS = SETTINGS.reconcile.window_s * 1000
TO_MS = NOW_MS - GRACE_MS  # the newest fire time a pass reads
FROM_MS = TO_MS - WINDOW_MS  # the window's older end
TIMEOUT_MS = int(SETTINGS.dispatch.callback_timeout_s * 1000)


@dataclass
class Rig:
    clock: ManualClock
    store: MemoryStore
    queue: MemoryQueue
    metrics: InMemoryMetrics
    reconciler: Reconciler

    def sent_ids(self) -> list[str]:
        return [m.trigger_id for m in self.queue.sent]

    def leaks(self) -> int:
        return self.metrics.snapshot().get("leaks_reinjected_total", 0)


@pytest.fixture
def rig() -> Rig:
    clock = ManualClock(NOW_MS)
    store, queue, metrics = MemoryStore(), MemoryQueue(clock), InMemoryMetrics()
    return Rig(clock, store, queue, metrics, Reconciler(SETTINGS, store, queue, clock, metrics))


async def put(store: MemoryStore, fire_at_ms: int, *, shard: int = 0,
              route: Route = Route.DIRECT, status: Status = Status.PENDING,
              **changes: Any) -> Trigger:
    """A trigger created before its fire time, then moved to ``status`` with ``changes``."""
    created_ms = fire_at_ms - 60_000
    while shard_of(trigger_id := new_trigger_id(created_ms), SHARDS) != shard:
        pass
    t = Trigger(trigger_id, "caller-a", "https://example.test/hook", "{}", fire_at_ms,
                created_ms, shard, route)
    await store.create(t, 3600)
    if status is not Status.PENDING or changes:
        moved = replace(t, status=status, **changes)
        assert await store.compare_and_set(t, moved)
        return moved
    return t


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.mark.parametrize("route", [Route.DIRECT, Route.SWEEP])
async def test_pending_past_the_grace_is_reinjected_with_no_delay(rig: Rig, route: Route) -> None:
    t = await put(rig.store, TO_MS - 60_000, shard=2, route=route)
    report = await rig.reconciler.run_once()
    assert report == PassReport(scanned=1, reinjected=1, window_to_ms=TO_MS)
    assert rig.queue.sent == [OutgoingMessage(t.trigger_id, t.fire_at_ms, 0)]
    assert rig.queue.visible_at_ms(t.trigger_id) == [NOW_MS]
    assert rig.leaks() == 1


async def test_pending_waiting_for_a_retry_within_the_grace_is_not_resent(rig: Rig) -> None:
    await put(rig.store, TO_MS - 60_000, attempts=2, next_attempt_at_ms=NOW_MS - 60_000)
    report = await rig.reconciler.run_once()
    assert (report.scanned, report.reinjected) == (1, 0)
    assert rig.queue.sent == []
    assert rig.leaks() == 0


async def test_a_trigger_due_within_the_grace_is_not_even_read(rig: Rig) -> None:
    await put(rig.store, NOW_MS - 60_000)
    await put(rig.store, TO_MS + 1, shard=1)
    report = await rig.reconciler.run_once()
    assert report.scanned == 0
    assert rig.queue.sent == []


@pytest.mark.parametrize("status", [Status.FIRED, Status.CANCELLED, Status.FAILED])
async def test_finished_triggers_are_not_resent(rig: Rig, status: Status) -> None:
    await put(rig.store, TO_MS - 60_000, status=status)
    report = await rig.reconciler.run_once()
    assert (report.scanned, report.reinjected) == (1, 0)
    assert rig.queue.sent == []
    assert "send" not in rig.queue.calls
    assert rig.leaks() == 0


async def test_a_stale_in_flight_claim_is_reinjected(rig: Rig) -> None:
    fire_ms = TO_MS - 60_000
    t = await put(rig.store, fire_ms, status=Status.IN_FLIGHT, claim_id="c1",
                  claimed_at_ms=fire_ms - 500, attempts=1)
    assert t.claim_stale_at_ms(TIMEOUT_MS) < TO_MS
    report = await rig.reconciler.run_once()
    assert report.reinjected == 1
    assert rig.queue.sent == [OutgoingMessage(t.trigger_id, fire_ms, 0)]
    assert rig.leaks() == 1


async def test_a_recent_in_flight_claim_is_left_alone(rig: Rig) -> None:
    # a retry of an old trigger, claimed a minute ago: within the grace
    await put(rig.store, TO_MS - 60_000, status=Status.IN_FLIGHT, claim_id="c2",
              claimed_at_ms=NOW_MS - 60_000, attempts=3, next_attempt_at_ms=NOW_MS - 60_000)
    report = await rig.reconciler.run_once()
    assert (report.scanned, report.reinjected) == (1, 0)
    assert rig.queue.sent == []


async def test_only_the_window_between_grace_and_grace_plus_window_is_read(rig: Rig) -> None:
    newest = await put(rig.store, TO_MS - 1, shard=0)
    await put(rig.store, TO_MS, shard=0)  # read, but exactly at the grace: not a leak yet
    oldest = await put(rig.store, FROM_MS + 1, shard=1)
    await put(rig.store, FROM_MS - 1, shard=2)  # a leak, but older than the window
    await put(rig.store, TO_MS + 1, shard=3)
    report = await rig.reconciler.run_once()
    assert report.window_to_ms == TO_MS  # a first pass starts FROM_MS: no cursor yet
    assert report.scanned == 3
    assert sorted(rig.sent_ids()) == sorted([newest.trigger_id, oldest.trigger_id])
    assert rig.leaks() == 2


async def test_the_window_follows_the_clock(rig: Rig) -> None:
    t = await put(rig.store, TO_MS + 60_000)
    assert (await rig.reconciler.run_once()).scanned == 0
    rig.clock.advance_ms(60_000)
    report = await rig.reconciler.run_once()
    assert report.window_to_ms == TO_MS + 60_000
    assert report.reinjected == 0  # read now, but exactly at the grace: not yet a leak
    rig.clock.advance_ms(1)
    assert (await rig.reconciler.run_once()).reinjected == 1
    assert rig.sent_ids() == [t.trigger_id]


async def test_an_empty_pass_reads_every_shard_and_sends_nothing(rig: Rig) -> None:
    report = await rig.reconciler.run_once()
    assert report == PassReport(0, 0, TO_MS)
    assert rig.store.calls["bucket_entries"] == SHARDS
    assert "send" not in rig.queue.calls
    assert rig.metrics.snapshot() == {}


async def test_leaks_in_every_shard_are_all_reinjected_in_one_pass(rig: Rig) -> None:
    ids = {(await put(rig.store, TO_MS - 1000 * (s + 1), shard=s)).trigger_id
           for s in range(SHARDS)}
    report = await rig.reconciler.run_once()
    assert report.reinjected == SHARDS
    assert set(rig.sent_ids()) == ids and len(rig.queue.sent) == SHARDS


async def test_many_leaks_are_read_in_chunks_and_each_sent_once(rig: Rig) -> None:
    ids = [(await put(rig.store, TO_MS - 1000 - i, shard=i % SHARDS)).trigger_id
           for i in range(501)]
    report = await rig.reconciler.run_once()
    assert (report.scanned, report.reinjected) == (501, 501)
    assert rig.store.calls["get_many"] == SHARDS  # each shard's ~125 rows in one read
    assert sorted(rig.sent_ids()) == sorted(ids)
    assert rig.leaks() == 501


async def test_a_leak_is_resent_each_pass_until_it_moves_on(rig: Rig) -> None:
    t = await put(rig.store, TO_MS - 60_000)
    await rig.reconciler.run_once()
    await rig.reconciler.run_once()
    assert rig.sent_ids() == [t.trigger_id, t.trigger_id]
    assert await rig.store.compare_and_set(t, replace(t, status=Status.FIRED))
    assert (await rig.reconciler.run_once()).reinjected == 0
    assert len(rig.queue.sent) == 2


class ShardFailingStore(MemoryStore):
    """Every read of one shard's due index fails."""

    def __init__(self, bad_shard: int) -> None:
        super().__init__()
        self.bad_shard = bad_shard

    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        if shard == self.bad_shard:
            raise StoreError("cassandra: that replica is down")
        return await super().bucket_entries(shard, after_ms, until_ms)


async def test_a_failing_shard_keeps_its_cursor_and_the_others_go_on() -> None:
    clock = ManualClock(NOW_MS)
    store, queue, metrics = ShardFailingStore(bad_shard=1), MemoryQueue(clock), InMemoryMetrics()
    reconciler = Reconciler(SETTINGS, store, queue, clock, metrics)
    leaks = {s: await put(store, TO_MS - 60_000, shard=s) for s in range(SHARDS)}
    report = await reconciler.run_once()
    assert report.failed_shards == (1,) and report.reinjected == SHARDS - 1
    assert sorted(m.trigger_id for m in queue.sent) == sorted(
        t.trigger_id for s, t in leaks.items() if s != 1)
    assert metrics.snapshot()["reconcile_shard_failures_total"] == 1
    cursors = await store.load_cursors(reconciler.cursor_group)
    assert 1 not in cursors and set(cursors) == {0, 2, 3}


async def test_a_queue_error_fails_the_shard_and_no_leak_is_counted(rig: Rig) -> None:
    await put(rig.store, TO_MS - 60_000)
    rig.queue.failures["send"] = QueueError("sqs down")
    report = await rig.reconciler.run_once()
    assert report.failed_shards == (0,) and rig.leaks() == 0


async def test_later_passes_read_from_the_cursor(rig: Rig) -> None:
    await put(rig.store, TO_MS - 60_000, status=Status.FIRED)
    assert (await rig.reconciler.run_once()).scanned == 1
    rig.clock.advance_ms(60_000)
    fresh = await put(rig.store, TO_MS + 30_000, shard=1)
    report = await rig.reconciler.run_once()
    assert report.scanned == 1 and rig.sent_ids() == [fresh.trigger_id]  # not the old one


async def test_an_open_trigger_holds_the_cursor_until_it_finishes(rig: Rig) -> None:
    waiting = await put(rig.store, TO_MS - 60_000, status=Status.PENDING, attempts=2,
                        next_attempt_at_ms=NOW_MS + 3_600_000)  # a retry in an hour
    await put(rig.store, TO_MS - 30_000, status=Status.FIRED)
    assert (await rig.reconciler.run_once()).scanned == 2
    cursor = (await rig.store.load_cursors(rig.reconciler.cursor_group))[0]
    assert cursor == waiting.fire_at_ms - 1
    rig.clock.advance_ms(2 * 3_600_000 + 1)  # the retry was lost too: now it is a leak
    assert (await rig.reconciler.run_once()).reinjected == 1
    assert rig.sent_ids() == [waiting.trigger_id]
    assert await rig.store.compare_and_set(waiting, replace(waiting, status=Status.FIRED))
    await rig.reconciler.run_once()
    cursor = (await rig.store.load_cursors(rig.reconciler.cursor_group))[0]
    assert cursor == rig.clock.now_ms() - GRACE_MS


async def test_a_cursor_never_falls_back_further_than_the_lookback(rig: Rig) -> None:
    lookback_ms = SETTINGS.reconcile.lookback_h * 3_600_000
    await rig.store.save_cursor(rig.reconciler.cursor_group, 0, NOW_MS - 10 * lookback_ms,
                                "reconciler", 0)
    too_old = await put(rig.store, NOW_MS - lookback_ms - 60_000)
    kept = await put(rig.store, NOW_MS - lookback_ms + 60_000)
    await rig.reconciler.run_once()
    assert rig.sent_ids() == [kept.trigger_id] and too_old.trigger_id not in rig.sent_ids()


async def test_run_passes_at_once_survives_adapter_errors_and_stops(rig: Rig) -> None:
    t = await put(rig.store, TO_MS - 60_000)
    stop = asyncio.Event()
    task = asyncio.create_task(rig.reconciler.run(stop))
    await settle()
    assert rig.sent_ids() == [t.trigger_id]
    assert not task.done()
    stop.set()
    await task
    rig.store.failures["bucket_entries"] = StoreError("cassandra down")
    stop = asyncio.Event()
    task = asyncio.create_task(rig.reconciler.run(stop))
    await settle()
    assert not task.done()  # logged, waiting for the next pass
    stop.set()
    await task
    assert len(rig.queue.sent) == 1
