"""The open listing behind the tombstones of finished triggers, on the real Cassandra (its
default ``tombstone_failure_threshold``, 100,000: infra/cassandra/cassandra.yaml.in leaves it
alone): each partition is read from its mark, the entries still open below the mark are
held, and nothing open is ever lost (``adapters.cassandra.open_marks``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.support import INDEX_TTL_S, make_trigger, unique
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.open_index import OpenIndex
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.core.model import Status, Trigger, fire_month
from trigger_service.core.ports.values import ListCursor
from trigger_service.core.time.clock import SystemClock

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
DEAD = 200_000  # finished triggers in one partition: twice the failure threshold
BATCH = 250  # entries per unlogged batch (one partition: ~15 KiB, under the 50 KiB limit)
FINISHED_TOGETHER = 3_000  # finished together (45 s of fire times), then probed


def _past_hour() -> int:
    """An hour wholly before now - OPEN_MARK_LAG_MS: marks may pass all of it."""
    return SystemClock().now_ms() // HOUR_MS - 2


def _at(caller: str, fire_at_ms: int, shard: int, created_ms: int) -> Trigger:
    """A trigger registered at ``created_ms`` (before its fire time: it holds nothing)."""
    return replace(make_trigger(caller, fire_at_ms, shard=shard), created_at_ms=created_ms)


def _ids(triggers: Sequence[Trigger]) -> list[str]:
    return [t.trigger_id for t in sorted(triggers, key=lambda t: (t.fire_at_ms, t.trigger_id))]


async def _listed(store: CassandraStore, caller: str, hour: int, limit: int,
                  status: Status = Status.PENDING) -> list[list[str]]:
    """Every page of ``caller``'s ``status`` triggers in the month of ``hour``."""
    month = fire_month(hour * HOUR_MS)
    pages: list[list[str]] = []
    cursor: ListCursor | None = (month, -(2**63), "")
    while cursor is not None:
        assert len(pages) < 100, "the cursor never ran out"
        page = await store.list_by_caller(caller, start=cursor, last_month=month, limit=limit,
                                          status=status)
        pages.append([t.trigger_id for t in page.triggers])
        cursor = page.next_cursor
    return pages


async def _marked(store: CassandraStore, caller: str, hour: int
                  ) -> tuple[tuple[int, str] | None, set[str]]:
    """Part 0's mark and the ids it holds."""
    marks = store.triggers._open_index.marks
    now_ms = SystemClock().now_ms()
    held = await marks.held(caller, hour, 0, (-(2**63), ""), 1000, now_ms)
    return (await marks.hour(caller, hour, now_ms))[0], {h.key[1] for h in held}


async def _batches(store: CassandraStore, writes: list[tuple[str, Sequence[Any]]]) -> None:
    sem = asyncio.Semaphore(16)

    async def one(chunk: list[tuple[str, Sequence[Any]]]) -> None:
        async with sem:
            await store.statements.run_unlogged(chunk)

    await asyncio.gather(*(one(writes[i:i + BATCH]) for i in range(0, len(writes), BATCH)))


async def test_the_first_pending_page_is_full_and_fast_behind_200000_finished_triggers(
        store: CassandraStore) -> None:
    """One (caller, hour, part) partition: 200,000 triggers finished in fire-time order (their
    entries written and deleted as the store does, through ``OpenIndex``, with the finishers'
    probes), three still pending among them (retries waiting), 20 pending after them. Before
    marks, the page read the partition from the hour's start and Cassandra refused it
    (READ_TOO_MANY_TOMBSTONES)."""
    caller, hour = unique("herd-"), _past_hour()
    h0, created_ms = hour * HOUR_MS, hour * HOUR_MS - HOUR_MS
    index: OpenIndex = store.triggers._open_index
    base = _at(caller, h0, 0, created_ms)
    dead = [replace(base, trigger_id=f"trg_{i:026d}", fire_at_ms=h0 + i * 3_000_000 // DEAD)
            for i in range(DEAD)]  # part 0, over the hour's first 50 minutes
    stragglers = [_at(caller, h0 + m * 60_000 + 1, 8 * (m % 7 + 1), created_ms)
                  for m in (5, 20, 45)]
    live = [_at(caller, h0 + 52 * 60_000 + i * 5_000, 8 * (i % 8), created_ms)
            for i in range(20)]
    for t in stragglers + live:
        await store.create(t, INDEX_TTL_S)
    started = time.monotonic()
    await _batches(store, [w for t in dead
                           for w in index.entry_writes(t, INDEX_TTL_S, created_ms * 1000)])
    written = time.monotonic()
    for i in range(0, DEAD, FINISHED_TOGETHER):
        finished = [(t, replace(t, status=Status.FIRED)) for t in dead[i:i + FINISHED_TOGETHER]]
        await _batches(store, [w for old, new in finished for w in OpenIndex.leave(old, new)])
        now_ms = SystemClock().now_ms()
        for old, new in finished:  # one after another, as finishes spread over time
            await index.left(old, new, now_ms)
    finished_at = time.monotonic()

    asked = time.monotonic()
    first = await store.list_by_caller(caller, start=(fire_month(h0), -(2**63), ""),
                                       last_month=fire_month(h0), limit=10,
                                       status=Status.PENDING)
    answered_s = time.monotonic() - asked
    assert [t.trigger_id for t in first.triggers] == (_ids(stragglers) + _ids(live))[:10]
    assert first.next_cursor is not None
    assert answered_s < 2.0, f"the first page took {answered_s:.2f} s"
    pages = await _listed(store, caller, hour, 10)
    assert [i for p in pages for i in p] == _ids(stragglers) + _ids(live)
    mark, held = await _marked(store, caller, hour)
    assert mark is not None and mark > (dead[-1].fire_at_ms - 60_000, "")
    assert {t.trigger_id for t in stragglers} <= held
    print(f"\n{DEAD} entries written in {written - started:.1f} s, finished (with probes) in "
          f"{finished_at - written:.1f} s; first page in {answered_s * 1000:.0f} ms")


async def test_entries_below_a_mark_stay_listed(store: CassandraStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every finisher probes here. A pending and a paused trigger stay behind a finished run
    and are held; an entry edited to a time below the mark and ones registered in the past
    (below the mark and above it) are held by their writers; all are listed once, in
    fire-time order, and a held one that finishes is no longer listed."""
    monkeypatch.setattr(store.triggers._open_index.marks, "probe_one_in", 1)
    caller, hour = unique("marks-"), _past_hour()
    h0, created_ms = hour * HOUR_MS, hour * HOUR_MS - HOUR_MS
    run = [_at(caller, h0 + i * 30_000, 8 * (i % 8), created_ms) for i in range(60)]
    for t in run:
        await store.create(t, INDEX_TTL_S)
    waiting, paused, later = run[3], run[5], run[50:]
    assert await store.compare_and_set(paused, replace(paused, status=Status.PAUSED))
    for t in run[:50]:
        if t not in (waiting, paused):
            assert await store.compare_and_set(t, replace(t, status=Status.FIRED), ttl_s=3600)
    mark, held = await _marked(store, caller, hour)
    assert mark is not None and mark > (run[40].fire_at_ms, "")
    assert {waiting.trigger_id, paused.trigger_id} <= held

    now_ms = SystemClock().now_ms()
    moved = replace(later[0], fire_at_ms=h0 + 60_007, revision=1)  # an edit to an earlier time
    assert await store.advance(later[0], moved, INDEX_TTL_S, now_ms)
    registered = make_trigger(caller, h0 + 61_000, shard=16)  # a fireAt in the past
    above = make_trigger(caller, h0 + 40 * 60_000, shard=24)  # held, and read past the mark
    for t in (registered, above):
        await store.create(t, INDEX_TTL_S)
    expected = [moved.trigger_id, registered.trigger_id, waiting.trigger_id, *_ids(later[1:]),
                above.trigger_id]
    for limit in (1, 3, 100):
        assert [i for p in await _listed(store, caller, hour, limit) for i in p] == expected
    assert await _listed(store, caller, hour, 10, Status.PAUSED) == [[paused.trigger_id]]

    assert await store.compare_and_set(waiting, replace(waiting, status=Status.CANCELLED),
                                       ttl_s=3600)
    expected.remove(waiting.trigger_id)
    assert [i for p in await _listed(store, caller, hour, 2) for i in p] == expected


async def test_holds_whose_triggers_finished_go_a_run_at_a_time(store: CassandraStore) -> None:
    """Triggers registered an hour ago for an hour before that hold their entries (they may
    lie below a mark). Once finished, and the holds older than OPEN_MARK_LAG_MS, a reader
    drops them with a range delete a run; the holds of the open ones stay."""
    caller, hour = unique("drops-"), _past_hour()
    h0, created_ms = hour * HOUR_MS, SystemClock().now_ms() - HOUR_MS
    ts = [_at(caller, h0 + i * 60_000, 8 * i, created_ms) for i in range(6)]
    for t in ts:
        await store.create(t, INDEX_TTL_S)
    assert (await _marked(store, caller, hour))[1] == {t.trigger_id for t in ts}
    for i in (0, 1, 3, 4):
        assert await store.compare_and_set(ts[i], replace(ts[i], status=Status.CANCELLED),
                                           ttl_s=3600)
    assert await _listed(store, caller, hour, 10) == [[ts[2].trigger_id, ts[5].trigger_id]]
    assert (await _marked(store, caller, hour))[1] == {ts[2].trigger_id, ts[5].trigger_id}
    assert await _listed(store, caller, hour, 1) == [[ts[2].trigger_id], [ts[5].trigger_id],
                                                     []]


async def test_a_reader_moves_the_mark_to_the_first_entry_it_found(
        store: CassandraStore) -> None:
    """Entries deleted without a probe (as by an earlier release): the first reader reads
    through their tombstones and marks the first entry it found; the next starts there."""
    caller, hour = unique("reader-"), _past_hour()
    h0, created_ms = hour * HOUR_MS, hour * HOUR_MS - HOUR_MS
    index: OpenIndex = store.triggers._open_index
    base = _at(caller, h0, 0, created_ms)
    dead = [replace(base, trigger_id=f"trg_{i:026d}", fire_at_ms=h0 + i * 1_000)
            for i in range(600)]
    live = _at(caller, h0 + 30 * 60_000, 0, created_ms)
    await store.create(live, INDEX_TTL_S)
    await _batches(store, [w for t in dead
                           for w in index.entry_writes(t, INDEX_TTL_S, created_ms * 1000)])
    await _batches(store, [w for t in dead
                           for w in OpenIndex.leave(t, replace(t, status=Status.FIRED))])
    now_ms = SystemClock().now_ms()
    assert await index.marks.hour(caller, hour, now_ms) == [None] * schema.OPEN_PARTS
    assert await _listed(store, caller, hour, 10) == [[live.trigger_id]]
    # Part 0 at the entry, the parts without entries to the hour's end.
    assert await index.marks.hour(caller, hour, now_ms) == [
        (live.fire_at_ms, live.trigger_id), *[((hour + 1) * HOUR_MS, "")] * 7]
    assert await _listed(store, caller, hour, 10) == [[live.trigger_id]]


async def test_no_mark_passes_now_less_the_lag(store: CassandraStore,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Triggers due around now finish: the marks stay OPEN_MARK_LAG_MS behind the clock,
    where an entry still written below them holds itself."""
    monkeypatch.setattr(store.triggers._open_index.marks, "probe_one_in", 1)
    caller = unique("lag-")
    now_ms = SystemClock().now_ms()
    ts = [replace(make_trigger(caller, now_ms - 600_000 + i * 60_000, shard=0),
                  created_at_ms=now_ms - 3_600_000) for i in range(10)]
    for t in ts:
        await store.create(t, INDEX_TTL_S)
    for t in ts:
        assert await store.compare_and_set(t, replace(t, status=Status.FIRED), ttl_s=3600)
    limit = (SystemClock().now_ms() - schema.OPEN_MARK_LAG_MS, "")
    for hour in {t.fire_at_ms // HOUR_MS for t in ts}:
        mark, _ = await _marked(store, caller, hour)
        assert mark is None or mark <= limit
