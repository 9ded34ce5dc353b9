"""The dead-letter listing's merge of many partitions (``adapters.cassandra.
dead_letter_listing``) on a fake ``dead_letters_by_day``: paging is exact (every entry once,
newest first, none skipped) across buckets, days, the legacy '*' and tiny reads that make
every partition "full" (the horizon) all the time."""

from __future__ import annotations

import random
from typing import Any

import pytest

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import dead_letter_listing as listing
from trigger_service.core.dead_letters import DeadLetterCursor, DeadLetterQuery, day_of
from trigger_service.core.time.timing import DAY_MS

T0 = 40 * 365 * DAY_MS
Row = dict[str, Any]


class Table:
    """(scope, day) → rows; reads like ``dl_day_list``: newest first, before the cursor."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, int], list[Row]] = {}
        self.reads = 0

    def put(self, scope: str, dead_at_ms: int, letter_id: str, reason: str) -> None:
        self.parts.setdefault((scope, day_of(dead_at_ms)), []).append(
            {schema.COL_DEAD_AT_MS: dead_at_ms, schema.COL_ID: letter_id, "reason": reason})

    async def read(self, scope: str, day: int, before_ms: int, before_id: str,
                   limit: int) -> list[Row]:
        self.reads += 1
        rows = sorted(self.parts.get((scope, day), []),
                      key=lambda r: (r[schema.COL_DEAD_AT_MS], r[schema.COL_ID]), reverse=True)
        return [r for r in rows
                if (r[schema.COL_DEAD_AT_MS], r[schema.COL_ID]) < (before_ms, before_id)][:limit]


def _fill(rng: random.Random, table: Table, n: int, days: int) -> list[tuple[int, str, str]]:
    letters = []
    for k in range(n):
        # few distinct instants: many ties, ordered by id
        at = T0 - rng.randrange(days * 24) * 3_600_000 // 3 * 3
        letter_id = f"trg_{k:06d}.1"
        reason = rng.choice(("gone", "max_age"))
        where = rng.random()
        if where < 0.8:
            table.put(schema.scope_all_bucket(letter_id), at, letter_id, reason)
        if where > 0.7:  # written before the buckets (0.7-0.8: under both)
            table.put(schema.SCOPE_ALL, at, letter_id, reason)
        letters.append((at, letter_id, reason))
    return sorted(letters, reverse=True)


async def _all_pages(table: Table, q: DeadLetterQuery, limit: int,
                     accept: Any) -> tuple[list[str], int]:
    seen: list[str] = []
    cursor: DeadLetterCursor | None = None
    pages = 0
    while True:
        rows, cursor = await listing.list_rows(table.read, schema.SCOPES_ALL, q, cursor,
                                               limit, accept)
        assert len(rows) <= limit
        seen += [r[schema.COL_ID] for r in rows]
        pages += 1
        if cursor is None:
            return seen, pages


@pytest.mark.parametrize("seed", range(12))
async def test_operators_pages_are_exact_across_buckets_days_and_the_legacy_scope(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(listing, "_MIN_ROWS", rng.choice((1, 2, 3)))
    monkeypatch.setattr(listing, "_READ_ROWS", rng.choice((2, 4, 200)))
    if seed % 3 == 0:
        monkeypatch.setattr(listing, "_LIST_MAX_ROUNDS", 2)  # short pages with a cursor
    table = Table()
    letters = _fill(rng, table, rng.randrange(40, 300), days=4)
    since = T0 - rng.randrange(1, 4) * DAY_MS - rng.randrange(DAY_MS)
    q = DeadLetterQuery(None, since, T0)
    only_gone = seed % 2 == 1
    expected = [i for at, i, reason in letters
                if at >= since and (not only_gone or reason == "gone")]
    limit = rng.choice((1, 3, 7, 50))
    seen, pages = await _all_pages(table, q, limit,
                                   lambda r: not only_gone or r["reason"] == "gone")
    assert seen == expected  # newest first, each once, none skipped
    assert pages > 1 or len(expected) <= limit


async def test_a_day_of_full_buckets_moves_on_by_the_horizon() -> None:
    table = Table()
    for k in range(16):  # one letter per bucket per hour, 3 hours
        for h in range(3):
            letter_id = f"trg_{k:06d}.{h}"
            table.put(schema.scope_all_bucket(letter_id), T0 - h * 3_600_000, letter_id, "gone")
    rows, cursor = await listing.list_rows(
        table.read, schema.SCOPES_ALL, DeadLetterQuery(None, T0 - DAY_MS, T0), None, 10,
        lambda r: True)
    assert len(rows) == 10 and cursor is not None
    assert cursor[1:] == (rows[-1][schema.COL_DEAD_AT_MS], rows[-1][schema.COL_ID])


def test_merge_keeps_only_what_is_in_order_and_drops_repeats() -> None:
    def r(at: int, i: str) -> Row:
        return {schema.COL_DEAD_AT_MS: at, schema.COL_ID: i}

    full = [r(9, "a"), r(5, "a")]  # asked 2, got 2: may hold more below (5, "a")
    short = [r(8, "b")]  # got fewer than asked: complete for the day
    repeat = [r(5, "a"), r(1, "c")]  # full too; (5, "a") also under the legacy '*'
    rows, complete = listing.merge([full, short, repeat], 2)
    assert [(x[schema.COL_DEAD_AT_MS], x[schema.COL_ID]) for x in rows] == [
        (9, "a"), (8, "b"), (5, "a")]  # (1, "c") waits: below the horizon; (5, "a") once
    assert not complete
    rows, complete = listing.merge([short, []], 2)
    assert complete and len(rows) == 1
