"""``TriggerCatalog``/``TriggerStates``, ``IdempotencyStore``, ``DueIndex`` and
``SweepCursors``: ``MemoryStore`` and ``CassandraStore`` against one contract."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.conftest import KEYSPACE
from tests.contract.support import (
    INDEX_TTL_S,
    MIN_MS,
    Store,
    make_trigger,
    rows_per_call,
    unique,
    utc_ms,
)
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.core.model import (
    Priority,
    Route,
    Status,
    Trigger,
    fire_month,
    new_trigger_id,
    row_partition,
)
from trigger_service.core.ports.idempotency import IdempotencyRecord
from trigger_service.core.ports.values import NEWEST, BucketEntry, ListCursor


def _shard() -> int:
    """A shard number no other test uses, so its bucket partitions are this test's alone."""
    return random.randrange(1_000, 2**31 - 1)


async def _create(store: Store, *triggers: Trigger) -> None:
    for t in triggers:
        await store.create(t, INDEX_TTL_S)


async def test_create_then_get_round_trips_every_field(store: Store) -> None:
    caller = unique("caller-")
    direct = make_trigger(caller, utc_ms(2031, 5, 6, 7, 8, 9, 123), shard=_shard(),
                          route=Route.DIRECT, idem_key=unique("key-"))
    swept = make_trigger(caller, utc_ms(2031, 5, 6, 7, 8, 9, 124), shard=_shard())
    await _create(store, direct, swept)
    assert await store.get(direct.trigger_id) == direct
    assert await store.get(swept.trigger_id) == swept
    assert await store.get(new_trigger_id(direct.created_at_ms)) is None


async def test_a_jitter_window_round_trips_and_can_be_removed(store: Store) -> None:
    t = replace(make_trigger(unique("caller-"), utc_ms(2031, 5, 6, 7), shard=_shard()),
                jitter_s=1800)
    jittered = t.jittered(t.fire_at_ms)
    await _create(store, jittered)
    got = await store.get(t.trigger_id)
    assert got == jittered and got is not None and got.scheduled_at_ms == t.fire_at_ms
    plain = replace(jittered, jitter_s=0, revision=1).jittered(t.fire_at_ms)
    assert await store.compare_and_set(jittered, plain)
    assert await store.get(t.trigger_id) == plain  # the cell is gone: no jitter


async def test_deadlines_round_trip_and_can_be_removed(store: Store) -> None:
    t = replace(make_trigger(unique("caller-"), utc_ms(2031, 5, 6, 7), shard=_shard()),
                expires_at_ms=utc_ms(2031, 5, 7), max_lateness_s=90)
    await _create(store, t)
    got = await store.get(t.trigger_id)
    assert got == t and got is not None
    assert (got.expires_at_ms, got.max_lateness_s) == (utc_ms(2031, 5, 7), 90)
    plain = replace(t, expires_at_ms=None, max_lateness_s=None, revision=1)
    assert await store.compare_and_set(t, plain)
    assert await store.get(t.trigger_id) == plain  # the cells are gone: no deadline


async def test_the_registering_traceparent_round_trips(store: Store) -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    t = replace(make_trigger(unique("caller-"), utc_ms(2031, 5, 6, 8), shard=_shard()),
                trace_parent=parent)
    await _create(store, t)
    got = await store.get(t.trigger_id)
    assert got == t and got is not None and got.trace_parent == parent
    claimed = replace(t, status=Status.IN_FLIGHT, claim_id="c1", attempts=1)
    assert await store.compare_and_set(t, claimed)
    again = await store.get(t.trigger_id)
    assert again is not None and again.trace_parent == parent  # a claim keeps it


async def test_a_priority_round_trips_and_normal_leaves_no_cell(store: Store) -> None:
    t = replace(make_trigger(unique("caller-"), utc_ms(2031, 5, 6, 9), shard=_shard()),
                priority=Priority.HIGH)
    await _create(store, t)
    got = await store.get(t.trigger_id)
    assert got == t and got is not None and got.priority is Priority.HIGH
    low = replace(t, priority=Priority.LOW, revision=1)  # an edit of the priority alone
    assert await store.compare_and_set(t, low)
    assert (await store.get(t.trigger_id)) == low
    normal = replace(low, priority=Priority.NORMAL, revision=2)
    assert await store.compare_and_set(low, normal)
    again = await store.get(t.trigger_id)
    assert again == normal and again is not None and again.priority is Priority.NORMAL


@pytest.mark.integration
async def test_a_row_written_before_the_priority_column_reads_normal(
        cassandra_store: CassandraStore) -> None:
    """A row of an earlier release has no ``priority`` cell (033): it reads as normal."""
    t = replace(make_trigger(unique("caller-"), utc_ms(2031, 5, 6, 10), shard=_shard()),
                priority=Priority.LOW)
    await cassandra_store.create(t, INDEX_TTL_S)
    second, row_shard = row_partition(t.fire_at_ms, t.shard)
    cassandra_store._session.execute(  # the cell gone, as if never written
        f"UPDATE {KEYSPACE}.{schema.TABLE_BY_SECOND} SET {schema.COL_PRIORITY} = null "
        f"WHERE {schema.COL_HOME_SECOND} = %s AND {schema.COL_ROW_SHARD} = %s "
        f"AND {schema.COL_HOME_AT_MS} = %s AND {schema.COL_TRIGGER_ID} = %s",
        (second, row_shard, t.fire_at_ms, t.trigger_id))
    got = await cassandra_store.get(t.trigger_id)
    assert got == replace(t, priority=Priority.NORMAL)


async def test_create_twice_is_idempotent_and_never_undoes_a_transition(store: Store) -> None:
    caller, shard = unique("caller-"), _shard()
    t = make_trigger(caller, utc_ms(2031, 1, 1, 0, 0, 30), shard=shard)
    await _create(store, t, t)
    assert await store.get(t.trigger_id) == t
    cancelled = replace(t, status=Status.CANCELLED, last_error="cancelled by caller")
    assert await store.compare_and_set(t, cancelled)
    await _create(store, t)
    assert await store.get(t.trigger_id) == cancelled
    page = await store.list_by_caller(caller, start=NEWEST,
                                      last_month=fire_month(t.fire_at_ms), limit=10, status=None)
    assert page.triggers == [cancelled]
    entries = await store.bucket_entries(shard, t.fire_at_ms - 1, t.fire_at_ms)
    assert entries == [BucketEntry(t.trigger_id, t.fire_at_ms, shard, t.route)]
    assert entries[0].home_at_ms == t.fire_at_ms  # where its row is, for the due-scan


async def test_get_many_at_reads_where_the_index_says_and_through_the_pointer_else(
    store: Store,
) -> None:
    caller = unique("caller-")
    a, b, c = (make_trigger(caller, utc_ms(2031, 2, 4, h), shard=_shard()) for h in (1, 2, 3))
    await _create(store, a, b, c)
    got = await store.get_many_at([
        (a.trigger_id, a.fire_at_ms, a.shard),  # its home: read there
        (b.trigger_id, None, b.shard),  # not known: through the pointer
        (c.trigger_id, c.fire_at_ms + 1_000, c.shard),  # not its home: no row there
        ("trg_missing", None, 0),
    ])
    assert got == [a, b, None, None]


async def test_compare_and_set_applies_only_when_status_claim_attempts_and_revision_match(
    store: Store,
) -> None:
    t = make_trigger(unique("caller-"), utc_ms(2031, 2, 3), shard=_shard())
    await _create(store, t)
    claimed = replace(t, status=Status.IN_FLIGHT, claim_id="claim-1", claimed_at_ms=t.created_at_ms)
    for stale in (replace(t, status=Status.IN_FLIGHT), replace(t, claim_id="claim-0"),
                  replace(t, attempts=1), replace(t, trigger_id=new_trigger_id(1))):
        assert not await store.compare_and_set(stale, replace(claimed, trigger_id=stale.trigger_id))
    assert await store.get(t.trigger_id) == t
    # Every column is written: a series' next occurrence or an edit moves the rest too.
    moved = replace(claimed, payload_json='{"v":2}', fire_at_ms=t.fire_at_ms + 1)
    assert await store.compare_and_set(t, moved)
    assert await store.get(t.trigger_id) == moved
    assert not await store.compare_and_set(t, claimed), "the old state no longer matches"
    # An edit bumps the revision: a copy read before it can no longer win.
    claimed = replace(moved, revision=1)
    assert await store.compare_and_set(moved, claimed)
    assert not await store.compare_and_set(moved, replace(moved, last_error="x"))
    assert await store.get(t.trigger_id) == claimed
    retry = replace(claimed, status=Status.PENDING, attempts=1, last_error="HTTP 503",
                                claim_id=None, claimed_at_ms=None,
                                next_attempt_at_ms=t.fire_at_ms + 10_000)
    assert await store.compare_and_set(claimed, retry)
    assert await store.get(t.trigger_id) == retry
    fired = replace(retry, status=Status.IN_FLIGHT, claim_id="claim-2", claimed_at_ms=t.fire_at_ms)
    assert await store.compare_and_set(retry, fired)
    done = replace(fired, status=Status.FIRED, fired_at_ms=t.fire_at_ms + 10_050, last_error=None)
    assert await store.compare_and_set(fired, done, ttl_s=3_600)
    assert await store.get(t.trigger_id) == done


async def test_get_many_keeps_order_with_none_for_unknown_ids(store: Store) -> None:
    caller = unique("caller-")
    a = make_trigger(caller, utc_ms(2031, 3, 1), shard=_shard())
    b = make_trigger(caller, utc_ms(2031, 3, 2), shard=_shard())
    await _create(store, a, b)
    unknown = new_trigger_id(a.created_at_ms)
    ids = [b.trigger_id, unknown, a.trigger_id, b.trigger_id]
    assert await store.get_many(ids) == [b, None, a, b]
    assert await store.get_many([]) == []


async def _listing(store: Store) -> tuple[str, list[Trigger]]:
    """A caller with 8 triggers (two due at one instant, two on a month edge, over five
    months); returns it and them newest created first."""
    caller = unique("caller-")
    times = [utc_ms(2031, 4, 1), utc_ms(2031, 2, 1), utc_ms(2031, 1, 31, 23, 59, 59, 999),
             utc_ms(2031, 3, 10), utc_ms(2031, 1, 15), utc_ms(2031, 2, 1),
             utc_ms(2031, 2, 14, 12), utc_ms(2030, 12, 31)]
    made = [make_trigger(caller, ms, shard=_shard()) for ms in times]
    await _create(store, *made)
    return caller, sorted(made, key=lambda t: (t.created_at_ms, t.trigger_id), reverse=True)


JAN: ListCursor = (203101, MIN_MS, "")
MAR = 203103


async def test_list_without_an_open_status_is_newest_created_first_and_filters_status(
    store: Store,
) -> None:
    caller, expected = await _listing(store)
    page = await store.list_by_caller(caller, start=NEWEST, last_month=MAR, limit=100,
                                      status=None)
    assert page.triggers == expected
    assert page.next_cursor is None
    for t in expected[1::2]:
        assert await store.compare_and_set(t, replace(t, status=Status.CANCELLED))
    cancelled = await store.list_by_caller(caller, start=NEWEST, last_month=MAR, limit=100,
                                           status=Status.CANCELLED)
    assert [t.trigger_id for t in cancelled.triggers] == [t.trigger_id for t in expected[1::2]]
    assert all(t.status is Status.CANCELLED for t in cancelled.triggers)
    in_q1 = [t for t in expected[0::2] if fire_month(t.fire_at_ms) in (203101, 203102, 203103)]
    pending = await store.list_by_caller(caller, start=JAN, last_month=MAR, limit=100,
                                         status=Status.PENDING)
    assert pending.triggers == sorted(in_q1, key=lambda t: (t.fire_at_ms, t.trigger_id))
    nobody = await store.list_by_caller(unique("caller-"), start=NEWEST, last_month=MAR,
                                        limit=100, status=None)
    assert nobody.triggers == [] and nobody.next_cursor is None


async def _all_pages(store: Store, caller: str, limit: int,
                     status: Status | None) -> list[list[Trigger]]:
    pages: list[list[Trigger]] = []
    cursor: ListCursor | None = (
        JAN if status in (Status.PENDING, Status.IN_FLIGHT) else NEWEST)
    while cursor is not None:
        assert len(pages) < 20, "the cursor never ran out"
        page = await store.list_by_caller(caller, start=cursor, last_month=203112,
                                          limit=limit, status=status)
        assert len(page.triggers) <= limit
        pages.append(page.triggers)
        cursor = page.next_cursor
    return pages


async def test_list_by_caller_paginates_until_none_without_duplicates_or_gaps(
    store: Store,
) -> None:
    caller, expected = await _listing(store)
    for limit in (1, 2, 4, 5, 7, 8, 9):
        pages = await _all_pages(store, caller, limit, None)
        assert [t for p in pages for t in p] == expected, f"limit {limit}"
    for t in expected[:3]:
        assert await store.compare_and_set(t, replace(t, status=Status.FIRED, fired_at_ms=1))
    by_fire = sorted(expected[3:], key=lambda t: (t.fire_at_ms, t.trigger_id))
    for limit in (1, 2):
        pages = await _all_pages(store, caller, limit, Status.PENDING)
        assert [t for p in pages for t in p] == by_fire, f"PENDING, limit {limit}"


async def test_list_by_caller_ends_with_at_most_one_empty_page(store: Store) -> None:
    """``next_cursor`` is None once nothing is left; a full page that ends on the last trigger
    may still carry a cursor, which then gives one empty page (Cassandra cannot tell without
    reading ahead)."""
    caller, expected = await _listing(store)
    for limit in (3, 4, 8):
        sizes = [len(p) for p in await _all_pages(store, caller, limit, None)]
        full = len(expected) // limit
        assert sizes[:full] == [limit] * full, f"limit {limit}"
        assert sizes[full:] in ([], [0], [len(expected) % limit]), f"limit {limit}"


def _keyed(t: Trigger, request_hash: str = "hash-1", **changes: Any) -> Trigger:
    """``t`` as a keyed registration's row: its key's record rides on it."""
    return replace(t, request_hash=request_hash, registered_fire_at_ms=t.fire_at_ms, **changes)


async def test_a_keyed_row_round_trips_its_record_and_keeps_it_through_transitions(
    store: Store,
) -> None:
    t = _keyed(make_trigger(unique("caller-"), utc_ms(2031, 6, 3), shard=_shard(),
                            idem_key=unique("key-")))
    await _create(store, t)
    assert await store.get(t.trigger_id) == t
    moved = replace(t, fire_at_ms=t.fire_at_ms + 86_400_000, occurrence_seq=1)
    assert await store.compare_and_set(t, moved)
    done = replace(moved, status=Status.CANCELLED)
    assert await store.compare_and_set(moved, done, ttl_s=3_600)
    got = await store.get(t.trigger_id)
    assert got == done and got.registered_fire_at_ms == t.fire_at_ms


async def test_create_keyed_writes_one_row_then_answers_it(store: Store) -> None:
    caller = unique("caller-")
    t = _keyed(make_trigger(caller, utc_ms(2031, 6, 4), shard=_shard(), idem_key="k"))
    other = replace(t, payload_json='{"other": true}', request_hash="hash-2",
                    created_at_ms=t.created_at_ms + 1)
    done = await store.create_keyed(t, INDEX_TTL_S)
    assert done.created and done.trigger == t.with_home()
    assert await store.get(t.trigger_id) == t.with_home()
    again = await store.create_keyed(other, INDEX_TTL_S)
    assert not again.created and again.trigger == t.with_home()
    assert await store.get(t.trigger_id) == t.with_home()
    cancelled = replace(t.with_home(), status=Status.CANCELLED)
    assert await store.compare_and_set(t.with_home(), cancelled)
    later = await store.create_keyed(replace(other, created_at_ms=t.created_at_ms + 2),
                                     INDEX_TTL_S)
    assert not later.created and later.trigger == cancelled


async def test_concurrent_create_keyed_with_one_id_leaves_one_live_row(store: Store) -> None:
    base = _keyed(make_trigger(unique("caller-"), utc_ms(2031, 6, 5), shard=_shard(),
                               idem_key="k"))
    variants = [replace(base, payload_json=f'{{"n": {i}}}', request_hash=f"hash-{i}",
                        fire_at_ms=base.fire_at_ms + i, registered_fire_at_ms=base.fire_at_ms + i,
                        created_at_ms=base.created_at_ms + i) for i in range(10)]
    got = await asyncio.gather(*(store.create_keyed(v, INDEX_TTL_S) for v in variants))
    final = await store.get(base.trigger_id)
    assert final is not None
    live = [r for i in range(10)
            if (r := await store.get_at(base.trigger_id, base.fire_at_ms + i, base.shard))]
    assert live == [final]
    # Every request was answered a row at that one home, or wrote it there (the row is one
    # of the writers' whole: the last creation's cells win).
    assert {d.trigger.home_at_ms for d in got} == {final.home_at_ms}
    assert final.payload_json in {d.trigger.payload_json for d in got if d.created}


async def test_the_later_of_two_plain_creates_of_one_id_wins(store: Store) -> None:
    """Two requests with one key whose plain writes raced (the documented corner): the row
    is one of them whole, the later creation's, whatever the order the writes land in."""
    first = _keyed(make_trigger(unique("caller-"), utc_ms(2031, 6, 7), shard=_shard()))
    later = replace(first, created_at_ms=first.created_at_ms + 1,
                    fire_at_ms=first.fire_at_ms + 1, registered_fire_at_ms=first.fire_at_ms + 1)
    await _create(store, later, first)
    assert await store.get(first.trigger_id) == later


async def test_legacy_record_reads_what_the_old_writer_recorded(store: Store) -> None:
    caller, key = unique("caller-"), unique("key-")
    t = make_trigger(caller, utc_ms(2031, 6, 8), shard=_shard(), route=Route.DIRECT,
                     idem_key=key)
    assert await store.legacy_record(caller, key) is None
    record = IdempotencyRecord(caller, key, "hash-1", t)
    assert await store.put_if_absent(record, INDEX_TTL_S) is None
    assert await store.legacy_record(caller, key) == record
    assert await store.legacy_record(caller, unique("key-")) is None
    assert await store.legacy_record(unique("caller-"), key) is None
    assert await store.legacy_records_exist()  # (whether it is empty before: other tests)


async def test_put_if_absent_returns_none_first_then_the_first_record(store: Store) -> None:
    caller, key = unique("caller-"), unique("key-")
    first = make_trigger(caller, utc_ms(2031, 6, 1), shard=_shard(), idem_key=key)
    second = make_trigger(caller, utc_ms(2031, 6, 2), shard=_shard(), route=Route.DIRECT,
                          idem_key=key)
    record = IdempotencyRecord(caller, key, "hash-1", first)
    assert await store.put_if_absent(record, INDEX_TTL_S) is None
    again = await store.put_if_absent(IdempotencyRecord(caller, key, "hash-2", second),
                                      INDEX_TTL_S)
    assert again == record
    other_key = IdempotencyRecord(caller, unique("key-"), "hash-2", second)
    assert await store.put_if_absent(other_key, INDEX_TTL_S) is None
    other_caller = IdempotencyRecord(unique("caller-"), key, "hash-2", second)
    assert await store.put_if_absent(other_caller, INDEX_TTL_S) is None


async def test_bucket_entries_are_bounded_after_until_across_minutes_per_shard(
    store: Store,
) -> None:
    caller, shard, other = unique("caller-"), _shard(), _shard()
    base = utc_ms(2031, 7, 1, 12, 0)  # a minute boundary
    offsets = [-1, 0, 30_000, 30_000, 60_000, 119_999, 120_000]
    triggers = [make_trigger(caller, base + off, shard=shard,
                             route=Route.DIRECT if i % 2 else Route.SWEEP)
                for i, off in enumerate(offsets)]
    elsewhere = make_trigger(caller, base + 30_000, shard=other)
    await _create(store, elsewhere, *reversed(triggers))
    entries = sorted((BucketEntry(t.trigger_id, t.fire_at_ms, t.shard, t.route)
                      for t in triggers), key=lambda e: (e.fire_at_ms, e.trigger_id))
    assert await store.bucket_entries(shard, base - 1, base + 60_000) == entries[1:5]
    assert await store.bucket_entries(shard, base - 60_001, base + 119_999) == entries[:6]
    assert await store.bucket_entries(shard, base - 2, base + 120_000) == entries
    assert await store.bucket_entries(shard, base, base) == []
    assert await store.bucket_entries(other, base - 60_000, base + 180_000) == [
        BucketEntry(elsewhere.trigger_id, elsewhere.fire_at_ms, other, elsewhere.route)]


async def test_sweep_cursors_save_load_and_overwrite(store: Store) -> None:
    group, neighbour = unique("group-"), unique("group-")
    assert await store.load_cursors(group) == {}
    await store.save_cursor(group, 0, 1_000, "sweeper-a", 1)
    await store.save_cursor(group, 7, 2_000, "sweeper-a", 1)
    await store.save_cursor(neighbour, 0, 9_000, "sweeper-b", 4)
    assert await store.load_cursors(group) == {0: 1_000, 7: 2_000}
    await store.save_cursor(group, 0, 1_500, "sweeper-b", 2)
    await store.save_cursor(group, 7, 1_900, "sweeper-b", 2)  # last writer wins, even backwards
    assert await store.load_cursors(group) == {0: 1_500, 7: 1_900}
    assert await store.load_cursors(neighbour) == {0: 9_000}


async def test_counters_add_up_across_flushes_and_names(store: Store) -> None:
    a, b = unique("c_a_"), unique("c_b_")
    await store.add_counters({a: 2, b: 1})
    await store.add_counters({a: 3, b: 0})
    got = await store.read_counters()
    assert (got[a], got[b]) == (5, 1)


async def test_a_list_call_reads_a_bounded_number_of_rows_then_goes_on_with_a_cursor(
    store: Store,
) -> None:
    """A rare finished ``status`` cannot make one call read a caller's whole history: past
    the row budget the page ends early (even empty) with a cursor, and paging still finds
    all. (The open statuses read an index of open triggers: ``test_open_index``.)"""
    caller, expected = await _listing(store)
    fired = [replace(t, status=Status.FIRED, fired_at_ms=1) for t in expected[6:]]
    for t, done in zip(expected[6:], fired, strict=True):
        assert await store.compare_and_set(t, done)
    with rows_per_call(store, 2):
        first = await store.list_by_caller(caller, start=NEWEST, last_month=MAR, limit=100,
                                           status=Status.FIRED)
        assert first.triggers == [] and first.next_cursor is not None
        pages = await _all_pages(store, caller, 100, Status.FIRED)
    assert [t for p in pages for t in p] == fired
    assert len(pages) >= 3
