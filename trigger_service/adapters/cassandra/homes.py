"""``KeyedRows`` on Cassandra: the pointer row in ``triggers`` (with ``creations`` and
``live_home``), the rows in ``triggers_by_second``; ``adapters.homes`` builds one row per
keyed trigger id on them. Held by ``.triggers`` (``CassandraTriggers``), which owns
the index writes and the row writes.

Pointer reads asked for in the same turn of the event loop go as one ``IN`` request
(``core.coalescing``): every keyed registration and every delivery reads its id's pointer,
and a batch create or a received herd asks for hundreds at once, where a request each costs
both the driver and Cassandra more than the read itself. A lone read waits for nothing but
the end of the turn; each reader gets the row ``get`` would have read (the same consistency:
an ``IN`` read reads each partition at the session's level), or the request's error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.rows import Run, TriggerRows, row_key
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.statements import trigger_from_row
from trigger_service.core.coalescing import TurnCoalescer
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Trigger
from trigger_service.core.ports.homes import Pointer

# The store's creation writes: index entries (with the pointer and the creation added to
# the id's creations) and the row, both timestamped by the creation.
WriteIndex = Callable[[Trigger, int], Awaitable[None]]
WriteRow = Callable[[Trigger], Awaitable[None]]
Row = dict[str, Any]
# Pointers per IN request at most: one coordinator answers them quickly.
POINTERS_PER_READ = 100


async def pointer_from_row(trigger_id: str, row: dict[str, Any] | None,
                           sealer: RowSealer) -> Pointer | None:
    """The ``triggers`` row as a ``Pointer`` (a ``get`` or ``get_in`` row; None: none)."""
    if row is None:
        return None
    legacy = None
    if row[schema.COL_STATUS] is not None:  # an earlier release's whole row
        legacy = trigger_from_row(trigger_id, await sealer.open_row(trigger_id, row))
    creations = frozenset((int(h), int(c), str(r))
                          for h, c, r in row[schema.COL_CREATIONS] or ())
    return Pointer(row[schema.COL_HOME_AT_MS], row[schema.COL_SHARD], creations,
                   row[schema.COL_LIVE_HOME], legacy)


async def pointer_rows(run: Run, ids: Sequence[str]) -> dict[str, Row]:
    """id → its ``triggers`` row, for those of ``ids`` (at most ``POINTERS_PER_READ``
    distinct) that have one: one ``get_in`` request."""
    return {row[schema.COL_TRIGGER_ID]: row
            for row in await run("get_in", [list(dict.fromkeys(ids))])}


def settled_home(row: dict[str, Any]) -> int | None:
    """Where a ``get_in`` row says the trigger's row is, without reading rows: the elected
    home, else the pointer's (a listing's read; ``get_at`` checks before any delivery)."""
    live: int | None = row[schema.COL_LIVE_HOME]
    return live if live is not None else row[schema.COL_HOME_AT_MS]


class CassandraKeyedRows:
    def __init__(self, run: Run, rows: TriggerRows, sealer: RowSealer,
                 write_index: WriteIndex, write_row: WriteRow) -> None:
        self._run = run
        self._rows = rows
        self._sealer = sealer
        self._write_index = write_index
        self._write_row = write_row
        self._pointers: TurnCoalescer[str, Row | None] = TurnCoalescer(
            self._read_pointers, POINTERS_PER_READ)

    async def write_creation_index(self, t: Trigger, index_ttl_s: int) -> None:
        await self._write_index(t, index_ttl_s)

    async def pointer(self, trigger_id: str) -> Pointer | None:
        row = await self._pointers.run(trigger_id)
        return await pointer_from_row(trigger_id, row, self._sealer)

    async def _read_pointers(self, ids: list[str]) -> list[Row | None]:
        """The ``triggers`` rows of ``ids`` (None: none), in order: one request."""
        if len(ids) == 1:
            rows = await self._run("get", ids)
            return [rows[0] if rows else None]
        found = await pointer_rows(self._run, ids)
        return [found.get(i) for i in ids]

    async def row_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        return await self._rows.get(trigger_id, home_at_ms, shard)

    async def write_row(self, t: Trigger) -> None:
        await self._write_row(t)

    async def elect(self, trigger_id: str, home_at_ms: int, *, replacing: int | None) -> int:
        if replacing is None:
            rows = await self._run("home_elect", [home_at_ms, trigger_id])
        else:
            rows = await self._run("home_reelect", [home_at_ms, trigger_id, replacing])
        if rows and rows[0].get(schema.LWT_APPLIED):
            return home_at_ms
        live = rows[0].get(schema.COL_LIVE_HOME) if rows else None
        if live is None:  # not applied, and nothing elected: the pointer expired meanwhile
            raise StoreError(f"trigger {trigger_id}: its pointer went during an election")
        return int(live)

    async def seal(self, trigger_id: str, home_at_ms: int, shard: int) -> bool:
        rows = await self._run("row_seal", row_key(trigger_id, shard, home_at_ms))
        return bool(rows and rows[0].get(schema.LWT_APPLIED))

    async def drop_row(self, trigger_id: str, home_at_ms: int, shard: int) -> None:
        await self._run("row_drop", row_key(trigger_id, shard, home_at_ms))
