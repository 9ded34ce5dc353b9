"""The rezone pass on the in-memory fakes: an occurrence resolved under older zone rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from reconciler.rezone import Rezoner
from tests.unit.reconciler.test_reconciler import NOW_MS, SETTINGS
from trigger_service.adapters.memory.store import MemoryQueue, MemoryStore
from trigger_service.core.model import Route, Status, Trigger, new_trigger_id, shard_of
from trigger_service.core.time.clock import ManualClock
from trigger_service.core.time.recurrence import Recurrence, RuleKind
from trigger_service.core.time.timing import parse_rfc3339_ms
from trigger_service.core.time.zones import TZDATA_VERSION, DstPolicy
from trigger_service.platform.metrics import InMemoryMetrics

HOUR_MS = 3_600_000
# 09:00 New York on 2030-03-11 (EDT) is 13:00Z under the current rules.
RIGHT_MS = parse_rfc3339_ms("2030-03-11T13:00:00Z")


def wall_clock_trigger(fire_at_ms: int, version: str, status: Status = Status.PENDING) -> Trigger:
    tid = new_trigger_id(NOW_MS)
    rec = Recurrence(RuleKind.RRULE, "FREQ=DAILY", "America/New_York",
                     datetime(2030, 3, 10, 9, 0), DstPolicy())
    # Occurrence 1 (the 11th): an older release read it an hour off (as if DST began later).
    return Trigger(tid, "caller-a", "https://example.test/hook", "{}", fire_at_ms, NOW_MS,
                   shard_of(tid, SETTINGS.shards), Route.SWEEP, status=status, schedule=rec,
                   occurrence_index=1, tzdata_version=version)


async def test_an_occurrence_resolved_with_old_rules_moves_once() -> None:
    clock = ManualClock(NOW_MS)
    store, queue, metrics = MemoryStore(), MemoryQueue(clock), InMemoryMetrics()
    stale = wall_clock_trigger(RIGHT_MS + HOUR_MS, "2020a")
    current = wall_clock_trigger(RIGHT_MS, TZDATA_VERSION)
    busy = replace(wall_clock_trigger(RIGHT_MS + HOUR_MS, "2020a"), status=Status.IN_FLIGHT,
                   claim_id="c")
    for t in (stale, current, busy):
        await store.create(t, 3600)
    rezoner = Rezoner(SETTINGS, store, queue, clock, metrics)
    report = await rezoner.run_once()
    assert (report.checked, report.moved) == (1, 1)
    moved = await store.get(stale.trigger_id)
    assert moved is not None and moved.fire_at_ms == RIGHT_MS
    assert moved.tzdata_version == TZDATA_VERSION and moved.revision == 1
    assert moved.occurrence_index == 1 and moved.status is Status.PENDING
    assert await store.get(current.trigger_id) == current  # already on the current rules
    assert await store.get(busy.trigger_id) == busy  # in flight: left alone
    assert any(e.trigger_id == stale.trigger_id and e.fire_at_ms == RIGHT_MS
               for entries in store.buckets.values() for e in entries)
    assert metrics.snapshot()["rezoned_total"] == 1
    again = await rezoner.run_once()
    assert (again.checked, again.moved) == (0, 0)  # exactly once


async def test_an_unchanged_instant_only_records_the_release() -> None:
    clock = ManualClock(NOW_MS)
    store, queue = MemoryStore(), MemoryQueue(clock)
    t = wall_clock_trigger(RIGHT_MS, "2020a")
    await store.create(t, 3600)
    report = await Rezoner(SETTINGS, store, queue, clock, InMemoryMetrics()).run_once()
    assert (report.checked, report.moved) == (1, 0)
    row = await store.get(t.trigger_id)
    assert row is not None and row.fire_at_ms == RIGHT_MS
    assert row.tzdata_version == TZDATA_VERSION
    assert queue.sent == []


async def test_the_pass_goes_through_every_page_of_a_release_and_shard() -> None:
    clock = ManualClock(NOW_MS)
    store, queue, metrics = MemoryStore(), MemoryQueue(clock), InMemoryMetrics()
    store.page_size = 3  # ten triggers in one (release, shard): four pages
    stale = [replace(wall_clock_trigger(RIGHT_MS + HOUR_MS, "2020a"), shard=1)
             for _ in range(10)]
    for t in stale:
        await store.create(t, 3600)
    report = await Rezoner(SETTINGS, store, queue, clock, metrics).run_once()
    assert (report.checked, report.moved) == (10, 10)
    assert store.calls["get_many"] == 4  # a page's triggers read together, page by page
    for t in stale:
        moved = await store.get(t.trigger_id)
        assert moved is not None and moved.fire_at_ms == RIGHT_MS


async def test_a_jittered_occurrence_is_rezoned_by_its_scheduled_instant() -> None:
    """The pass compares the scheduled instant (not the jittered one) with the rules' answer,
    and a moved occurrence keeps its offset."""
    clock = ManualClock(NOW_MS)
    store, queue = MemoryStore(), MemoryQueue(clock)
    right = replace(wall_clock_trigger(RIGHT_MS, "2020a"), jitter_s=1800).jittered(RIGHT_MS)
    stale = replace(wall_clock_trigger(RIGHT_MS, "2020a"), jitter_s=1800).jittered(
        RIGHT_MS + HOUR_MS)
    assert right.jitter_ms > 0 and stale.jitter_ms > 0
    for t in (right, stale):
        await store.create(t, 3600)
    report = await Rezoner(SETTINGS, store, queue, clock, InMemoryMetrics()).run_once()
    assert (report.checked, report.moved) == (2, 1)
    kept, moved = await store.get(right.trigger_id), await store.get(stale.trigger_id)
    assert kept is not None and kept.fire_at_ms == right.fire_at_ms  # not "moved" by jitter
    assert moved is not None and moved.scheduled_at_ms == RIGHT_MS
    assert moved.fire_at_ms == RIGHT_MS + stale.jitter_ms
