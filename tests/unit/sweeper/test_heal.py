"""The due-scan: overdue triggers of the owned shards are re-sent within seconds."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Sequence
from dataclasses import replace

import pytest

from sweeper.heal import DueScan
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.config.settings import Settings
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id
from trigger_service.core.ports.values import BucketEntry, OutgoingMessage
from trigger_service.core.time.clock import ManualClock
from trigger_service.platform.metrics import InMemoryMetrics

START_MS = 1_800_000_000_000
GRACE_MS = 10_000
SETTINGS = Settings()
TIMEOUT_MS = int(SETTINGS.dispatch.callback_timeout_s * 1000)


class CountingStore(MemoryStore):
    """Counts the rows the scan reads."""

    rows_read = 0

    async def get_many_at(self, where: Sequence[tuple[str, int | None, int]]
                          ) -> list[Trigger | None]:
        self.rows_read += len(where)
        return await super().get_many_at(where)


class World:
    def __init__(self, settings: Settings = SETTINGS) -> None:
        self.clock = ManualClock(START_MS)
        self.store = CountingStore()
        self.queue = MemoryQueue(self.clock)
        self.metrics = InMemoryMetrics()
        self.scan = DueScan(settings, self.store, self.queue, self.clock, self.metrics)

    async def add(self, fire_in_ms: int, *, shard: int = 0, route: Route = Route.DIRECT,
                  **changes: object) -> Trigger:
        now = self.clock.now_ms()
        t = Trigger(new_trigger_id(now), "orders", "https://orders.internal/cb", "null",
                    now + fire_in_ms, now, shard, route)
        await self.store.create(t, 3600)
        if changes:
            t = self.store.triggers[t.trigger_id]  # as stored (with its home)
            self.store.triggers[t.trigger_id] = replace(t, status=
                changes.pop("status", Status.PENDING), **changes)  # type: ignore[arg-type]
        return self.store.triggers[t.trigger_id]

    def resent(self) -> list[str]:
        return [m.trigger_id for m in self.queue.sent]

    async def take_all(self) -> None:
        """A dispatcher receives whatever is visible (and, in these tests, loses it)."""
        await self.queue.receive(max_messages=10, wait_s=0, visibility_s=3600)


async def test_a_pending_trigger_past_the_grace_is_resent_with_doubling_pauses() -> None:
    w = World()
    lost = await w.add(1_000)  # its SQS message was lost
    w.clock.advance_ms(1_000 + GRACE_MS)
    assert (await w.scan.run_once([0])).resent == 0  # exactly at the grace: not yet
    w.clock.advance_ms(1)
    report = await w.scan.run_once([0])
    assert report.resent == 1 and w.resent() == [lost.trigger_id]
    assert w.queue.sent[0].delay_s == 0
    assert w.metrics.snapshot() == {"overdue_resent_total": 1}
    for pause_ms, expected in ((GRACE_MS, 2), (2 * GRACE_MS, 3), (4 * GRACE_MS, 4)):
        await w.take_all()  # ... and lost again
        w.clock.advance_ms(pause_ms - 1)
        await w.scan.run_once([0])
        assert len(w.resent()) == expected - 1, f"not before {pause_ms} ms"
        w.clock.advance_ms(1)
        await w.scan.run_once([0])
        assert w.resent() == [lost.trigger_id] * expected


async def test_no_resend_while_sqs_holds_a_backlog_as_large_as_the_overdue() -> None:
    """The dispatchers are behind, not missing messages: copies would only add load."""
    w = World()
    overdue = [await w.add(0) for _ in range(3)]
    await w.queue.send_many([OutgoingMessage(t.trigger_id, t.fire_at_ms, 0) for t in overdue])
    w.queue.sent.clear()
    w.clock.advance_ms(GRACE_MS + 1)
    report = await w.scan.run_once([0])
    assert (report.resent, report.deferred) == (0, 3) and w.resent() == []
    assert w.metrics.snapshot() == {"heal_deferred_total": 3}
    assert w.store.rows_read == 0  # not even read while the backlog covers them
    await w.take_all()  # received (and lost): the backlog is gone
    await w.scan.run_once([0])
    assert w.resent() == []  # looked at again a grace later
    w.clock.advance_ms(GRACE_MS)
    await w.scan.run_once([0])
    assert sorted(w.resent()) == sorted(t.trigger_id for t in overdue)


@pytest.mark.parametrize("stored", [10, 300])
async def test_what_the_scan_reads_does_not_grow_with_what_is_stored(stored: int) -> None:
    """Daily series that have fired once: each first occurrence's entry is read once; the
    next occurrences (a day ahead) are not watched, their own entries bring them back."""
    w = World()
    for _ in range(stored):
        first = await w.add(0)
        nxt = replace(first, status=Status.PENDING, fire_at_ms=first.fire_at_ms + 86_400_000,
                                revision=(first.revision or 0) + 1)
        assert await w.store.advance(first, nxt, 3600, w.clock.now_ms())
    w.clock.advance_ms(GRACE_MS + 1)
    first_pass = await w.scan.run_once([0])
    assert (first_pass.scanned, first_pass.watched, w.store.rows_read) == (stored, 0, stored)
    for _ in range(5):
        w.clock.advance_ms(5_000)
        await w.scan.run_once([0])
    assert w.store.rows_read == stored  # nothing more, however many are stored
    assert w.resent() == []


async def test_a_retry_is_not_read_again_before_it_could_be_overdue() -> None:
    w = World()
    t = await w.add(0, attempts=1, next_attempt_at_ms=START_MS + 60_000)
    w.clock.advance_ms(GRACE_MS + 1)
    assert (await w.scan.run_once([0])).watched == 1
    read = w.store.rows_read
    while w.clock.now_ms() <= START_MS + 60_000 + GRACE_MS:
        await w.scan.run_once([0])
        w.clock.advance_ms(5_000)
    assert w.store.rows_read == read  # waited, unread, until its retry time and the grace
    await w.scan.run_once([0])
    assert w.resent() == [t.trigger_id] and w.store.rows_read == read + 1


@pytest.mark.parametrize("route", [Route.DIRECT, Route.SWEEP])
async def test_both_routes_are_healed(route: Route) -> None:
    w = World()
    t = await w.add(0, route=route)
    w.clock.advance_ms(GRACE_MS + 1)
    await w.scan.run_once([0])
    assert w.resent() == [t.trigger_id]


@pytest.mark.parametrize("status", [Status.FIRED, Status.CANCELLED, Status.FAILED])
async def test_finished_triggers_are_not_resent_nor_watched(status: Status) -> None:
    w = World()
    await w.add(0, status=status)
    w.clock.advance_ms(GRACE_MS + 1)
    report = await w.scan.run_once([0])
    assert report.resent == 0 and report.watched == 0 and report.scanned == 1


async def test_a_trigger_that_fires_in_time_stops_being_watched() -> None:
    w = World()
    t = await w.add(0)
    w.clock.advance_ms(GRACE_MS // 2)
    await w.scan.run_once([0])  # not yet scanned (the scan stops at now - grace)
    w.clock.advance_ms(GRACE_MS)
    w.store.triggers[t.trigger_id] = replace(t, status=Status.FIRED)
    report = await w.scan.run_once([0])
    assert report.resent == 0 and report.watched == 0


async def test_a_trigger_waiting_for_a_retry_is_watched_and_healed_once_overdue() -> None:
    w = World()
    t = await w.add(0, attempts=1, next_attempt_at_ms=START_MS + 60_000)
    w.clock.advance_ms(GRACE_MS + 1)
    report = await w.scan.run_once([0])
    assert report.resent == 0 and report.watched == 1
    w.clock.set_ms(START_MS + 60_000 + GRACE_MS + 1)
    report = await w.scan.run_once([0])
    assert w.resent() == [t.trigger_id] and report.scanned == 0  # found through the watch


async def test_a_stale_claim_is_resent_and_a_live_one_is_not() -> None:
    w = World()
    live = await w.add(0, status=Status.IN_FLIGHT, claim_id="c", claimed_at_ms=START_MS,
                       attempts=1)
    dead = await w.add(0, shard=1, status=Status.IN_FLIGHT, claim_id="d",
                       claimed_at_ms=START_MS, attempts=1)
    stale_at = dead.claim_stale_at_ms(TIMEOUT_MS)
    w.clock.set_ms(stale_at + GRACE_MS + 1)
    w.store.triggers[live.trigger_id] = replace(live, status=
        Status.IN_FLIGHT, claimed_at_ms=w.clock.now_ms())  # taken over just now
    await w.scan.run_once([0, 1])
    assert w.resent() == [dead.trigger_id]


async def test_a_shard_is_read_from_where_it_left_off_and_only_owned_shards() -> None:
    w = World()
    await w.add(0)
    other = await w.add(0, shard=3)
    w.clock.advance_ms(GRACE_MS + 1)
    first = await w.scan.run_once([0])
    second = await w.scan.run_once([0])
    assert first.scanned == 1 and second.scanned == 0
    assert other.trigger_id not in w.resent()


async def test_a_new_owner_starts_the_lookback_back_and_forget_drops_a_shard() -> None:
    settings = replace(SETTINGS, heal=replace(SETTINGS.heal, lookback_s=60))
    w = World(settings)
    old = await w.add(0)
    w.clock.advance_ms(120_000)
    recent = await w.add(0)
    w.clock.advance_ms(GRACE_MS + 1)
    await w.scan.run_once([0])
    assert w.resent() == [recent.trigger_id]  # the old one is the reconciler's
    w.scan.forget(0)
    w.clock.advance_ms(GRACE_MS)
    report = await w.scan.run_once([0])  # starts over: lookback again
    assert old.trigger_id not in w.resent() and report.scanned == 1


async def test_a_store_error_leaves_the_cursor_for_the_next_pass() -> None:
    w = World()
    t = await w.add(0)
    w.clock.advance_ms(GRACE_MS + 1)
    w.store.failures["get_many"] = StoreError("down")
    with pytest.raises(StoreError):
        await w.scan.run_once([0])
    del w.store.failures["get_many"]
    await w.scan.run_once([0])
    assert w.resent() == [t.trigger_id]


async def test_a_pass_running_while_its_shard_changes_owner_does_not_undo_the_fresh_start(
) -> None:
    """Seen in a chaos run: a Redis FLUSHALL took the leases while a pass was reading; the
    shard was owned again at once, and the old pass wrote its cursor and its (now empty)
    watch back, so a watched overdue trigger was never looked at again."""
    w = World()
    overdue = await w.add(0)
    await w.queue.send_many([OutgoingMessage("someone-else", START_MS, 0)])  # a backlog
    w.queue.sent.clear()
    w.clock.advance_ms(GRACE_MS + 1)
    assert (await w.scan.run_once([0])).deferred == 1  # watched, not re-sent yet
    reading, go_on = asyncio.Event(), asyncio.Event()
    read = w.store.bucket_entries

    async def slow_read(shard: int, start_ms: int, until_ms: int) -> list[BucketEntry]:
        reading.set()
        await go_on.wait()
        return await read(shard, start_ms, until_ms)

    w.store.bucket_entries = slow_read  # type: ignore[method-assign,assignment]
    w.clock.advance_ms(2_000)
    running = asyncio.create_task(w.scan.run_once([0]))
    await reading.wait()
    w.scan.forget(0)  # the lease is lost (and this process owns the shard again)
    go_on.set()
    await running
    w.store.bucket_entries = read  # type: ignore[method-assign]
    await w.take_all()  # the backlog is gone
    w.clock.advance_ms(2_000)
    assert (await w.scan.run_once([0])).resent == 1
    assert w.resent() == [overdue.trigger_id]


async def test_a_pass_cancelled_while_shards_wait_for_a_slot_leaves_no_step_unawaited(
) -> None:
    """Seen at a test's teardown: the sweeper stopped while a pass's shards waited for the
    scan's slots, and the reads made for them before they got one were never awaited
    ("coroutine 'DueScan._index' was never awaited"). A step is made once it has a slot."""
    w = World()
    reading, never = asyncio.Event(), asyncio.Event()

    async def stuck_read(shard: int, start_ms: int, until_ms: int) -> list[BucketEntry]:
        reading.set()
        await never.wait()
        return []

    w.store.bucket_entries = stuck_read  # type: ignore[method-assign,assignment]
    running = asyncio.create_task(w.scan.run_once(range(64)))  # more shards than slots
    await reading.wait()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        del running
        gc.collect()
    assert [str(x.message) for x in seen if x.category is RuntimeWarning] == []
