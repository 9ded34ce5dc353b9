"""What earlier releases stored: a trigger whose whole row is still in ``triggers`` (written
before rows moved to ``triggers_by_second``), and the key records of the ``idempotency``
table (written before keyed rows: ``LegacyKeys``).

Such a row is read, listed and moved through the state machine where it is (one LWT per
transition, as before) until it ends and expires. A one-shot trigger therefore never moves;
a series, which may never end, moves at its next step (``move_at_step``): its next
occurrence's row is created in ``triggers_by_second`` (by Paxos, so that only its creator
can ever point at it) and the old row becomes a pointer to it, by an LWT on the state that
was read. Whichever of that LWT and any other transition of the old row Paxos orders first
wins; the loser's row is dropped again. So every series of an earlier release is in
``triggers_by_second`` after its next occurrence, and its later steps share Paxos rounds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra.rows import Run, TriggerRows, row_key
from trigger_service.adapters.cassandra.statements import (
    cas_condition,
    decode_request,
    encode_request,
)
from trigger_service.core.model import Trigger
from trigger_service.core.ports.idempotency import IdempotencyRecord


class LegacyRows:
    def __init__(self, run: Run, rows: TriggerRows) -> None:
        self._run = run
        self._rows = rows

    async def compare_and_set(self, old: Trigger, new: Trigger, values: list[Any],
                              ttl_s: int | None) -> bool | Trigger:
        """``compare_and_set`` of a copy that does not say where its row is: an earlier
        release's row in ``triggers`` (whether it applied), else ``old`` with the home its
        pointer names (False if it has none)."""
        cond = cas_condition(old)
        if ttl_s is None:
            rows = await self._run("cas", [*values, new.trigger_id, *cond])
        else:
            rows = await self._run("cas_ttl", [ttl_s, *values, new.trigger_id, *cond])
        if not rows or rows[0].get(schema.LWT_APPLIED):
            return bool(rows)
        if rows[0].get(schema.COL_STATUS) is not None:
            return False
        pointer = await self._run("get", [old.trigger_id])
        home = pointer[0][schema.COL_HOME_AT_MS] if pointer else None
        return False if home is None else replace(old, home_at_ms=home)

    async def move_at_step(self, old: Trigger, new: Trigger) -> bool | None:
        """Step a series whose copy ``old`` does not say where its row is to ``new`` by
        moving it into ``triggers_by_second`` (home: ``new``'s fire time): True if the step
        applied (it moved), False if the whole row's state was no longer ``old``'s, None if
        it did not move (the id's row is a pointer, or the new row existed already): the
        caller then steps it where it is. Raises ``StoreError`` (the outcome is then unknown,
        as for any LWT)."""
        moved = replace(new, home_at_ms=new.fire_at_ms)
        if not await self._rows.create_by_paxos(moved):
            return None
        assert moved.home_at_ms is not None
        rows = await self._run("legacy_move", [
            moved.home_at_ms, old.trigger_id, *cas_condition(old)])
        if rows and rows[0].get(schema.LWT_APPLIED):
            return True
        if rows:
            # Lost: nobody points at the row just made (only its creator may), so it goes
            # again. Not after a timeout: the move may have applied.
            await self._run("row_drop_lwt", row_key(moved.trigger_id, moved.shard,
                                                    moved.home_at_ms))
        # A whole row whose state moved on lost; a pointer (this release's trigger, or one
        # moved already) is for the caller to step where it points.
        return False if rows and rows[0].get(schema.COL_STATUS) is not None else None


class LegacyKeys:
    """``LegacyIdempotency`` on the ``idempotency`` table of earlier releases (read for the
    keys it holds; its LWT writer kept for the tests that record a key as they did)."""

    def __init__(self, run: Run) -> None:
        self._run = run

    async def record(self, caller: str, idem_key: str) -> IdempotencyRecord | None:
        rows = await self._run("idem_get", [caller, idem_key])
        if not rows:
            return None
        row = rows[0]
        trigger = decode_request(row[schema.COL_TRIGGER_ID], caller, idem_key,
                                 row[schema.COL_REQUEST])
        return IdempotencyRecord(caller, idem_key, row[schema.COL_REQUEST_HASH], trigger)

    async def exist(self) -> bool:
        return bool(await self._run("idem_any", []))

    async def put_if_absent(self, record: IdempotencyRecord, ttl_s: int
                            ) -> IdempotencyRecord | None:
        t = record.trigger
        rows = await self._run("idem_put", [
            record.caller, record.idem_key, record.request_hash, t.trigger_id,
            encode_request(t), t.created_at_ms, ttl_s,
        ])
        row = rows[0] if rows else {}
        if row.get(schema.LWT_APPLIED):
            return None
        existing = decode_request(row[schema.COL_TRIGGER_ID], record.caller, record.idem_key,
                                  row[schema.COL_REQUEST])
        return IdempotencyRecord(record.caller, record.idem_key, row[schema.COL_REQUEST_HASH],
                                 existing)
