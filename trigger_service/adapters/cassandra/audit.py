"""``AuditLog`` on Cassandra (``audit_log``, ``audit_hours``, infra/cql/031): a part of
``CassandraStore``, on its statements.

An entry is written under its caller's scope (when a caller acted) and under the operators'
``SCOPE_ALL`` (``*``), each in the part its id hashes to, with the (scope, hour) mark the
listing starts from; the writes of concurrent requests share unlogged batches
(``coalescing.write_batcher``, patient: nobody's answer waits on them). A process writes a
(scope, hour) mark once (it remembers the marks of the current and the previous hour).

A listing reads the scope's marked hours newest first (``_HOURS_PER_CALL`` a call at most),
and in each the scope's parts from the cursor, merged newest first as the dead-letter
listing merges its buckets (``dead_letter_listing.merge``). The cursor is the last entry
looked at (exclusive), so pages neither repeat nor skip an entry; at most
``_MAX_ROUNDS`` reads of an hour's parts per call: a page may be short with a cursor."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from typing import Any

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.coalescing import Writes, write_batcher
from trigger_service.adapters.cassandra.dead_letter_listing import MAX_ID, merge, rows_per_read
from trigger_service.core.audit import (
    HOUR_MS,
    AuditAction,
    AuditCursor,
    AuditEntry,
    AuditPage,
    AuditQuery,
    hour_of,
)
from trigger_service.core.ports import Clock

TABLE, HOURS_TABLE = s.AUDIT_TABLES
SCOPE, HOUR, PART = _KEY = s.AUDIT_COLUMNS[:3]
_COLUMNS = s.AUDIT_COLUMNS[3:]
AT_MS, ID, ACTOR, ACTION, TARGET, REQUEST_ID, OUTCOME, CALLER = _COLUMNS
PARTS_ALL, PARTS_CALLER = s.AUDIT_PARTS
_MAX_ROUNDS = 20  # reads of one scope's parts per call (a rare filter cannot scan on)
_HOURS_PER_CALL = 48  # marked hours looked at per call
Row = dict[str, Any]


def audit_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text for the tables of this module."""
    log, hours = f"{keyspace}.{TABLE}", f"{keyspace}.{HOURS_TABLE}"
    key = _KEY
    return {
        "audit_put": f"INSERT INTO {log} ({', '.join((*key, *_COLUMNS))}) "
        f"VALUES ({', '.join('?' * (len(key) + len(_COLUMNS)))}) USING TTL ?",
        "audit_hour_put": f"INSERT INTO {hours} ({SCOPE}, {HOUR}) VALUES (?, ?) USING TTL ?",
        "audit_hours": f"SELECT {HOUR} FROM {hours} WHERE {SCOPE} = ? AND {HOUR} <= ? "
        f"AND {HOUR} >= ? LIMIT ?",
        "audit_list": f"SELECT {', '.join(_COLUMNS)} FROM {log} WHERE {SCOPE} = ? "
        f"AND {HOUR} = ? AND {PART} = ? AND ({AT_MS}, {ID}) < (?, ?) LIMIT ?",
    }


class CassandraAuditLog:
    def __init__(self, cql: driver.Statements, clock: Clock) -> None:
        """On the store's statements (``CassandraStore.statements``); ``clock`` times the
        write coalescing's linger."""
        self._cql = cql
        self._writes = write_batcher(cql, clock, patient=True)
        self._marked: set[tuple[str, int]] = set()

    async def append_audit(self, entries: Sequence[AuditEntry], ttl_s: int) -> None:
        writes: list[tuple[str, Sequence[Any]]] = []
        marks: list[tuple[str, int]] = []
        for e in entries:
            hour = hour_of(e.at_ms)
            values = (e.at_ms, e.entry_id, e.actor, e.action.value, e.target, e.request_id,
                      e.outcome, e.caller)
            for scope in (e.caller, s.SCOPE_ALL):
                if scope is None:
                    continue
                writes.append(("audit_put", (scope, hour, _part(scope, e.entry_id),
                                             *values, ttl_s)))
                if (scope, hour) not in self._marked and (scope, hour) not in marks:
                    marks.append((scope, hour))
                    # An hour longer than its entries: the hour's last entry outlives its
                    # first by up to an hour, and must not lose the mark that finds it.
                    writes.append(("audit_hour_put", (scope, hour, ttl_s + HOUR_MS // 1000)))
        batch: Writes = writes
        await self._writes.submit(batch)
        if marks:
            newest = max(h for _, h in marks)
            # Only this hour's and the last one's are still written: older marks go.
            self._marked = {m for m in self._marked if m[1] >= newest - 1}
            self._marked.update(marks)

    async def list_audit(self, query: AuditQuery, cursor: AuditCursor | None,
                         limit: int) -> AuditPage:
        scope = query.caller or s.SCOPE_ALL
        parts = range(_parts(scope))
        before_ms, before_id = cursor or (query.until_ms, MAX_ID)
        if before_ms < query.since_ms:
            return AuditPage([], None)
        hours = [int(r[HOUR]) for r in await self._cql.run("audit_hours", [
            scope, hour_of(before_ms), hour_of(query.since_ms), _HOURS_PER_CALL])]
        found: list[AuditEntry] = []
        rounds = 0
        for hour in hours:
            if hour < hour_of(before_ms):  # the cursor's hour is done: this one from its end
                before_ms, before_id = (hour + 1) * HOUR_MS - 1, MAX_ID
            hour_done = False
            while not hour_done and len(found) < limit and rounds < _MAX_ROUNDS:
                rounds += 1
                asked = rows_per_read(limit - len(found), len(parts))
                batches = await asyncio.gather(*(self._cql.run("audit_list", [
                    scope, hour, part, before_ms, before_id, asked]) for part in parts))
                rows, hour_done = merge(batches, asked, _key)
                for r in rows:
                    before_ms, before_id = _key(r)
                    if before_ms < query.since_ms:
                        return AuditPage(found, None)
                    entry = _entry(r)
                    if query.matches(entry):
                        found.append(entry)
                        if len(found) == limit:
                            hour_done = False
                            break
            if not hour_done:  # the page is full or the rounds are spent: go on from here
                return AuditPage(found, (before_ms, before_id))
            before_ms, before_id = hour * HOUR_MS - 1, MAX_ID
        if len(hours) < _HOURS_PER_CALL or before_ms < query.since_ms:
            return AuditPage(found, None)
        return AuditPage(found, (before_ms, before_id))


def _parts(scope: str) -> int:
    """How many partitions an hour of ``scope`` is spread over (``schema.AUDIT_PARTS``)."""
    return PARTS_ALL if scope == s.SCOPE_ALL else PARTS_CALLER


def _part(scope: str, entry_id: str) -> int:
    """The part of an entry's row (crc32: the same in every process)."""
    return zlib.crc32(entry_id.encode()) % _parts(scope)


def _key(r: Row) -> tuple[int, str]:
    return int(r[AT_MS]), str(r[ID])


def _entry(r: Row) -> AuditEntry:
    return AuditEntry(int(r[AT_MS]), r[ID], r[ACTOR], AuditAction(r[ACTION]), r[TARGET] or "",
                      r[REQUEST_ID] or "", r[OUTCOME] or "", r[CALLER])
