"""A caller's triggers newest first (``triggers_by_created``, ``created_hours``): the entry a
trigger writes at its creation (and again at each step of a series, to extend its TTL), and
a LIST page without an open status read through it, from the newest creation down."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra.indexes import Entry, WrittenUntil, home_value, merge_parts
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports.values import ListCursor, ListPage

Write = tuple[str, Sequence[Any]]
Run = Callable[[str, Sequence[Any]], Awaitable[list[dict[str, Any]]]]
GetManyAt = Callable[[Sequence[tuple[str, int | None, int]]], Awaitable[list[Trigger | None]]]
Key = tuple[int, str]  # (created_at_ms, trigger_id)

HOUR_MS = 3_600_000
_HOURS_PER_READ = 64


def created_queries(keyspace: str) -> dict[str, str]:
    """name → CQL of the creation index."""
    t, hours = f"{keyspace}.{s.TABLE_BY_CREATED}", f"{keyspace}.{s.TABLE_CREATED_HOURS}"
    return {
        "created_put": f"INSERT INTO {t} ({s.COL_CALLER}, {s.COL_CREATED_HOUR}, {s.COL_PART}, "
        f"{s.COL_CREATED_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {s.COL_SHARD}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
        "created_entries": f"SELECT {s.COL_CREATED_AT_MS}, {s.COL_TRIGGER_ID}, "
        f"{s.COL_HOME_AT_MS}, {s.COL_SHARD} FROM {t} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_CREATED_HOUR} = ? AND {s.COL_PART} = ? "
        f"AND ({s.COL_CREATED_AT_MS}, {s.COL_TRIGGER_ID}) < (?, ?) LIMIT ?",
        "created_hour_put": f"INSERT INTO {hours} ({s.COL_CALLER}, {s.COL_CREATED_HOUR}) "
        "VALUES (?, ?) USING TTL ? AND TIMESTAMP ?",
        "created_hours": f"SELECT {s.COL_CREATED_HOUR} FROM {hours} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_CREATED_HOUR} <= ? LIMIT ?",
    }


class CreatedIndex:
    """The writes and the newest-first pages. Per store (process): remembers which hour rows
    it wrote and until when they live, to write each again only when an entry outlives it."""

    def __init__(self, run: Run, get_many_at: GetManyAt) -> None:
        self._run = run
        self._get_many_at = get_many_at
        self._hours: WrittenUntil[tuple[str, int]] = WrittenUntil()

    def entry_writes(self, t: Trigger, index_ttl_s: int, ts_us: int) -> list[Write]:
        """The entry of ``t`` (its TTL: ``index_ttl_s``, that of its current fire time) and
        its hour's row if that would expire before it."""
        hour = t.created_at_ms // HOUR_MS
        writes: list[Write] = [("created_put", [
            t.caller, hour, t.shard % s.OPEN_PARTS, t.created_at_ms, t.trigger_id,
            home_value(t), t.shard, index_ttl_s, ts_us])]
        hour_ttl_s = self._hours.claim((t.caller, hour), ts_us // 1000, index_ttl_s)
        if hour_ttl_s is not None:
            writes.append(("created_hour_put", [t.caller, hour, hour_ttl_s, ts_us]))
        return writes

    def unwritten(self, t: Trigger) -> None:
        """``entry_writes`` of ``t`` did not reach Cassandra: its hour row is written again."""
        self._hours.forget((t.caller, t.created_at_ms // HOUR_MS))

    async def page(self, caller: str, *, before: ListCursor, limit: int,
                   status: Status | None, max_rows: int) -> ListPage:
        """``TriggerCatalog.list_by_caller`` without an open status: the caller's triggers
        (of ``status``, if given) created before ``before`` ((0, created ms, id); ``NEWEST``
        for the first page), newest first, reading at most ``max_rows`` entries."""
        after: Key = (before[1], before[2])
        found: list[Trigger] = []
        rows_left = max_rows
        hours = await self._hours_from(caller, after[0] // HOUR_MS)
        while hours and len(found) < limit and rows_left > 0:
            hour = hours[0]
            if hour < after[0] // HOUR_MS:
                after = ((hour + 1) * HOUR_MS, "")
            want = min(limit - len(found), rows_left)
            entries, done = await self._read_hour(caller, hour, after, want)
            rows_left -= len(entries)
            rows = await self._get_many_at([(tid, home, shard)
                                            for (_, tid), home, shard in entries])
            for (key, _, _), t in zip(entries, rows, strict=True):
                after = key
                if t is not None and (status is None or t.status is status):
                    found.append(t)
            if done:
                hours.pop(0)
                if not hours:
                    hours = await self._hours_from(caller, hour - 1)
                after = min(after, (hour * HOUR_MS, ""))
        return ListPage(found, (0, after[0], after[1]) if hours else None)

    async def _hours_from(self, caller: str, hour: int) -> list[int]:
        rows = await self._run("created_hours", [caller, hour, _HOURS_PER_READ])
        return [r[s.COL_CREATED_HOUR] for r in rows]

    async def _read_hour(self, caller: str, hour: int, before: Key, want: int
                         ) -> tuple[list[Entry], bool]:
        """Up to ``want`` entries of ``hour`` before ``before``, newest first, merged from
        its parts, and whether the hour holds no more below them."""
        parts = await asyncio.gather(*(
            self._run("created_entries", [caller, hour, part, before[0], before[1], want])
            for part in range(s.OPEN_PARTS)))
        return merge_parts(parts, want, s.COL_CREATED_AT_MS, newest_first=True)
