"""A caller's triggers by term (``triggers_by_term``): the entries a trigger's tags,
labels and recipient write with its other index entries, and a filtered LIST page read
through one term's entries, newest created first, each checked against its row."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra.indexes import Entry, home_value, merge_parts
from trigger_service.core.model import Trigger
from trigger_service.core.ports.values import ListCursor, ListPage
from trigger_service.core.tags import TriggerFilter, trigger_terms

Write = tuple[str, Sequence[Any]]
Run = Callable[[str, Sequence[Any]], Awaitable[list[dict[str, Any]]]]
GetManyAt = Callable[[Sequence[tuple[str, int | None, int]]], Awaitable[list[Trigger | None]]]


def term_queries(keyspace: str) -> dict[str, str]:
    """name → CQL of the term index."""
    t = f"{keyspace}.{s.TABLE_BY_TERM}"
    return {
        "term_put": f"INSERT INTO {t} ({s.COL_CALLER}, {s.COL_TERM}, {s.COL_PART}, "
        f"{s.COL_CREATED_AT_MS}, {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {s.COL_SHARD}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
        "term_entries": f"SELECT {s.COL_CREATED_AT_MS}, {s.COL_TRIGGER_ID}, "
        f"{s.COL_HOME_AT_MS}, {s.COL_SHARD} FROM {t} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_TERM} = ? AND {s.COL_PART} = ? "
        f"AND ({s.COL_CREATED_AT_MS}, {s.COL_TRIGGER_ID}) < (?, ?) LIMIT ?",
    }


def term_writes(t: Trigger, index_ttl_s: int, ts_us: int) -> list[Write]:
    """One entry per term of ``t`` (none without tags, labels or recipient)."""
    return [("term_put", [t.caller, term, t.shard % s.TERM_PARTS, t.created_at_ms,
                          t.trigger_id, home_value(t), t.shard, index_ttl_s, ts_us])
            for term in trigger_terms(t)]


class TermIndex:
    def __init__(self, run: Run, get_many_at: GetManyAt) -> None:
        self._run = run
        self._get_many_at = get_many_at

    async def page(self, caller: str, flt: TriggerFilter, *, before: ListCursor, limit: int,
                   max_rows: int) -> ListPage:
        """``FilteredListing.list_by_filter`` for a filter with a term: up to ``limit`` of
        ``caller``'s triggers matching ``flt`` created before ``before`` ((0, created ms,
        id)), newest first, reading at most ``max_rows`` entries; a cursor unless the term
        holds no more."""
        term = flt.driving_term
        assert term is not None
        after = (before[1], before[2])
        found: list[Trigger] = []
        rows_left = max_rows
        more = True
        while more and len(found) < limit and rows_left > 0:
            want = min(limit - len(found), rows_left)
            entries, done = await self._read(caller, term, after, want)
            more = not done
            rows_left -= len(entries)
            rows = await self._get_many_at([(tid, home, shard)
                                            for (_, tid), home, shard in entries])
            for (key, _, _), t in zip(entries, rows, strict=True):
                after = key
                # The row is the truth: an entry of a tag since removed, of another caller's
                # id, or of a row gone is skipped.
                if t is not None and t.caller == caller and flt.matches(t):
                    found.append(t)
        return ListPage(found, (0, after[0], after[1]) if more else None)

    async def _read(self, caller: str, term: str, before: tuple[int, str], want: int
                    ) -> tuple[list[Entry], bool]:
        parts = await asyncio.gather(*(
            self._run("term_entries", [caller, term, part, before[0], before[1], want])
            for part in range(s.TERM_PARTS)))
        return merge_parts(parts, want, s.COL_CREATED_AT_MS, newest_first=True)

