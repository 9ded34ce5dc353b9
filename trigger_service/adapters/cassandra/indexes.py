"""The indexes that find triggers by fire time: the entries a trigger's fire time writes (the
due index, the zone-rules index and its small "which releases" table), and a page of the
fire-month listing earlier releases wrote (``triggers_by_caller``: the backfill reads it).
Used by ``.triggers``."""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema
from trigger_service.core.model import (
    Status,
    Trigger,
    bucket_minute,
    next_month,
)
from trigger_service.core.ports.values import ListCursor, ListPage

K = TypeVar("K")
Row = dict[str, Any]
# A listing index's entry: ((time, trigger id), home, shard) - where the row is.
Entry = tuple[tuple[int, str], int | None, int]
_MIN_MS = -(2**63)
_LIST_MAX_READS = 50  # partition reads per LIST page (months with entries, usually a few)
# A zone-rules release's entry in zoned_versions outlives the entries it was written for by
# this much, so one write covers a day of registrations that resolve with it.
_VERSION_TTL_SLACK_S = 86_400

Write = tuple[str, Sequence[Any]]
Run = Callable[[str, Sequence[Any]], Awaitable[list[dict[str, Any]]]]
GetMany = Callable[[Sequence[str]], Awaitable[list[Trigger | None]]]


class WrittenUntil(Generic[K]):
    """Which small index rows this process has written, and until when they live: a row
    is written again only for an entry that must outlive it. Per process, not shared:
    every process writes each row once per period."""

    def __init__(self) -> None:
        self._expires_ms: dict[K, int] = {}

    def claim(self, key: K, now_ms: int, ttl_s: int) -> int | None:
        """The TTL to write the row with, or None if it is written and lives long enough."""
        expires_ms = now_ms + ttl_s * 1000
        if self._expires_ms.get(key, 0) >= expires_ms:
            return None
        self._expires_ms[key] = expires_ms
        return ttl_s

    def forget(self, key: K) -> None:
        self._expires_ms.pop(key, None)


def entry_writes(t: Trigger, index_ttl_s: int, ts_us: int, versions: WrittenUntil[str]
                 ) -> tuple[list[Write], Callable[[], None]]:
    """The due-index and zone-rules entries of ``t``'s fire time (independent entries of
    several partitions, for one unlogged batch), and what to call if they were not written
    (the zone-rules release's row this claimed is then written by the next registration)."""
    writes: list[Write] = [
        ("bucket", [bucket_minute(t.fire_at_ms), t.shard, t.fire_at_ms, t.trigger_id,
                    t.route.value, home_value(t),
                    index_ttl_s, ts_us]),
    ]
    if t.tzdata_version is not None:
        writes.append(("zoned_put", [t.tzdata_version, t.shard, t.trigger_id,
                                     index_ttl_s, ts_us]))
    # The small "which releases are in use" row: written once per process and day, with a
    # TTL that covers every entry of it, not once per registration.
    version = t.tzdata_version
    version_write = (None if version is None else versions.claim(
        version, ts_us // 1000, index_ttl_s + _VERSION_TTL_SLACK_S))
    if version_write is not None:
        writes.append(("version_put", [schema.ZONED_VERSIONS_KEY, version, version_write,
                                       ts_us]))

    def unwritten() -> None:
        if version_write is not None and version is not None:
            versions.forget(version)

    return writes, unwritten


async def list_page(run: Run, get_many: GetMany, caller: str, *, start: ListCursor,
                    last_month: int, limit: int, status: Status | None, max_rows: int
                    ) -> ListPage:
    """A page of ``triggers_by_caller`` by (month, fire time, id), at most ``max_rows`` index
    entries read (the listing of releases before ``triggers_by_created``)."""
    month, after_ms, after_id = start
    found: list[Trigger] = []
    # Only the months that hold entries (a few, even ten years ahead).
    used = [r[schema.COL_FIRE_MONTH] for r in await run("months", [caller, month, last_month])]
    if not used:
        return ListPage([], None)
    if used[0] > month:
        month, after_ms, after_id = used[0], _MIN_MS, ""
    # Each round reads at most `limit` index entries from one month partition, then the
    # rows themselves; filtering by status happens on the rows (the index has no status).
    reads, rows_left = 0, max_rows
    while (month <= last_month and len(found) < limit and reads < _LIST_MAX_READS
           and rows_left > 0):
        reads += 1
        want = min(limit - len(found), rows_left)
        rows = await run("list", [caller, month, after_ms, after_id, want])
        rows_left -= len(rows)
        triggers = await get_many([r[schema.COL_TRIGGER_ID] for r in rows])
        for r, t in zip(rows, triggers, strict=True):
            after_ms, after_id = r[schema.COL_FIRE_AT_MS], r[schema.COL_TRIGGER_ID]
            # An entry for another fire time is a past occurrence (or an edit's old time):
            # the trigger is listed once, at its current one.
            if (t is not None and t.fire_at_ms == after_ms
                    and (status is None or t.status is status)):
                found.append(t)
        if len(rows) < want:
            later = [m for m in used if m > month]
            month = later[0] if later else next_month(last_month)
            after_ms, after_id = _MIN_MS, ""
    more = month <= last_month
    return ListPage(found, (month, after_ms, after_id) if more else None)


def merge_parts(parts: Sequence[list[Row]], want: int, time_col: str, *,
                newest_first: bool = False) -> tuple[list[Entry], bool]:
    """The entries of one hour of a listing index, read from each of its parts in order
    (ascending, or ``newest_first``) with ``LIMIT want``: up to ``want`` of them merged in
    that order, and whether the parts hold no more after them. A part that answered ``want``
    rows may hold more after its last, so the merge is complete only up to the first such
    last key in the order (rows past it come again with the next read, from the cursor)."""
    lasts = [(p[-1][time_col], p[-1][schema.COL_TRIGGER_ID]) for p in parts if len(p) == want]
    bound = (max(lasts) if newest_first else min(lasts)) if lasts else None
    merged = heapq.merge(*([((r[time_col], r[schema.COL_TRIGGER_ID]), r[schema.COL_HOME_AT_MS],
                              r[schema.COL_SHARD]) for r in p] for p in parts),
                         reverse=newest_first)
    out = [e for e in merged
           if bound is None or (e[0] >= bound if newest_first else e[0] <= bound)]
    return out[:want], bound is None and len(out) <= want


def home_value(t: Trigger) -> object:
    """``t``'s home as an entry's value: unset for an earlier release's row (a null would be
    a tombstone)."""
    return UNSET_VALUE if t.home_at_ms is None else t.home_at_ms
