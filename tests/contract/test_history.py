"""``AttemptLog``, ``DeadLetterIndex`` and ``ReplayJobStore``: ``MemoryStore`` and
``CassandraStore`` against one contract (listing across day partitions, cursors, filters,
resolution, job leases)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.contract.support import Store, unique, utc_ms
from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import dead_letter_listing
from trigger_service.core.dead_letters import (
    Attempt,
    AttemptOutcome,
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
from trigger_service.core.recent_attempts import attempt_number, ring_slot
from trigger_service.core.time.timing import DAY_MS

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
        await store.record_attempt(a, TTL_S, kept=10)
    assert await store.attempts(tid, f"{tid}.1") == [first, later]
    assert await store.attempts(tid, f"{tid}.2") == [other]


async def test_recent_attempts_keep_the_newest_in_a_ring_of_kept_slots(store: Store) -> None:
    tid, kept = new_trigger_id(T0), 4
    made = [Attempt(tid, f"{tid}.{seq + 1}", n, T0 + seq * 60_000 + n * 1_000, 9,
                    503 if n == 1 else 200, "HTTP 503" if n == 1 else None, "busy", "d1",
                    outcome=AttemptOutcome.RETRY if n == 1 else AttemptOutcome.DELIVERED,
                    channel="webhook" if seq % 2 else "email",
                    number=attempt_number(seq, n, kept))
            for seq in range(4) for n in (1, 2)]  # 8 attempts: the ring keeps 4
    for a in made:
        await store.record_attempt(a, TTL_S, kept=kept)
    await store.record_attempt(made[-1], TTL_S, kept=kept)  # a repeat changes nothing
    ring = {ring_slot(a.number, kept): a for a in made}  # a later attempt takes its slot
    assert len(ring) == kept and made[-1] in ring.values()
    found = await store.recent_attempts(tid)
    # The ring keeps no excerpt nor dispatcher, nor the number it was placed by.
    assert sorted(found, key=lambda a: a.started_at_ms) == sorted(
        (replace(a, response_excerpt=None, dispatcher="", number=0) for a in ring.values()),
        key=lambda a: a.started_at_ms)
    assert await store.recent_attempts(new_trigger_id(T0)) == []
    # The occurrence's history keeps every line, without outcome or channel.
    assert [a.attempt for a in await store.attempts(tid, f"{tid}.1")] == [1, 2]


async def test_an_attempt_without_an_outcome_is_not_kept_in_the_ring(store: Store) -> None:
    tid = new_trigger_id(T0)
    await store.record_attempt(Attempt(tid, f"{tid}.1", 1, T0, 7, 503, "HTTP 503", None, "d"),
                               TTL_S, kept=10)
    assert await store.recent_attempts(tid) == []
    assert len(await store.attempts(tid, f"{tid}.1")) == 1


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


def _quiet_days() -> int:
    """The first of three days of this test alone: the operators' partitions of a day hold
    every caller's letters, and the keyspace is shared by the session (and by reruns within
    the TTL), so each test picks days nobody else writes."""
    return utc_ms(2045, 1, 1) + random.randrange(20_000) * DAY_MS


async def _pages(store: Store, q: DeadLetterQuery, limit: int) -> list[DeadLetter]:
    seen: list[DeadLetter] = []
    cursor = None
    while True:
        page = await store.list_dead_letters(q, cursor, limit)
        assert len(page.items) <= limit
        seen += page.items
        cursor = page.next_cursor
        if cursor is None:
            return seen


async def test_operators_listing_pages_exactly_across_buckets_and_days(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny reads (Cassandra's), so that partitions come back full and the merge must stop
    # at its horizon and go on from the cursor, many times a day.
    monkeypatch.setattr(dead_letter_listing, "_MIN_ROWS", 1)
    monkeypatch.setattr(dead_letter_listing, "_READ_ROWS", 2)
    base = _quiet_days()
    callers = [unique("dl-") for _ in range(3)]
    letters = [letter(callers[k % 3], base + DAY_MS * (k % 3) + (k // 6) * 60_000)
               for k in range(120)]  # 3 days, pairs at one instant (ordered by id)
    assert len({schema.scope_all_bucket(d.id) for d in letters}) > 8  # many buckets
    for d in letters:
        await store.put_dead_letter(d, TTL_S)
    q = DeadLetterQuery(None, base, base + 3 * DAY_MS)
    expected = sorted(letters, key=lambda d: (d.dead_at_ms, d.id), reverse=True)
    assert await _pages(store, q, 7) == expected  # newest first, each once, none skipped
    assert await _pages(store, q, 50) == expected  # one page
    gone = expected[5]
    await store.resolve_dead_letter(replace(gone, state=DeadLetterState.PURGED,
                                            resolved_at_ms=base), TTL_S)
    assert await _pages(store, q, 4) == [d for d in expected if d != gone]


async def test_letters_written_under_the_old_operators_scope_are_still_listed(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _quiet_days()
    caller = unique("dl-")
    old = [letter(caller, base + k * 3_600_000) for k in range(5)]
    with monkeypatch.context() as before_buckets:  # a release that wrote every letter to '*'
        before_buckets.setattr(schema, "scope_all_bucket", lambda _id: schema.SCOPE_ALL)
        for d in old:
            await store.put_dead_letter(d, TTL_S)
    new = [letter(caller, base + k * 3_600_000 + 1_800_000) for k in range(5)]
    for d in new:
        await store.put_dead_letter(d, TTL_S)
    q = DeadLetterQuery(None, base, base + DAY_MS)
    expected = sorted(old + new, key=lambda d: d.dead_at_ms, reverse=True)
    assert await _pages(store, q, 3) == expected
    # Resolved now: its '*' entry stays (not deleted any more), its record hides it.
    await store.resolve_dead_letter(replace(old[2], state=DeadLetterState.REPLAYED,
                                            resolved_at_ms=base), TTL_S)
    assert await _pages(store, q, 3) == [d for d in expected if d != old[2]]
    # Dead again after the replay: listed once, at the new death.
    again = replace(old[2], dead_at_ms=base + 20 * 3_600_000)
    await store.put_dead_letter(again, TTL_S)
    assert await _pages(store, q, 4) == [again] + [d for d in expected if d != old[2]]


async def test_open_jobs_by_bucket_and_counted_per_caller(store: Store) -> None:
    caller = unique("jobs-")
    q = DeadLetterQuery(caller, T0 - DAY_MS, T0)
    ids = [unique("job_") for _ in range(5)]
    for job_id in ids:
        await store.create_job(ReplayJob(job_id, q, T0, 1), [JobItem("trg_0.1", T0)], TTL_S)
    assert await store.count_open_jobs(caller) == 5
    assert await store.count_open_jobs(unique("jobs-")) == 0
    turns = len(schema.REPLAY_OPEN_KEYS)
    for job_id in ids:  # in the bucket of its key, and in no other
        assert [t for t in range(turns) if job_id in await store.open_jobs(t)] == [
            schema.REPLAY_OPEN_KEYS.index(schema.replay_open_key(job_id))]
        assert job_id in await store.open_jobs(turns + schema.REPLAY_OPEN_KEYS.index(
            schema.replay_open_key(job_id)))  # turns go round
    await store.finish_job(ids[0], TTL_S)
    await store.finish_job(ids[0], TTL_S)  # again (a runner that found it open): no harm
    assert await store.count_open_jobs(caller) == 4
    assert ids[0] not in await store.open_jobs()
    done = await store.get_job(ids[0])
    assert done is not None and done.status is JobStatus.DONE
