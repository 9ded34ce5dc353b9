"""``DebounceHeads`` on Cassandra (``debounce_heads``, infra/cql/030): a part of
``CassandraStore``, on its statements. A partition is one (caller, key): one row.

Both writes are LWTs and answer what is there after them, so a read that is behind costs a
lost round, never a second head. A lost start comes with the row's values; a lost replace
only with the condition's column, so the head there is read again (after the LWT it lost
to, which Paxos completed first)."""

from __future__ import annotations

from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.core.debounce import DebounceHead
from trigger_service.core.errors import StoreError


def debounce_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the table of this module."""
    t = f"{keyspace}.{s.TABLE_DEBOUNCE_HEADS}"
    cols = f"{s.COL_STARTED_AT_MS}, {s.COL_MAX_WAIT_S}, {s.COL_HEAD_EXPIRES_AT_MS}"
    return {
        "debounce_get": f"SELECT {cols} FROM {t} WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_DEBOUNCE_KEY} = ?",
        "debounce_start": f"INSERT INTO {t} ({s.COL_CALLER}, {s.COL_DEBOUNCE_KEY}, {cols}) "
        "VALUES (?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?",
        "debounce_replace": f"UPDATE {t} USING TTL ? SET {s.COL_STARTED_AT_MS} = ?, "
        f"{s.COL_MAX_WAIT_S} = ?, {s.COL_HEAD_EXPIRES_AT_MS} = ? WHERE {s.COL_CALLER} = ? "
        f"AND {s.COL_DEBOUNCE_KEY} = ? IF {s.COL_STARTED_AT_MS} = ?",
    }


class CassandraDebounceHeads:
    def __init__(self, cql: driver.Statements) -> None:
        """On the store's statements (``CassandraStore.statements``)."""
        self._cql = cql

    async def debounce_head(self, caller: str, key: str) -> DebounceHead | None:
        rows = await self._cql.run("debounce_get", [caller, key])
        return _head(caller, key, rows[0]) if rows else None

    async def start_head(self, head: DebounceHead, ttl_s: int) -> DebounceHead:
        rows = await self._cql.run("debounce_start", [
            head.caller, head.key, head.started_at_ms, head.max_wait_s, head.expires_at_ms,
            ttl_s])
        if rows and rows[0].get(s.LWT_APPLIED):
            return head
        if not rows:
            raise StoreError(f"debounce head {head.key!r}: no answer to its start")
        return _head(head.caller, head.key, rows[0])

    async def replace_head(self, old: DebounceHead, new: DebounceHead,
                           ttl_s: int) -> DebounceHead:
        rows = await self._cql.run("debounce_replace", [
            ttl_s, new.started_at_ms, new.max_wait_s, new.expires_at_ms, new.caller, new.key,
            old.started_at_ms])
        if rows and rows[0].get(s.LWT_APPLIED):
            return new
        if rows and rows[0].get(s.COL_STARTED_AT_MS) is not None:
            # Lost to another head: the answer holds its start only, not its bound.
            there = await self.debounce_head(new.caller, new.key)
            return there if there is not None else _head(new.caller, new.key, rows[0])
        return await self.start_head(new, ttl_s)  # none there (expired): a new one


def _head(caller: str, key: str, row: dict[str, Any]) -> DebounceHead:
    return DebounceHead(caller, key, int(row[s.COL_STARTED_AT_MS]), row.get(s.COL_MAX_WAIT_S),
                        row.get(s.COL_HEAD_EXPIRES_AT_MS))
