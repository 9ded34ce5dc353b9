"""``CounterStore`` on Cassandra: a counter table, every process adding its deltas. A part
of ``CassandraStore``, on its statements."""

from __future__ import annotations

import asyncio

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import driver


class CassandraCounters:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def add_counters(self, deltas: dict[str, int]) -> None:
        await asyncio.gather(*(self._cql.run("counter_add", [delta, name])
                               for name, delta in deltas.items() if delta))

    async def read_counters(self) -> dict[str, int]:
        rows = await self._cql.run("counters_get", [])
        return {r[schema.COL_COUNTER_NAME]: r[schema.COL_COUNTER_VALUE] for r in rows}
