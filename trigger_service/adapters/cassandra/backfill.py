"""The listing indexes' backfill (the data step of migrations 014 and 015): every trigger
written by a release before ``triggers_by_created`` and ``open_triggers`` gets its entries
there, so every LIST finds it.

Walks each caller's fire-month listing of those releases over the retained and future
months and writes the entries of every trigger found (the open one only if it is open).
Idempotent: running it again rewrites the same entries; a trigger that finishes meanwhile
leaves at most a stale open entry, which readers skip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from trigger_service.adapters.cassandra.triggers import CassandraTriggers
from trigger_service.config.settings import Settings
from trigger_service.core.model import fire_month
from trigger_service.core.ports.values import ListCursor
from trigger_service.core.time.timing import DAY_MS

_PAGE = 500


async def backfill_listings(triggers: CassandraTriggers, settings: Settings, now_ms: int,
                            callers: Sequence[str] | None = None) -> int:
    """Write the listing entries of every trigger of ``triggers`` (``CassandraStore.triggers``)
    of ``callers`` (None: of every caller with fire-month entries); returns how many were
    open. Raises ``StoreError``."""
    first = fire_month(now_ms - (settings.retention_days + 2) * DAY_MS)
    last = fire_month(now_ms + (settings.api.max_fire_ahead_days + 2) * DAY_MS)
    written = 0
    for caller in await triggers.listed_callers() if callers is None else callers:
        cursor: ListCursor | None = (first, -(2**63), "")
        while cursor is not None:
            page = await triggers.legacy_listing(caller, start=cursor, last_month=last,
                                                 limit=_PAGE)
            # A page's triggers at once: the writes are independent and idempotent.
            await asyncio.gather(*(
                triggers.reindex(t, settings.index_ttl_s(t.fire_at_ms, now_ms), now_ms)
                for t in page.triggers))
            written += sum(not t.status.terminal for t in page.triggers)
            cursor = page.next_cursor
    return written
