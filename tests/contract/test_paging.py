"""Every multi-row read pages to its end: a read of more rows than one page holds
comes back whole, or a page at a time up to the last one, never as its first page alone.

``small_pages_store`` reads three rows per page (``MemoryStore.page_size``, Cassandra's fetch
size through ``TRIGGER_CASSANDRA_FETCH_SIZE``), so ten rows take four real pages; the tests
marked ``integration`` at the end go past the driver's default page of 5,000 rows.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Protocol

import pytest

from reconciler.rezone import Rezoner
from tests.contract.conftest import KEYSPACE, SMALL_PAGE
from tests.contract.support import INDEX_TTL_S, MIN_MS, Store, make_trigger, unique, utc_ms
from tests.keys import fixture_cipher
from tests.unit.reconciler.test_rezone import HOUR_MS, RIGHT_MS, wall_clock_trigger
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.store import MemoryQueue
from trigger_service.config.settings import Settings
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetter,
    DeadLetterQuery,
    DeadLetterReason,
    ItemState,
    JobItem,
    ReplayJob,
)
from trigger_service.core.model import Status, new_trigger_id
from trigger_service.core.ports import SecretStore, ZoneIndex
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.time.zones import TZDATA_VERSION
from trigger_service.platform.metrics import InMemoryMetrics

T0 = utc_ms(2031, 3, 10, 12)
TTL_S = 3_600
ROWS = 10  # more than three pages of SMALL_PAGE
QUERY = DeadLetterQuery("c", T0 - 86_400_000, T0, DeadLetterReason.GONE, None)


class PagedStore(Store, ZoneIndex, SecretStore, Protocol):
    """What these tests read (``MemoryStore``, ``CassandraStore``)."""


def fire_ms() -> int:
    return SystemClock().now_ms() + 3_600_000


async def test_zoned_trigger_ids_come_a_page_at_a_time_to_the_last(
        small_pages_store: PagedStore) -> None:
    store, version, shard = small_pages_store, unique("tz-"), 3
    ids = []
    for _ in range(ROWS):
        t = replace(make_trigger(unique("zone-"), fire_ms(), shard=shard),
                    tzdata_version=version)
        await store.create(t, INDEX_TTL_S)
        ids.append(t.trigger_id)
    pages = [page async for page in store.zoned_trigger_ids(version, shard)]
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    assert [i for p in pages for i in p] == sorted(ids)
    assert [p async for p in store.zoned_trigger_ids(version, shard + 1)] == []


async def test_zoned_versions_lists_every_release(small_pages_store: PagedStore) -> None:
    versions = {unique("tz-") for _ in range(SMALL_PAGE + 2)}
    for version in versions:
        await small_pages_store.create(
            replace(make_trigger(unique("zone-"), fire_ms()), tzdata_version=version),
            INDEX_TTL_S)
    assert versions <= set(await small_pages_store.zoned_versions())


async def test_job_items_come_in_id_order_a_page_at_a_time_and_all_count(
        small_pages_store: PagedStore) -> None:
    store, job_id = small_pages_store, unique("job_")
    items = [JobItem(f"trg_{n:02}.1", T0 - n) for n in range(ROWS)]
    await store.create_job(ReplayJob(job_id, QUERY, T0, ROWS), items, TTL_S)
    # States of items on the last pages: a job counted from its first page would miss them.
    for item in items[-4:-1]:
        await store.set_item_state(job_id, item, ItemState.DONE, TTL_S)
    await store.set_item_state(job_id, items[-1], ItemState.FAILED, TTL_S)
    pages = [page async for page in store.job_items(job_id)]
    assert [len(p) for p in pages] == [3, 3, 3, 1]
    assert [i.id for p in pages for i in p] == [i.id for i in items]
    assert [i.state for i in pages[-1]] == [ItemState.FAILED]
    job = await store.get_job(job_id)
    assert job is not None and (job.total, job.done, job.failed) == (ROWS, 3, 1)


async def test_secrets_attempts_cursors_and_counters_come_back_whole(
        small_pages_store: PagedStore) -> None:
    store, caller = small_pages_store, unique("pg-")
    for n in range(ROWS):
        await store.add_secret(caller, T0 + n, f"secret-{n}")
    assert await store.secrets(caller, ROWS) == [(T0 + n, f"secret-{n}")
                                           for n in reversed(range(ROWS))]
    tid = new_trigger_id(T0)
    attempts = [Attempt(tid, f"{tid}.1", n + 1, T0 + n, 5, 503, "HTTP 503", None, "d")
                for n in range(ROWS)]
    await asyncio.gather(*(store.record_attempt(a, TTL_S, kept=10) for a in attempts))
    assert await store.attempts(tid, f"{tid}.1") == attempts
    group = unique("grp-")
    for shard in range(ROWS):
        await store.save_cursor(group, shard, 1_000 + shard, "owner", 1)
    assert await store.load_cursors(group) == {s: 1_000 + s for s in range(ROWS)}
    names = [unique("paging_") for _ in range(ROWS)]
    await store.add_counters(dict.fromkeys(names, 2))
    counters = await store.read_counters()
    assert {n: counters.get(n) for n in names} == dict.fromkeys(names, 2)


async def test_open_jobs_and_a_listing_across_many_months_come_back_whole(
        small_pages_store: PagedStore) -> None:
    store = small_pages_store
    jobs = [unique("job_") for _ in range(SMALL_PAGE + 2)]
    for job_id in jobs:
        await store.create_job(ReplayJob(job_id, QUERY, T0, 0), [], TTL_S)
    assert set(jobs) <= set(await store.open_jobs())
    # One trigger per month: a listing of open ones reads the hours with entries whole.
    caller = unique("months-")
    made = [make_trigger(caller, utc_ms(2031, month, 2)) for month in range(1, ROWS + 1)]
    for t in made:
        await store.create(t, INDEX_TTL_S)
    page = await store.list_by_caller(caller, start=(203101, MIN_MS, ""), last_month=203112,
                                      limit=100, status=Status.PENDING)
    assert [t.trigger_id for t in page.triggers] == [t.trigger_id for t in made]
    assert page.next_cursor is None


async def test_dead_letters_of_one_day_list_whole(small_pages_store: PagedStore) -> None:
    store, caller = small_pages_store, unique("dl-")
    letters = []
    for n in range(ROWS):
        tid = new_trigger_id(T0 - n)
        d = DeadLetter(f"{tid}.1", tid, caller, DeadLetterReason.GONE, "HTTP 410", 1,
                       T0 - 1_000 - n, T0 - 5_000, "http://a.example/hook")
        await store.put_dead_letter(d, TTL_S)
        letters.append(d)
    page = await store.list_dead_letters(replace(QUERY, caller=caller), None, 100)
    assert page.items == letters and page.next_cursor is None


# --- Cassandra past the driver's default page of 5,000 rows -------------------------------
BIG = 6_000


async def _zoned_entries(store: CassandraStore, version: str, shard: int, ids: list[str],
                         ttl_s: int) -> None:
    """Bare zone-index entries, 50 to a single-partition unlogged batch, written at once."""
    ts_us = SystemClock().now_ms() * 1000
    writes = [("zoned_put", [version, shard, tid, ttl_s, ts_us]) for tid in ids]
    await asyncio.gather(*(store.statements.run_unlogged(writes[i:i + 50])
                           for i in range(0, len(writes), 50)))


@pytest.mark.integration
async def test_zoned_trigger_ids_go_past_the_default_page(
        cassandra_store: CassandraStore) -> None:
    version, shard = unique("tz-"), 5
    ids = [f"trg_{n:026}" for n in range(BIG)]
    await _zoned_entries(cassandra_store, version, shard, ids, 600)
    pages = [page async for page in cassandra_store.zoned_trigger_ids(version, shard)]
    assert [len(p) for p in pages] == [5_000, 1_000]
    assert [i for p in pages for i in p] == ids


@pytest.mark.integration
async def test_job_items_and_counts_go_past_the_default_page(
        cassandra_store: CassandraStore) -> None:
    job_id = unique("job_")
    items = [JobItem(f"trg_{n:05}.1", T0 - n) for n in range(BIG)]
    await cassandra_store.create_job(ReplayJob(job_id, QUERY, T0, BIG), items, 600)
    for item in items[-10:]:  # past the first 5,000
        await cassandra_store.set_item_state(job_id, item, ItemState.DONE, 600)
    read = [page async for page in cassandra_store.job_items(job_id)]
    assert [i.id for p in read for i in p] == [i.id for i in items]
    job = await cassandra_store.get_job(job_id)
    assert job is not None and (job.total, job.done, job.failed) == (BIG, 10, 0)


class OneRelease(CassandraStore):
    """The store with one release alone among those that have entries: the shared keyspace
    holds other tests' releases, which a pass here must leave alone."""

    release = ""

    async def zoned_versions(self) -> list[str]:
        return [self.release]


@pytest.mark.integration
async def test_the_rezone_pass_goes_past_the_default_page(
        cassandra_store: CassandraStore) -> None:
    store = OneRelease.open_sync(CassandraSettings(keyspace=KEYSPACE), fixture_cipher())
    assert isinstance(store, OneRelease)
    try:
        store.release, shard, now_ms = unique("tz-"), 2, SystemClock().now_ms()
        # Entries of triggers long gone first (their ids sort before any real one), then
        # ten real ones resolved an hour off: all ten lie past the first 5,000 entries.
        gone = [f"trg_{n:026}" for n in range(BIG - 10)]
        await _zoned_entries(store, store.release, shard, gone, 600)
        stale = [replace(wall_clock_trigger(RIGHT_MS + HOUR_MS, store.release),
                         created_at_ms=now_ms, shard=shard) for _ in range(10)]
        for t in stale:
            await store.create(t, 600)
        clock = SystemClock()
        report = await Rezoner(Settings(), store, MemoryQueue(clock), clock,
                               InMemoryMetrics()).run_once()
        assert (report.checked, report.moved) == (10, 10)
        for t in stale:
            moved = await store.get(t.trigger_id)
            assert moved is not None and moved.fire_at_ms == RIGHT_MS
            assert moved.tzdata_version == TZDATA_VERSION
    finally:
        store.close_sync()
