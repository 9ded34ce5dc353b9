"""``AttemptLog``, ``DeadLetterIndex`` and ``ReplayJobStore``: ``MemoryStore`` and
``CassandraStore`` against one contract (listing across day partitions, cursors, filters,
resolution, job leases)."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.support import Store, unique, utc_ms
from trigger_service.core.dead_letters import (
    DAY_MS,
    Attempt,
    DeadLetter,
    DeadLetterQuery,
    DeadLetterReason,
    DeadLetterState,
    ItemState,
    JobItem,
    JobStatus,
    ReplayJob,
)
from trigger_service.core.model import new_trigger_id

T0 = utc_ms(2031, 3, 10, 12, 0, 0, 0)
TTL_S = 3_600


def letter(caller: str, dead_at_ms: int, *, reason: DeadLetterReason = DeadLetterReason.GONE,
           url: str = "http://a.example/hook") -> DeadLetter:
    tid = new_trigger_id(dead_at_ms)
    return DeadLetter(f"{tid}.1", tid, caller, reason, "HTTP 410", 2, dead_at_ms,
                      dead_at_ms - 5_000, url)


async def test_attempts_round_trip_in_start_order(store: Store) -> None:
    tid = new_trigger_id(T0)
    later = Attempt(tid, f"{tid}.1", 2, T0 + 2_000, 15, None, "timeout after 10s", None, "d2")
    first = Attempt(tid, f"{tid}.1", 1, T0, 7, 503, "HTTP 503", "busy", "d1")
    other = Attempt(tid, f"{tid}.2", 1, T0 + 9_000, 3, 200, None, "ok", "d1")
    for a in (later, first, other):
        await store.record_attempt(a, TTL_S)
    assert await store.attempts(tid, f"{tid}.1") == [first, later]
    assert await store.attempts(tid, f"{tid}.2") == [other]


async def test_listing_newest_first_across_days_with_cursor_and_filters(store: Store) -> None:
    caller = unique("dl-")
    letters = [letter(caller, T0 - k * DAY_MS // 2, reason=DeadLetterReason.MAX_AGE
                      if k % 3 == 0 else DeadLetterReason.GONE,
                      url=f"http://h{k % 2}.example/x") for k in range(7)]  # 3.5 days
    for d in letters:
        await store.put_dead_letter(d, TTL_S)
    q = DeadLetterQuery(caller, T0 - 10 * DAY_MS, T0)
    seen, cursor = [], None
    while True:
        page = await store.list_dead_letters(q, cursor, 2)
        seen += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == letters  # newest first, every one once
    age = await store.list_dead_letters(replace(q, reason=DeadLetterReason.MAX_AGE), None, 10)
    assert age.items == [letters[0], letters[3], letters[6]]
    h1 = await store.list_dead_letters(replace(q, callback_prefix="http://h1."), None, 10)
    assert h1.items == letters[1::2]
    window = await store.list_dead_letters(
        replace(q, since_ms=letters[4].dead_at_ms, until_ms=letters[1].dead_at_ms), None, 10)
    assert window.items == letters[1:5]
    everyone = await store.list_dead_letters(
        DeadLetterQuery(None, T0 - 10 * DAY_MS, T0), None, 500)
    assert all(d in everyone.items for d in letters)


async def test_resolved_letters_leave_the_list_and_keep_their_record(store: Store) -> None:
    caller = unique("dl-")
    a, b = letter(caller, T0 - 2_000), letter(caller, T0 - 1_000)
    for d in (a, b):
        await store.put_dead_letter(d, TTL_S)
    assert await store.get_dead_letter(a.id) == a
    replayed = replace(a, state=DeadLetterState.REPLAYED, resolved_at_ms=T0)
    await store.resolve_dead_letter(replayed, TTL_S)
    q = DeadLetterQuery(caller, T0 - DAY_MS, T0)
    assert (await store.list_dead_letters(q, None, 10)).items == [b]
    assert await store.get_dead_letter(a.id) == replayed
    assert await store.get_dead_letter("trg_unknown.1") is None
    # Dead again after the replay: open and listed again, at its new time.
    again = replace(a, dead_at_ms=T0 - 500)
    await store.put_dead_letter(again, TTL_S)
    assert (await store.list_dead_letters(q, None, 10)).items == [again, b]


async def test_jobs_items_and_leases(store: Store) -> None:
    job_id = unique("job_")
    q = DeadLetterQuery("c", T0 - DAY_MS, T0, DeadLetterReason.GONE, "http://x/")
    items = [JobItem(f"trg_{n}.1", T0 - n) for n in range(3)]
    await store.create_job(ReplayJob(job_id, q, T0, 3), items, TTL_S)
    assert job_id in await store.open_jobs()
    job = await store.get_job(job_id)
    assert job == ReplayJob(job_id, q, T0, 3, JobStatus.RUNNING, 0, 0)
    assert await store.claim_job(job_id, "a", T0, 30_000)
    assert await store.claim_job(job_id, "a", T0 + 1_000, 30_000)  # renewal
    assert not await store.claim_job(job_id, "b", T0 + 2_000, 30_000)
    assert await store.claim_job(job_id, "b", T0 + 31_001, 30_000)  # a's lease expired
    await store.set_item_state(job_id, items[0], ItemState.DONE, TTL_S)
    await store.set_item_state(job_id, items[1], ItemState.FAILED, TTL_S)
    states = {i.id: i.state async for page in store.job_items(job_id) for i in page}
    assert states == {"trg_0.1": ItemState.DONE, "trg_1.1": ItemState.FAILED,
                      "trg_2.1": ItemState.PENDING}
    await store.finish_job(job_id, TTL_S)
    done = await store.get_job(job_id)
    assert done is not None and (done.status, done.done, done.failed) == (JobStatus.DONE, 1, 1)
    assert job_id not in await store.open_jobs()
    assert await store.get_job(unique("job_")) is None


async def test_put_if_new_never_reopens_a_resolved_letter(store: Store) -> None:
    caller = unique("dl-")
    d = letter(caller, T0 - 1_000)
    assert await store.put_dead_letter_if_new(d, TTL_S)
    purged = replace(d, state=DeadLetterState.PURGED, resolved_at_ms=T0)
    await store.resolve_dead_letter(purged, TTL_S)
    assert not await store.put_dead_letter_if_new(replace(d, dead_at_ms=T0), TTL_S)
    assert await store.get_dead_letter(d.id) == purged
    assert (await store.list_dead_letters(DeadLetterQuery(caller, T0 - DAY_MS, T0), None,
                                          10)).items == []
