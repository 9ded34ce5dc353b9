"""The open index's backfill (migration 014's data step): every open trigger written by a
release before the index gets its entry, so ``status=PENDING`` lists it too.

Walks each caller's listing index over the retained and future months (the same pages as an
unfiltered LIST), and writes the entry of every trigger found open. Idempotent: running it
again rewrites the same entries; a trigger that finishes meanwhile leaves at most a stale
entry, which readers skip.
"""

from __future__ import annotations

from collections.abc import Sequence

from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.config.settings import Settings
from trigger_service.core.model import fire_month
from trigger_service.core.ports import ListCursor

_DAY_MS = 86_400_000
_PAGE = 500


async def backfill_open_index(store: CassandraStore, settings: Settings, now_ms: int,
                              callers: Sequence[str] | None = None) -> int:
    """Write the open-index entry of every open trigger (of ``callers``; None: of every
    caller with listing entries); returns how many. Raises ``StoreError``."""
    first = fire_month(now_ms - (settings.retention_days + 2) * _DAY_MS)
    last = fire_month(now_ms + (settings.api.max_fire_ahead_days + 2) * _DAY_MS)
    written = 0
    for caller in await store.listed_callers() if callers is None else callers:
        cursor: ListCursor | None = (first, -(2**63), "")
        while cursor is not None:
            page = await store.list_by_caller(caller, start=cursor, last_month=last,
                                              limit=_PAGE, status=None)
            for t in page.triggers:
                if not t.status.terminal:
                    await store.reindex_open(
                        t, settings.index_ttl_s(t.fire_at_ms, now_ms), now_ms)
                    written += 1
            cursor = page.next_cursor
    return written
