"""The term index (``list_by_filter``: a caller's triggers by tag, label or recipient, newest
created first, checked against the rows) and ``TriggerJobStore``, on the fake and on
Cassandra."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.support import (
    INDEX_TTL_S,
    Store,
    make_trigger,
    rows_per_call,
    unique,
    utc_ms,
)
from trigger_service.core.dead_letters import ItemState, JobStatus
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import NEWEST, ListCursor
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.trigger_jobs import JobAction, TriggerJob, TriggerJobItem

FIRE_MS = utc_ms(2031, 2, 3, 9)


def _newest_first(triggers: list[Trigger]) -> list[str]:
    return [t.trigger_id for t in sorted(triggers, key=lambda t: (t.created_at_ms, t.trigger_id),
                                         reverse=True)]


async def _all(store: Store, caller: str, flt: TriggerFilter, limit: int) -> list[str]:
    ids: list[str] = []
    cursor: ListCursor | None = NEWEST
    while cursor is not None:
        assert len(ids) < 1000, "the cursor never ran out"
        page = await store.list_by_filter(caller, flt, before=cursor, limit=limit)
        assert len(page.triggers) <= limit
        ids += [t.trigger_id for t in page.triggers]
        cursor = page.next_cursor
    return ids


async def _tagged(store: Store, caller: str, n: int, **changes: object) -> list[Trigger]:
    made = [replace(make_trigger(caller, FIRE_MS + i, shard=i), **changes)  # type: ignore[arg-type]
            for i in range(n)]
    for t in made:
        await store.create(t, INDEX_TTL_S)
    return made


async def test_a_term_lists_its_triggers_newest_first_to_the_end_in_small_pages(
        store: Store) -> None:
    caller = unique("caller-")
    tagged = await _tagged(store, caller, 23, tags=("a", "b"), labels=(("team", "x"),))
    await _tagged(store, caller, 4, tags=("b",))
    await _tagged(store, unique("other-"), 3, tags=("a",))  # another caller's
    for limit in (1, 4, 23, 100):
        assert await _all(store, caller, TriggerFilter(tag="a"), limit) == \
            _newest_first(tagged), f"limit {limit}"
    assert await _all(store, caller, TriggerFilter(label=("team", "x")), 5) == \
        _newest_first(tagged)
    assert len(await _all(store, caller, TriggerFilter(tag="b"), 7)) == 27
    assert await _all(store, caller, TriggerFilter(tag="zzz"), 5) == []


async def test_the_rows_decide_status_and_the_other_parts(store: Store) -> None:
    caller = unique("caller-")
    made = await _tagged(store, caller, 6, tags=("a",))
    cancelled = made[:2]
    for t in cancelled:
        assert await store.compare_and_set(t, replace(t, status=Status.CANCELLED))
    # An edit that drops the tag: its entry stays, the row says no.
    edited = replace(made[2], tags=("b",), revision=1)
    assert await store.advance(made[2], edited, INDEX_TTL_S, made[2].created_at_ms + 1)
    pending = TriggerFilter(tag="a", status=Status.PENDING)
    assert await _all(store, caller, pending, 2) == _newest_first(made[3:])
    assert await _all(store, caller, TriggerFilter(tag="a", status=Status.CANCELLED), 2) == \
        _newest_first(cancelled)
    assert await _all(store, caller, TriggerFilter(tag="b"), 2) == [edited.trigger_id]
    got = await store.get(edited.trigger_id)
    assert got is not None and got.tags == ("b",)


async def test_a_page_reads_a_bounded_number_of_entries(store: Store) -> None:
    caller = unique("caller-")
    made = await _tagged(store, caller, 9, tags=("a",))
    for t in made[1:]:
        assert await store.compare_and_set(t, replace(t, status=Status.CANCELLED))
    with rows_per_call(store, 3):
        first = await store.list_by_filter(caller, TriggerFilter(tag="a", status=Status.PENDING),
                                           before=NEWEST, limit=5)
        assert first.next_cursor is not None
        found = await _all(store, caller, TriggerFilter(tag="a", status=Status.PENDING), 5)
    assert found == [made[0].trigger_id]


async def test_trigger_jobs_keep_items_progress_leases_and_the_open_count(
        store: Store) -> None:
    caller = unique("caller-")
    job = TriggerJob(unique("tjob_"), caller, JobAction.CANCEL, TriggerFilter(tag="a"),
                     FIRE_MS, 3)
    items = [TriggerJobItem(f"trg_{n}") for n in ("a", "b", "c")]
    await store.create_trigger_job(job, items, ttl_s=INDEX_TTL_S)
    assert await store.count_open_trigger_jobs(caller) == 1
    assert job.job_id in await store.open_trigger_jobs()
    assert await store.claim_trigger_job(job.job_id, "a", FIRE_MS, 1_000)
    assert not await store.claim_trigger_job(job.job_id, "b", FIRE_MS + 999, 1_000)
    assert await store.claim_trigger_job(job.job_id, "b", FIRE_MS + 1_001, 1_000)
    await store.set_trigger_item_state(job.job_id, items[0], ItemState.DONE, ttl_s=INDEX_TTL_S)
    await store.set_trigger_item_state(job.job_id, items[2], ItemState.FAILED,
                                       ttl_s=INDEX_TTL_S)
    got = await store.get_trigger_job(job.job_id)
    assert got == replace(job, done=1, failed=1)
    pages = [p async for p in store.trigger_job_items(job.job_id)]
    assert [(i.id, i.state) for p in pages for i in p] == [
        ("trg_a", ItemState.DONE), ("trg_b", ItemState.PENDING), ("trg_c", ItemState.FAILED)]
    await store.finish_trigger_job(job.job_id, ttl_s=INDEX_TTL_S)
    done = await store.get_trigger_job(job.job_id)
    assert done is not None and done.status is JobStatus.DONE
    assert await store.count_open_trigger_jobs(caller) == 0
    assert job.job_id not in await store.open_trigger_jobs()
    assert await store.get_trigger_job(unique("tjob_")) is None
