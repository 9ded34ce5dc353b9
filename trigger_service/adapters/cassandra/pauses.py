"""``CallerPauses`` on Cassandra (``paused_callers``, infra/cql/017), mixed into
``CassandraStore`` (one session). One partition: the whole table is a handful of rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trigger_service.adapters import schema as s


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
    """Needs ``_run`` from ``CassandraStore``."""

    async def _run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # provided by CassandraStore

    async def pause_caller(self, caller: str, paused_at_ms: int) -> None:
        await self._run("caller_pause", [s.PAUSED_CALLERS_KEY, caller, paused_at_ms])

    async def resume_caller(self, caller: str) -> None:
        await self._run("caller_resume", [s.PAUSED_CALLERS_KEY, caller])

    async def paused_callers(self) -> dict[str, int]:
        rows = await self._run("callers_paused", [s.PAUSED_CALLERS_KEY])
        return {r[s.COL_CALLER]: r[s.COL_PAUSED_AT_MS] for r in rows}
