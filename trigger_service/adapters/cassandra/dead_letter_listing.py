"""The dead-letter listing on ``dead_letters_by_day``: one scope's partitions of a day read
from the cursor and merged newest first, one day after another.

A caller's scope is one partition a day; the operators' is ``schema.SCOPES_ALL`` (the
buckets, and the legacy ``*``). The order is (``dead_at_ms``, ``id``) descending over all of
a day's partitions, and the cursor is the last entry looked at (exclusive), so a page goes
on exactly where the previous one stopped whatever the number of partitions: no entry twice,
none skipped.

The merge of one read of each partition is in order only down to its *horizon*: a partition
that returned all it was asked for may hold more, older than its last row, so the rows below
the newest such last row are left for the next read (which starts from the cursor). The
horizon's own partition gave at least that row, so every read moves the cursor on. An entry
in two partitions (a letter written under ``*`` by an earlier release and again under its
bucket) is one entry: same key, looked at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.core.dead_letters import DeadLetterCursor, DeadLetterQuery, day_of

MAX_ID = "\U0010ffff"  # sorts after every id: "everything at this instant"
MAX_MS = 2**62
_LIST_MAX_ROUNDS = 40  # reads of a scope's partitions per call (a rare filter cannot scan on)
_READ_ROWS = 200  # per partition read; fewer for each of many (see rows_per_read)
_MIN_ROWS = 20

# (scope, day, before_ms, before_id, limit) → rows newest first, strictly before the cursor
ReadDay = Callable[[str, int, int, str, int], Awaitable[list[dict[str, Any]]]]
Row = dict[str, Any]


def _key(r: Row) -> tuple[int, str]:
    return r[s.COL_DEAD_AT_MS], r[s.COL_ID]


def rows_per_read(missing: int, partitions: int) -> int:
    # One partition: as before the buckets. Many: about twice each one's share of what the
    # page still misses (hashing spreads a day evenly), so that the operators' page of 50
    # does not read 17 times 200 rows.
    if partitions == 1:
        return _READ_ROWS
    return min(_READ_ROWS, max(_MIN_ROWS, 2 * missing // partitions + 1))


def merge(batches: Sequence[list[Row]], asked: int,
          key: Callable[[Row], tuple[int, str]] = _key) -> tuple[list[Row], bool]:
    """The rows of one read of each partition that are in order, newest first (by ``key``:
    (time, id)), without repeats; and whether the day is read to its end (no partition may
    hold more). The audit log's listing (``.audit``) merges its parts with it too."""
    full = [b[-1] for b in batches if len(b) >= asked]
    horizon = max((key(r) for r in full), default=None)
    rows = sorted((r for b in batches for r in b), key=key, reverse=True)
    out: list[Row] = []
    for r in rows:
        if horizon is not None and key(r) < horizon:
            break
        if not out or key(out[-1]) != key(r):
            out.append(r)
    return out, horizon is None


async def list_rows(read: ReadDay, scopes: Sequence[str], q: DeadLetterQuery,
                    cursor: DeadLetterCursor | None, limit: int,
                    accept: Callable[[Row], bool]) -> tuple[list[Row], DeadLetterCursor | None]:
    """Up to ``limit`` rows that ``accept`` (the filters), newest first, from the cursor on,
    and the cursor after them (None: nothing more in ``q``'s window). At most
    ``_LIST_MAX_ROUNDS`` rounds of reads: a page may be short with a cursor to go on."""
    day, before_ms, before_id = cursor or (day_of(q.until_ms), q.until_ms, MAX_ID)
    first_day = day_of(q.since_ms)
    found: list[Row] = []
    rounds = 0
    while day >= first_day and len(found) < limit and rounds < _LIST_MAX_ROUNDS:
        rounds += 1
        asked = rows_per_read(limit - len(found), len(scopes))
        batches = await asyncio.gather(*(read(scope, day, before_ms, before_id, asked)
                                         for scope in scopes))
        rows, day_done = merge(batches, asked)
        for r in rows:
            before_ms, before_id = _key(r)
            if before_ms < q.since_ms:
                day_done, day = False, first_day - 1  # older than asked: done
                break
            if accept(r):
                found.append(r)
                if len(found) == limit:
                    day_done = False  # the cursor says where this day goes on
                    break
        if day_done:  # the day before, from its end
            day, before_ms, before_id = day - 1, MAX_MS, MAX_ID
    return found, (day, before_ms, before_id) if day >= first_day else None
