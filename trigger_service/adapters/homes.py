"""One row per keyed trigger id, whatever the interleaving, with no Paxos round on the
common path. Both stores compose it over their primitives (``core.ports.homes.KeyedRows``).

A row's home is the fire time it is created with, and the requests of one Idempotency-Key can
compute different fire times (a ``delaySeconds`` retry arrives later; Redis, which orders a
key's requests, can lose its entries or be down; a write that timed out can land later).

Creation (``create``): the index entries go first, with (home, creation time) added to the
id's ``creations`` with its request hash (a set: no concurrent add is lost; a request's
repeats add the same one);
then the creations are read back. Of several creations whose adds were acknowledged, at
most one reads its own alone (of any two, the one that reads later sees the other's add),
and only that one writes its row without Paxos: the common path. One that reads others takes
the row it finds (a replay: an earlier request's, Redis having forgotten it), else the one
home they all wrote, else asks Paxos to elect one home (``KeyedRows.elect``; proposed: the
earliest, so a retry answers the first request's fire time) and writes its row there with
that home's fire time: every creation that lost the election writes the same row.

Reading (``live``, ``live_at``): a row is the id's only if it is at the elected home or, none
elected, at the only home written. A reader reads the row before the homes, so a home added
later belongs to a creation that will find this row and take it. A reader that finds
several homes and no election elects the row it found (before an election, only the one
creation that read its home alone writes a row). One that finds the elected home empty
while a row exists elsewhere (the elected creation stopped before writing; the lone
creation's row landed after the election's read) seals the elected home and elects the row.

So every reader (the API before a cancel, a pause, an edit; the dispatcher before a claim)
acts on the same row, and Paxos orders their transitions on it; a row that lost is dropped
by the first reader that meets it and is never claimed.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from trigger_service.core.errors import StoreError
from trigger_service.core.model import Trigger
from trigger_service.core.ports.homes import KeyedRows, Pointer, creation_of
from trigger_service.core.ports.values import KeyedCreation

# Rounds a reader goes through while creations change the homes under it (each round is a
# change it saw: one or two in the rarest race).
_ROUNDS = 4


class Homes:
    def __init__(self, rows: KeyedRows) -> None:
        self._rows = rows

    async def create(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        """Create a keyed trigger (``TriggerCatalog.create_keyed``): the one row of its id
        afterwards, and whether this call wrote it. Safe to repeat after a timeout. Raises
        ``StoreError``."""
        t = trigger.with_home()
        assert t.home_at_ms is not None
        await self._rows.write_creation_index(t, index_ttl_s)
        p = await self._rows.pointer(t.trigger_id)
        if p is None or p.shard is None:
            raise StoreError(f"trigger {t.trigger_id} vanished during its creation")
        if p.legacy is not None:
            return KeyedCreation(p.legacy, created=False)
        mine = creation_of(t)
        home = p.live_home
        if home is None and p.creations <= {mine}:
            await self._rows.write_row(t)  # alone: the common path
            return KeyedCreation(t, created=True)
        if home is None:
            # Other requests of the key (now, or earlier ones Redis forgot): a row one of
            # them wrote is the trigger; none, the one home they all wrote, or the earliest.
            found = await self._homes_with_rows(t.trigger_id, p.shard, p.homes)
            home = (next(iter(p.homes)) if len(p.homes) == 1 else await self._rows.elect(
                t.trigger_id, found[0] if found else min(p.homes), replacing=None))
        there = await self._rows.row_at(t.trigger_id, home, t.shard)
        if there is not None:
            # Another request's row, or this request's own from an earlier attempt.
            ours = (there.created_at_ms, there.request_hash) == (t.created_at_ms,
                                                                 t.request_hash)
            return KeyedCreation(there, created=ours)
        if home != t.home_at_ms:
            # Elected and not written yet (its creation is on its way, or stopped): the same
            # row, with that home's fire time. Its index entries too: its creation may have
            # stopped before all of its unlogged batch landed.
            t = replace(t, fire_at_ms=home, home_at_ms=home, registered_fire_at_ms=home)
            await self._rows.write_creation_index(t, index_ttl_s)
        await self._rows.write_row(t)
        return KeyedCreation(t, created=True)

    async def live(self, trigger_id: str, p: Pointer | None) -> Trigger | None:
        """The id's one row (``TriggerStates.get``), ``p`` its pointer as just read (None:
        no trigger has the id). Raises ``StoreError``."""
        for _ in range(_ROUNDS):
            if p is None or p.legacy is not None:
                return p.legacy if p is not None else None
            home, shard = p.sole_home(), p.shard
            if shard is None or (home is None and not p.homes):
                return None
            if home is None:  # several homes, none elected
                found = await self._homes_with_rows(trigger_id, shard, p.homes)
                if not found:
                    return None
                p = replace(p, live_home=await self._rows.elect(trigger_id, found[0],
                                                                replacing=None))
                continue
            row = await self._rows.row_at(trigger_id, home, shard)
            if not p.homes:
                return row  # an unkeyed trigger, or one of an earlier release: one home
            if p.live_home is not None:
                if row is not None:
                    return row
                repaired = await self._repair(trigger_id, p)
                if repaired is None:
                    return None
                p = repaired
                continue
            if row is None:
                return None
            # The only home written: confirm no creation added one before the row was read.
            again = await self._rows.pointer(trigger_id)
            if again is not None and again.homes == p.homes and again.live_home is None:
                return row
            p = again
        raise StoreError(f"trigger {trigger_id}: its homes kept changing while read")

    async def live_at(self, row: Trigger) -> Trigger | None:
        """``row`` (read at its home: ``TriggerStates.get_at``) if it is its id's one row,
        else None (and a row that lost an election is dropped). Raises ``StoreError``."""
        if row.idem_key is None or row.home_at_ms is None:
            return row  # one request wrote it: its own attempts write one home
        home, shard = row.home_at_ms, row.shard
        p = await self._rows.pointer(row.trigger_id)
        if p is None:
            return row  # the pointer expired first (they finish with one TTL)
        if not p.homes:
            # An earlier release's keyed row, or one whose pointer an earlier release wrote.
            return row if p.legacy is None and p.home_at_ms == home else None
        for _ in range(_ROUNDS):
            if p.live_home is None:
                if home not in p.homes:
                    return None
                if p.homes == {home}:
                    return row
                # Several homes, none elected: this row is the lone creation's.
                p = replace(p, live_home=await self._rows.elect(
                    row.trigger_id, home, replacing=None))
                continue
            if p.live_home == home:
                return row
            if await self._rows.row_at(row.trigger_id, p.live_home, shard) is not None:
                with contextlib.suppress(StoreError):  # the next reader drops it, if not
                    await self._rows.drop_row(row.trigger_id, home, shard)
                return None
            repaired = await self._repair(row.trigger_id, p)
            if repaired is None:
                return None
            p = repaired
        raise StoreError(f"trigger {row.trigger_id}: its homes kept changing while read")

    async def _repair(self, trigger_id: str, p: Pointer) -> Pointer | None:
        """The elected home has no row: seal it and elect a row that exists elsewhere; the
        pointer as it then is (read again by the caller), None if no row exists at all (the
        elected creation is on its way: nothing was answered for the id yet)."""
        assert p.live_home is not None and p.shard is not None
        found = await self._homes_with_rows(trigger_id, p.shard, p.homes - {p.live_home})
        if not found:
            return None
        if not await self._rows.seal(trigger_id, p.live_home, p.shard):
            return p  # it was written meanwhile: read it
        return replace(p, live_home=await self._rows.elect(trigger_id, found[0],
                                                           replacing=p.live_home))

    async def _homes_with_rows(self, trigger_id: str, shard: int, homes: frozenset[int]
                               ) -> list[int]:
        """Those of ``homes`` where a row is, earliest first."""
        order = sorted(homes)
        rows = await asyncio.gather(*(self._rows.row_at(trigger_id, h, shard) for h in order))
        return [h for h, r in zip(order, rows, strict=True) if r is not None]
