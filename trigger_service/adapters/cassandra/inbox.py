"""``InboxStore`` on Cassandra (table in ``infra/cql/009_inbox.cql``): a part of
``CassandraStore``, on its statements and sealer.

A message is written once with ``INSERT IF NOT EXISTS`` (a redelivery finds it and changes
nothing, read time included); the read time is set with an LWT ``IF read_at_ms = null`` (the
first one stays); deletion writes a marker. Later cells carry what is left of the message's
TTL (read back as ``TTL(title)``), so a message's cells all expire together. Title, body and
data are sealed with ``TRIGGER_ENCRYPTION_PAYLOADS`` (``sealing.RowSealer.seal_text``, each
bound to its message and column); rows written in clear read as they are.
"""

from __future__ import annotations

from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.sealing import RowSealer, inbox_context
from trigger_service.core.notify.inbox import InboxMessage, InboxPage

_ABOVE_ALL = "~"  # sorts after every message id ("msg_...")
_READ_ROWS = 200
_LIST_MAX_READS = 10  # partition reads per listing call (a page of unread among many read)


def inbox_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the table of this module."""
    t = f"{keyspace}.{s.TABLE_INBOX}"
    key = (s.COL_CALLER, s.COL_RECIPIENT, s.COL_MESSAGE_ID)
    cols = (*key, *s.INBOX_COLUMNS, s.COL_READ_AT_MS, s.COL_DELETED_AT_MS)
    select = f"SELECT {', '.join(cols)}, TTL({s.INBOX_COLUMNS[2]}) AS {s.COL_TTL} FROM {t}"
    part = f"{s.COL_CALLER} = ? AND {s.COL_RECIPIENT} = ?"
    where = f"WHERE {part} AND {s.COL_MESSAGE_ID} = ?"
    written = (*key, *s.INBOX_COLUMNS)
    return {
        "inbox_put": f"INSERT INTO {t} ({', '.join(written)}) "
        f"VALUES ({', '.join('?' for _ in written)}) IF NOT EXISTS USING TTL ?",
        "inbox_get": f"{select} {where}",
        "inbox_before": f"{select} WHERE {part} AND {s.COL_MESSAGE_ID} < ? LIMIT ?",
        "inbox_after": f"{select} WHERE {part} AND {s.COL_MESSAGE_ID} > ? "
        f"ORDER BY {s.COL_MESSAGE_ID} ASC LIMIT ?",
        "inbox_read": f"UPDATE {t} USING TTL ? SET {s.COL_READ_AT_MS} = ? {where} "
        f"IF {s.COL_READ_AT_MS} = null",
        "inbox_delete": f"UPDATE {t} USING TTL ? SET {s.COL_DELETED_AT_MS} = ? {where}",
    }


def _opened_message(r: dict[str, Any]) -> InboxMessage:
    """The message an opened row holds."""
    return InboxMessage(
        caller=r[s.COL_CALLER], recipient=r[s.COL_RECIPIENT], message_id=r[s.COL_MESSAGE_ID],
        trigger_id=r[s.COL_TRIGGER_ID], occurrence_id=r[s.COL_OCCURRENCE_ID],
        title=r["title"], body=r["body"] or "", data_json=r["data"],
        created_at_ms=r[s.COL_CREATED_AT_MS] or 0, read_at_ms=r[s.COL_READ_AT_MS])


class CassandraInbox:
    def __init__(self, cql: driver.Statements, sealer: RowSealer) -> None:
        """On the store's statements and sealer (``CassandraStore.statements``, ``.sealer``)."""
        self._cql = cql
        self._sealer = sealer

    async def _message(self, r: dict[str, Any]) -> InboxMessage | None:
        """The message ``r`` holds, its sealed columns opened; None for a deleted marker or a
        partial row. Raises ``CipherError``."""
        if r.get(s.COL_DELETED_AT_MS) is not None or r.get("title") is None:
            return None
        opened = dict(r)
        for column in s.INBOX_SEALED_COLUMNS:
            opened[column] = await self._sealer.open_text(r.get(column), inbox_context(
                r[s.COL_CALLER], r[s.COL_RECIPIENT], r[s.COL_MESSAGE_ID], column))
        return _opened_message(opened)

    async def _row(self, caller: str, recipient: str, message_id: str) -> dict[str, Any] | None:
        rows = await self._cql.run("inbox_get", [caller, recipient, message_id])
        return rows[0] if rows else None

    async def put_inbox_message(self, m: InboxMessage, ttl_s: int) -> InboxMessage | None:
        def sealed(column: str, value: str | None) -> str | None:
            return self._sealer.seal_text(value, inbox_context(
                m.caller, m.recipient, m.message_id, column))

        rows = await self._cql.run("inbox_put", [
            m.caller, m.recipient, m.message_id, m.trigger_id, m.occurrence_id,
            sealed("title", m.title), sealed("body", m.body), sealed("data", m.data_json),
            m.created_at_ms, ttl_s])
        row = rows[0] if rows else {}
        if row.get(s.LWT_APPLIED):
            return m
        # Not applied: the row holds the first store's cells (the LWT answers with them).
        return await self._message(row)

    async def get_inbox_message(self, caller: str, recipient: str,
                                message_id: str) -> InboxMessage | None:
        row = await self._row(caller, recipient, message_id)
        return None if row is None else await self._message(row)

    async def list_inbox(self, caller: str, recipient: str, *, before: str | None,
                         limit: int, unread_only: bool) -> InboxPage:
        # One more than asked tells whether a next page exists; read rows are skipped here
        # (a filter on a nullable column is not a CQL query), a bounded number per call.
        found: list[InboxMessage] = []
        cursor = before or _ABOVE_ALL
        for _ in range(_LIST_MAX_READS):
            rows = await self._cql.run("inbox_before", [caller, recipient, cursor, _READ_ROWS])
            for r in rows:
                cursor = r[s.COL_MESSAGE_ID]
                if unread_only and r.get(s.COL_READ_AT_MS) is not None:
                    continue  # filtered out before its sealed texts are opened
                m = await self._message(r)
                if m is not None:
                    found.append(m)
                    if len(found) > limit:
                        return InboxPage(found[:limit], found[limit - 1].message_id)
            if len(rows) < _READ_ROWS:
                return InboxPage(found, None)
        return InboxPage(found, cursor)  # the read budget is spent: go on from here

    async def inbox_after(self, caller: str, recipient: str, after: str,
                          limit: int) -> list[InboxMessage]:
        rows = await self._cql.run("inbox_after", [caller, recipient, after, limit])
        found = [await self._message(r) for r in rows]
        return [m for m in found if m is not None]

    async def mark_inbox_read(self, caller: str, recipient: str, message_id: str,
                              read_at_ms: int) -> InboxMessage | None:
        row = await self._row(caller, recipient, message_id)
        m = None if row is None else await self._message(row)
        if row is None or m is None or m.read_at_ms is not None:
            return m
        await self._cql.run("inbox_read", [row[s.COL_TTL] or 0, read_at_ms, caller, recipient,
                                           message_id])
        # Applied or not (a concurrent first read won), the stored time is the answer.
        return await self.get_inbox_message(caller, recipient, message_id)

    async def delete_inbox_message(self, caller: str, recipient: str, message_id: str,
                                   now_ms: int) -> None:
        row = await self._row(caller, recipient, message_id)
        if row is None or row.get(s.COL_DELETED_AT_MS) is not None:
            return  # unknown (a marker would outlive nothing) or deleted already
        await self._cql.run("inbox_delete", [row[s.COL_TTL] or 0, now_ms, caller, recipient,
                                             message_id])
