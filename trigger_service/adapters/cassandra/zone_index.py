"""``ZoneIndex`` on Cassandra: wall-clock triggers by the zone-rules release they were
resolved with (``zoned_triggers``, ``zoned_versions``; written with a trigger's other index
entries: ``.indexes``), for the reconciler's re-zoning. A part of ``CassandraStore``, on its
statements."""

from __future__ import annotations

from collections.abc import AsyncIterator

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import driver


class CassandraZoneIndex:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def zoned_versions(self) -> list[str]:
        rows = await self._cql.run("versions", [schema.ZONED_VERSIONS_KEY])
        return [r[schema.COL_TZDATA_VERSION] for r in rows]

    async def zoned_trigger_ids(self, tzdata_version: str, shard: int
                                ) -> AsyncIterator[list[str]]:
        async for rows in self._cql.pages("zoned_ids", [tzdata_version, shard]):
            yield [r[schema.COL_TRIGGER_ID] for r in rows]
