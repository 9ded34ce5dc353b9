"""``RecipientStore`` on Cassandra (tables in ``infra/cql/016_recipients.cql``), on the
statements and sealer of ``CassandraStore`` (its statements are prepared on the store's session).

A profile is one row, its JSON sealed (context: table, caller, id) when payloads are sealed
(``TRIGGER_ENCRYPTION_PAYLOADS``: the profile holds the same kind of data as a plan, the
addresses); a read opens whatever is sealed, whatever the setting.
"""

from __future__ import annotations

import asyncio
import heapq
import zlib
from collections.abc import AsyncIterator

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.core.ports.recipient import LinkedTrigger, ZoneChange
from trigger_service.core.recipient_profiles import (
    RecipientProfile,
    profile_from_json,
    profile_to_json,
)


def recipient_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    r = f"{keyspace}.{s.TABLE_RECIPIENTS}"
    idx = f"{keyspace}.{s.TABLE_RECIPIENT_TRIGGERS}"
    zc = f"{keyspace}.{s.TABLE_RECIPIENT_ZONE_CHANGES}"
    part = f"{s.COL_CALLER} = ? AND {s.COL_PART} = ?"
    key = f"{part} AND {s.COL_RECIPIENT_ID} = ?"
    person = f"{s.COL_CALLER} = ? AND {s.COL_RECIPIENT_ID} = ?"
    zkey = f"{s.COL_K} = ? AND {person}"
    return {
        "recipient_get": f"SELECT {s.COL_PROFILE} FROM {r} WHERE {key}",
        "recipient_put": f"UPDATE {r} SET {s.COL_PROFILE} = ? WHERE {key}",
        "recipient_delete": f"DELETE FROM {r} WHERE {key}",
        "recipient_list": f"SELECT {s.COL_RECIPIENT_ID}, {s.COL_PROFILE} FROM {r} "
        f"WHERE {part} AND {s.COL_RECIPIENT_ID} > ? LIMIT ?",
        "recipient_count": f"SELECT COUNT(*) AS n FROM {r} WHERE {part}",
        "recipient_link": f"INSERT INTO {idx} ({s.COL_CALLER}, {s.COL_RECIPIENT_ID}, "
        f"{s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {s.COL_SHARD}) VALUES (?, ?, ?, ?, ?) "
        "USING TTL ?",
        "recipient_linked": f"SELECT {s.COL_TRIGGER_ID}, {s.COL_HOME_AT_MS}, {s.COL_SHARD} "
        f"FROM {idx} WHERE {person}",
        "zone_change_put": f"UPDATE {zc} SET {s.COL_CHANGED_AT_MS} = ? WHERE {zkey}",
        "zone_change_list": f"SELECT {s.COL_CALLER}, {s.COL_RECIPIENT_ID}, "
        f"{s.COL_CHANGED_AT_MS} FROM {zc} WHERE {s.COL_K} = ? LIMIT ?",
        "zone_change_done": f"DELETE FROM {zc} WHERE {zkey} IF {s.COL_CHANGED_AT_MS} = ?",
    }


def _part(recipient_id: str) -> int:
    return zlib.crc32(recipient_id.encode()) % s.RECIPIENT_PARTS


def _zone_part(caller: str, recipient_id: str) -> int:
    return zlib.crc32(f"{caller}/{recipient_id}".encode()) % s.ZONE_CHANGE_PARTS


def _context(caller: str, recipient_id: str) -> str:
    return f"{s.TABLE_RECIPIENTS}/{caller}/{recipient_id}/{s.COL_PROFILE}"


class CassandraRecipients:
    def __init__(self, cql: driver.Statements, sealer: RowSealer) -> None:
        """On the store's statements and sealer (``CassandraStore.statements``, ``.sealer``):
        one session, one sealer."""
        self._cql = cql
        self._sealer = sealer

    async def _open(self, caller: str, recipient_id: str, text: str) -> RecipientProfile:
        text = await self._sealer.open_text(text, _context(caller, recipient_id))
        return profile_from_json(recipient_id, text)

    async def get_profile(self, caller: str, recipient_id: str) -> RecipientProfile | None:
        rows = await self._cql.run("recipient_get", [caller, _part(recipient_id), recipient_id])
        if not rows or rows[0][s.COL_PROFILE] is None:
            return None
        return await self._open(caller, recipient_id, rows[0][s.COL_PROFILE])

    async def put_profile(self, caller: str, profile: RecipientProfile) -> None:
        # JSON never reads as sealed: sealed exactly when payloads are.
        text = self._sealer.seal_text(profile_to_json(profile),
                                      _context(caller, profile.recipient_id))
        await self._cql.run("recipient_put", [text, caller, _part(profile.recipient_id),
                                              profile.recipient_id])

    async def delete_profile(self, caller: str, recipient_id: str) -> None:
        await self._cql.run("recipient_delete", [caller, _part(recipient_id), recipient_id])

    async def list_profiles(self, caller: str, after: str, limit: int
                            ) -> list[RecipientProfile]:
        # Each partition's first ``limit`` after the cursor, merged: the first ``limit`` of
        # all (bounded: RECIPIENT_PARTS reads of at most ``limit`` rows).
        pages = await asyncio.gather(*(self._cql.run("recipient_list", [caller, p, after, limit])
                                       for p in range(s.RECIPIENT_PARTS)))
        rows = heapq.merge(*pages, key=lambda r: str(r[s.COL_RECIPIENT_ID]))
        out: list[RecipientProfile] = []
        for row in rows:
            if len(out) == limit:
                break
            if row[s.COL_PROFILE] is not None:
                out.append(await self._open(caller, row[s.COL_RECIPIENT_ID],
                                            row[s.COL_PROFILE]))
        return out

    async def count_profiles(self, caller: str) -> int:
        counts = await asyncio.gather(*(self._cql.run("recipient_count", [caller, p])
                                        for p in range(s.RECIPIENT_PARTS)))
        return sum(int(rows[0]["n"]) for rows in counts if rows)

    async def link(self, caller: str, recipient_id: str, entry: LinkedTrigger,
                   ttl_s: int) -> None:
        await self._cql.run("recipient_link", [caller, recipient_id, entry.trigger_id,
                                               entry.home_at_ms, entry.shard, ttl_s])

    async def linked(self, caller: str, recipient_id: str
                     ) -> AsyncIterator[list[LinkedTrigger]]:
        async for rows in self._cql.pages("recipient_linked", [caller, recipient_id]):
            yield [LinkedTrigger(r[s.COL_TRIGGER_ID], r[s.COL_HOME_AT_MS], r[s.COL_SHARD])
                   for r in rows]

    async def record_zone_change(self, change: ZoneChange) -> None:
        await self._cql.run("zone_change_put", [
            change.changed_at_ms, _zone_part(change.caller, change.recipient_id),
            change.caller, change.recipient_id])

    async def zone_changes(self, limit: int) -> list[ZoneChange]:
        pages = await asyncio.gather(*(self._cql.run("zone_change_list", [k, limit])
                                       for k in range(s.ZONE_CHANGE_PARTS)))
        return [ZoneChange(r[s.COL_CALLER], r[s.COL_RECIPIENT_ID], r[s.COL_CHANGED_AT_MS])
                for rows in pages for r in rows][:limit]

    async def complete_zone_change(self, change: ZoneChange) -> None:
        await self._cql.run("zone_change_done", [
            _zone_part(change.caller, change.recipient_id), change.caller,
            change.recipient_id, change.changed_at_ms])
