"""``CallerPauses`` on Cassandra (``paused_callers``, infra/cql/017): a part of
``CassandraStore``, on its statements. One partition: the whole table is a handful of rows."""

from __future__ import annotations

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver


def pause_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the table of this module."""
    t = f"{keyspace}.{s.TABLE_PAUSED_CALLERS}"
    return {
        # IF NOT EXISTS: a second pause keeps the first one's time.
        "caller_pause": f"INSERT INTO {t} ({s.COL_K}, {s.COL_CALLER}, {s.COL_PAUSED_AT_MS}) "
        "VALUES (?, ?, ?) IF NOT EXISTS",
        "caller_resume": f"DELETE FROM {t} WHERE {s.COL_K} = ? AND {s.COL_CALLER} = ?",
        "callers_paused": f"SELECT {s.COL_CALLER}, {s.COL_PAUSED_AT_MS} FROM {t} "
        f"WHERE {s.COL_K} = ?",
    }


class CassandraCallerPauses:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def pause_caller(self, caller: str, paused_at_ms: int) -> None:
        await self._cql.run("caller_pause", [s.PAUSED_CALLERS_KEY, caller, paused_at_ms])

    async def resume_caller(self, caller: str) -> None:
        await self._cql.run("caller_resume", [s.PAUSED_CALLERS_KEY, caller])

    async def paused_callers(self) -> dict[str, int]:
        rows = await self._cql.run("callers_paused", [s.PAUSED_CALLERS_KEY])
        return {r[s.COL_CALLER]: r[s.COL_PAUSED_AT_MS] for r in rows}
