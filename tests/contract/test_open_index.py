"""The open listing (``list_by_caller`` with ``status`` PENDING or IN_FLIGHT): a full first
page whatever history lies behind it, and exact under every move a trigger makes."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.support import (
    INDEX_TTL_S,
    MIN_MS,
    Store,
    make_trigger,
    rows_per_call,
    unique,
    utc_ms,
)
from trigger_service.core.model import Status, Trigger, fire_month
from trigger_service.core.ports.values import ListCursor

HOUR_MS = 3_600_000
START: ListCursor = (203101, MIN_MS, "")
LAST = 203112


async def _pages(store: Store, caller: str, limit: int, status: Status) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor: ListCursor | None = START
    while cursor is not None:
        assert len(pages) < 100, "the cursor never ran out"
        page = await store.list_by_caller(caller, start=cursor, last_month=LAST, limit=limit,
                                          status=status)
        assert len(page.triggers) <= limit
        pages.append([t.trigger_id for t in page.triggers])
        cursor = page.next_cursor
    return pages


def _ids(triggers: list[Trigger]) -> list[str]:
    return [t.trigger_id for t in sorted(triggers, key=lambda t: (t.fire_at_ms, t.trigger_id))]


async def test_the_first_pending_page_is_full_with_a_long_history_behind_it(store: Store) -> None:
    """300 finished triggers over 30 hours before 7 pending ones: the first page of two is
    full, and paging lists the 7 once each, in fire-time order."""
    caller = unique("caller-")
    base = utc_ms(2031, 1, 3)
    history = [make_trigger(caller, base + i * HOUR_MS // 10, shard=i) for i in range(300)]
    pending = [make_trigger(caller, base + 31 * HOUR_MS + i * 61_000, shard=i)
               for i in range(7)]
    for t in history + pending:
        await store.create(t, INDEX_TTL_S)
    for i, t in enumerate(history):
        done = Status.CANCELLED if i % 3 == 0 else Status.FIRED
        assert await store.compare_and_set(t, replace(t, status=done), ttl_s=INDEX_TTL_S)
    first = await store.list_by_caller(caller, start=START, last_month=LAST, limit=2,
                                       status=Status.PENDING)
    assert [t.trigger_id for t in first.triggers] == _ids(pending)[:2]
    assert first.next_cursor is not None
    for limit in (2, 3, 7, 50):
        pages = await _pages(store, caller, limit, Status.PENDING)
        assert [i for p in pages for i in p] == _ids(pending), f"limit {limit}"
        assert all(len(p) == limit for p in pages[:len(pending) // limit]), f"limit {limit}"
    # The history stays listed under its own statuses.
    assert len([i for p in await _pages(store, caller, 100, Status.IN_FLIGHT) for i in p]) == 0


async def test_the_open_listing_is_exact_under_every_move(store: Store) -> None:
    caller = unique("caller-")
    at = utc_ms(2031, 5, 1, 9)
    a, b, c, d, e, f = (make_trigger(caller, at + i * 60_000, shard=i) for i in range(6))
    for t in (a, b, c, d, e, f):
        await store.create(t, INDEX_TTL_S)
    now_ms = a.created_at_ms

    # Cancel: gone.
    assert await store.compare_and_set(a, replace(a, status=Status.CANCELLED), ttl_s=INDEX_TTL_S)
    # An edit to another time, two hours later: listed once, there.
    b2 = replace(b, fire_at_ms=at + 2 * HOUR_MS, revision=1)
    assert await store.advance(b, b2, INDEX_TTL_S, now_ms)
    # A claim: IN_FLIGHT, not PENDING; then a retry: PENDING again, at its time.
    c_claimed = replace(c, status=Status.IN_FLIGHT, claim_id="k1", claimed_at_ms=now_ms,
                              attempts=1)
    assert await store.compare_and_set(c, c_claimed)
    in_flight = await _pages(store, caller, 10, Status.IN_FLIGHT)
    assert [i for p in in_flight for i in p] == [c.trigger_id]
    c_retry = replace(c_claimed, status=Status.PENDING, claim_id=None,
                                    next_attempt_at_ms=c.fire_at_ms + 5_000)
    assert await store.compare_and_set(c_claimed, c_retry)
    # A series' step: claimed, then moved to its next occurrence a day later.
    d_claimed = replace(d, status=Status.IN_FLIGHT, claim_id="k2", claimed_at_ms=now_ms,
                              attempts=1)
    assert await store.compare_and_set(d, d_claimed)
    d_next = replace(d_claimed, status=Status.PENDING, claim_id=None, attempts=0,
                                   fire_at_ms=d.fire_at_ms + 24 * HOUR_MS,
                                   occurrence_seq=1)
    assert await store.advance(d_claimed, d_next, INDEX_TTL_S, now_ms)
    # Fired (and, as after expiry or the last retry, failed): gone.
    assert await store.compare_and_set(e, replace(e, status=Status.FIRED, fired_at_ms=now_ms),
                                       ttl_s=INDEX_TTL_S)
    f_failed = replace(f, status=Status.FAILED, last_error="expired")
    assert await store.compare_and_set(f, f_failed, ttl_s=INDEX_TTL_S)
    # A move that loses its race (the row changed meanwhile) lists nothing at its time.
    stale = replace(b, fire_at_ms=at + 3 * HOUR_MS, revision=7)
    assert not await store.advance(b, stale, INDEX_TTL_S, now_ms)

    expected = [c.trigger_id, b.trigger_id, d.trigger_id]  # by their current fire times
    for limit in (1, 2, 10):
        pages = await _pages(store, caller, limit, Status.PENDING)
        assert [i for p in pages for i in p] == expected, f"limit {limit}"
    # A failed one brought back (a replay): listed again, at its new time.
    f_back = replace(f_failed, status=Status.PENDING, fire_at_ms=at + 5 * HOUR_MS,
                                  revision=1, last_error=None)
    assert await store.advance(f_failed, f_back, INDEX_TTL_S, now_ms)
    pages = await _pages(store, caller, 10, Status.PENDING)
    assert [i for p in pages for i in p] == [*expected[:2], f.trigger_id, d.trigger_id]
    page = await store.list_by_caller(caller, start=START, last_month=LAST, limit=10,
                                      status=Status.PENDING)
    assert [t.fire_at_ms for t in page.triggers] == [
        c.fire_at_ms, b2.fire_at_ms, f_back.fire_at_ms, d_next.fire_at_ms]


async def test_the_open_listing_cursor_is_stable_under_changes_behind_it(store: Store) -> None:
    """Triggers that finish or appear before the cursor change nothing after it: no
    duplicate, no gap among those that stay open."""
    caller = unique("caller-")
    at = utc_ms(2031, 7, 1)
    ts = [make_trigger(caller, at + i * 600_000, shard=i) for i in range(12)]
    for t in ts:
        await store.create(t, INDEX_TTL_S)
    first = await store.list_by_caller(caller, start=START, last_month=LAST, limit=5,
                                       status=Status.PENDING)
    assert [t.trigger_id for t in first.triggers] == _ids(ts)[:5]
    for t in first.triggers[:3]:
        assert await store.compare_and_set(t, replace(t, status=Status.CANCELLED), ttl_s=60)
    await store.create(make_trigger(caller, at - HOUR_MS, shard=99), INDEX_TTL_S)
    assert first.next_cursor is not None
    rest: list[str] = []
    cursor: ListCursor | None = first.next_cursor
    while cursor is not None:
        page = await store.list_by_caller(caller, start=cursor, last_month=LAST, limit=5,
                                          status=Status.PENDING)
        rest += [t.trigger_id for t in page.triggers]
        cursor = page.next_cursor
    assert rest == _ids(ts)[5:]
    assert fire_month(at) == 203107


async def test_a_page_that_ends_on_an_hours_last_millisecond_goes_on_without_a_repeat(
        store: Store) -> None:
    caller = unique("caller-")
    edge = utc_ms(2031, 9, 1, 11) - 1  # 10:59:59.999
    ts = [make_trigger(caller, ms, shard=i) for i, ms in enumerate(
        (edge - 1_000, edge, edge + 1, edge + HOUR_MS))]
    for t in ts:
        await store.create(t, INDEX_TTL_S)
    for limit in (1, 2, 3):
        pages = await _pages(store, caller, limit, Status.PENDING)
        assert [i for p in pages for i in p] == _ids(ts), f"limit {limit}"


async def test_a_rare_open_status_reads_a_bounded_number_of_rows_then_goes_on_with_a_cursor(
        store: Store) -> None:
    """Many PENDING triggers and a few IN_FLIGHT among them: a page of the rare status reads
    at most ``list_max_rows`` open triggers, then ends short (even empty) with a cursor, and
    paging still lists each IN_FLIGHT one once."""
    caller = unique("caller-")
    at = utc_ms(2031, 11, 2, 8)
    ts = [make_trigger(caller, at + i * 400_000, shard=i) for i in range(20)]  # over 3 hours
    for t in ts:
        await store.create(t, INDEX_TTL_S)
    flying = [ts[4], ts[17]]
    for t in flying:
        assert await store.compare_and_set(t, replace(
            t, status=Status.IN_FLIGHT, claim_id="k", claimed_at_ms=t.created_at_ms, attempts=1))
    with rows_per_call(store, 3):
        first = await store.list_by_caller(caller, start=START, last_month=LAST, limit=100,
                                           status=Status.IN_FLIGHT)
        assert first.triggers == [] and first.next_cursor is not None
        in_flight = await _pages(store, caller, 100, Status.IN_FLIGHT)
        pending = await _pages(store, caller, 100, Status.PENDING)
    assert [i for p in in_flight for i in p] == _ids(flying)
    assert len(in_flight) >= 20 // 3
    assert [i for p in pending for i in p] == _ids([t for t in ts if t not in flying])
    assert all(len(p) <= 3 for p in pending)
