"""``DueIndex`` and ``SweepCursors`` on Cassandra: the sweepers' tables, the due buckets
(``trigger_buckets``, written with a trigger's other index entries: ``.indexes``) and each
sweeper group's cursors (``sweep_cursors``). A part of ``CassandraStore``, on its statements."""

from __future__ import annotations

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import driver
from trigger_service.core.model import Route, bucket_minute
from trigger_service.core.ports.values import BucketEntry

_SCAN_PAGE_SIZE = 2000  # rows per page of a bucket's scan


class CassandraDueIndex:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        """One query per minute partition, paged."""
        out: list[BucketEntry] = []
        for minute in range(bucket_minute(after_ms + 1), bucket_minute(until_ms) + 1):
            async for rows in self._cql.pages(
                    "bucket_scan", [minute, shard, after_ms, until_ms], _SCAN_PAGE_SIZE):
                out.extend(BucketEntry(r[schema.COL_TRIGGER_ID], r[schema.COL_FIRE_AT_MS], shard,
                                       Route(r[schema.COL_PATH]), r[schema.COL_HOME_AT_MS])
                           for r in rows)
        return out

    async def load_cursors(self, group: str) -> dict[int, int]:
        rows = await self._cql.run("cursor_get", [group])
        return {r[schema.COL_SHARD]: r[schema.COL_PROMOTED_UNTIL_MS] for r in rows}

    async def save_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None:
        await self._cql.run("cursor_put", [group, shard, promoted_until_ms, owner, fence])
