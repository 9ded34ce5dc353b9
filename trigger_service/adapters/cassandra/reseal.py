"""The trigger rows' part of ``Resealer`` (``python -m reconciler --reencrypt``), a part of
``CassandraStore`` on its statements and sealer: every row of ``triggers_by_second`` is read,
a page at a time to the last page, and each sealed column (``schema.SEALED_COLUMNS``) that
``RowSealer.stale`` finds is sealed again under the current key.

Each rewrite is an LWT on the value read (``IF payload = <read>``): a concurrent edit, or a
finished trigger's terminal rewrite, changes the value first and the rewrite does nothing
(that writer sealed it under its own key). The rewrite keeps the cell's TTL, so a finished
row still expires whole. Rows of releases before ``triggers_by_second`` (in ``triggers``)
are left as they are: they read the same either way and end with their triggers.
"""

from __future__ import annotations

from typing import Any

import structlog

from trigger_service.adapters import schema as s
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.sealing import RowSealer, column_context
from trigger_service.core.errors import CipherError
from trigger_service.core.ports.crypto import ResealReport

log = structlog.get_logger(__name__)

_KEY = (s.COL_HOME_SECOND, s.COL_ROW_SHARD, s.COL_HOME_AT_MS, s.COL_TRIGGER_ID)


def _ttl_alias(column: str) -> str:
    return f"ttl_{column}"


def reseal_queries(keyspace: str) -> dict[str, str]:
    """name → CQL text of the pass."""
    rows = f"{keyspace}.{s.TABLE_BY_SECOND}"
    ttls = ", ".join(f"TTL({c}) AS {_ttl_alias(c)}" for c in s.SEALED_COLUMNS)
    where = " AND ".join(f"{c} = ?" for c in _KEY)
    return {
        # The whole table, paged (the driver's fetch size): a pass reads every row once.
        "reseal_scan": f"SELECT {', '.join(_KEY)}, {', '.join(s.SEALED_COLUMNS)}, {ttls} "
        f"FROM {rows}",
    } | {f"reseal_{c}": f"UPDATE {rows} USING TTL ? SET {c} = ? WHERE {where} IF {c} = ?"
         for c in s.SEALED_COLUMNS}


class CassandraReseal:
    def __init__(self, cql: driver.Statements, sealer: RowSealer) -> None:
        """On the store's statements and sealer (``CassandraStore.statements``, ``.sealer``)."""
        self._cql = cql
        self._sealer = sealer

    async def reseal_triggers(self) -> ResealReport:
        report = ResealReport()
        async for page in self._cql.pages("reseal_scan", []):
            for row in page:
                report = _add(report, await self._reseal_row(row))
        return report

    async def _reseal_row(self, row: dict[str, Any]) -> ResealReport:
        """The row's stale columns sealed again, one LWT each (scanned counts the row)."""
        resealed = failed = raced = 0
        tid = row[s.COL_TRIGGER_ID]
        for column in s.SEALED_COLUMNS:
            value = row.get(column)
            if not isinstance(value, str) or not self._sealer.stale(value):
                continue
            context = column_context(tid, column)
            try:
                plain = await self._sealer.cipher.open(value, context)
            except CipherError as e:
                log.error("reseal_trigger_unreadable", trigger_id=tid, column=column,
                          error=str(e))
                failed += 1
                continue
            done = await self._cql.run(f"reseal_{column}", [
                row.get(_ttl_alias(column)) or 0, self._sealer.cipher.seal(plain, context),
                *(row[c] for c in _KEY), value])
            if done and done[0].get(s.LWT_APPLIED):
                resealed += 1
            else:
                raced += 1
        return ResealReport(1, resealed, failed, raced)


def _add(a: ResealReport, b: ResealReport) -> ResealReport:
    return ResealReport(a.scanned + b.scanned, a.resealed + b.resealed, a.failed + b.failed,
                        a.raced + b.raced)
