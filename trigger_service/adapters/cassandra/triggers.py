"""The triggers on Cassandra: ``TriggerCatalog`` with ``TriggerStates`` and ``FilteredListing``
over the tables a trigger's writes keep together: the pointers in ``triggers``, the rows
(``.rows``; an earlier release's, ``.legacy``), the due buckets and the listing indexes
(``.indexes``, ``.open_index``, ``.created_index``, ``.term_index``), one row per keyed id
(``.homes``); stored values sealed and opened by ``.sealing``. A part of ``CassandraStore``,
on its statements.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema
from trigger_service.adapters.cassandra import driver
from trigger_service.adapters.cassandra.coalescing import (
    COALESCE_PAYLOAD_MAX_BYTES,
    write_batcher,
)
from trigger_service.adapters.cassandra.created_index import CreatedIndex
from trigger_service.adapters.cassandra.homes import (
    POINTERS_PER_READ,
    CassandraKeyedRows,
    pointer_from_row,
    pointer_rows,
    settled_home,
)
from trigger_service.adapters.cassandra.indexes import WrittenUntil, entry_writes, list_page
from trigger_service.adapters.cassandra.legacy import LegacyRows
from trigger_service.adapters.cassandra.open_index import OpenIndex
from trigger_service.adapters.cassandra.rows import TriggerRows
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.statements import changed_values, trigger_from_row
from trigger_service.adapters.cassandra.term_index import TermIndex, term_writes
from trigger_service.adapters.homes import Homes
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import Clock
from trigger_service.core.ports.homes import KeyedRows, creation_of
from trigger_service.core.ports.values import KeyedCreation, ListCursor, ListPage
from trigger_service.core.tags import TriggerFilter

# Index rows (each then a row read) per LIST page: a rare status filter stops after this many
# and answers a short page with a cursor, rather than reading a caller's whole history (or,
# for an open status, all of its open triggers).
LIST_MAX_ROWS = 2000


class CassandraTriggers:
    def __init__(self, cql: driver.Statements, sealer: RowSealer, clock: Clock) -> None:
        """On the store's statements (``cql``) and sealer; ``clock`` times the write
        coalescing's linger and is the ``now`` of the open index.

        Concurrent registrations share requests (``.coalescing``): their index entries go
        together in one unlogged batch, then their rows in another (each registration still
        writes its entries before its row)."""
        self._cql = cql
        self._sealer = sealer
        self._clock = clock
        self.list_max_rows = LIST_MAX_ROWS
        self._versions: WrittenUntil[str] = WrittenUntil()
        # A registration's answer waits on both (``coalescing.WAITED_SUBMISSIONS``).
        self._index_writes = write_batcher(cql, clock, waited=True)
        self._row_writes = write_batcher(cql, clock, waited=True)
        # The rows themselves, whose conditional writes share Paxos rounds per partition.
        self._rows = TriggerRows(cql.run, cql.run_conditional, clock, sealer)
        self._legacy = LegacyRows(cql.run, self._rows)
        # The listing indexes: open triggers by fire time (``now`` from the clock), all newest
        # first.
        self._open_index = OpenIndex(cql.run, cql.run_unlogged, self.get_many_at)
        self._created = CreatedIndex(cql.run, self.get_many_at)
        self._terms = TermIndex(cql.run, self.get_many_at)  # tags, labels, recipients
        # One row per keyed id (``adapters.homes``) over the pointers and rows (its
        # primitives public: the contract tests build interleavings from them).
        self.keyed_rows: KeyedRows = CassandraKeyedRows(cql.run, self._rows, sealer,
                                                        self._write_keyed_index,
                                                        self._write_keyed_row)
        self._homes = Homes(self.keyed_rows)

    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        # Index entries and the pointer first, the row last: a crash in between leaves
        # entries and a pointer to no row (read as no trigger), never a row that no index
        # can find. Cheaper than a logged batch (no batchlog round) with the same guarantee.
        # Every write carries a timestamp fixed by the trigger, so a repeat rewrites
        # identical cells; the row's is backdated below every LWT's (see
        # schema.CREATE_BACKDATE_MS).
        t = trigger.with_home()
        row_ts_us = (t.created_at_ms - schema.CREATE_BACKDATE_MS) * 1000
        await self._write_index(t, index_ttl_s, t.created_at_ms * 1000, home_ts_us=row_ts_us)
        await self._write_row(t, row_ts_us)

    async def _write_row(self, t: Trigger, ts_us: int) -> None:
        row = self._rows.create(t, ts_us)
        if len(t.payload_json) > COALESCE_PAYLOAD_MAX_BYTES:
            await self._cql.run(*row)  # alone: a batch of large rows would pass Cassandra's limits
        else:
            await self._row_writes.submit([row])

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        return await self._homes.create(trigger, index_ttl_s)

    async def _write_keyed_index(self, t: Trigger, index_ttl_s: int) -> None:
        """A keyed creation's index entries, with the pointer adding it to the id's
        creations (``adapters.homes``), timestamped as ``create``'s."""
        row_ts_us = (t.created_at_ms - schema.CREATE_BACKDATE_MS) * 1000
        await self._write_index(t, index_ttl_s, t.created_at_ms * 1000, home_ts_us=row_ts_us,
                                keyed=True)

    async def _write_keyed_row(self, t: Trigger) -> None:
        await self._write_row(t, (t.created_at_ms - schema.CREATE_BACKDATE_MS) * 1000)

    async def advance(self, old: Trigger, new: Trigger, index_ttl_s: int, now_ms: int, *,
                      patient: bool = False) -> bool:
        # The new fire time's index entries first (new keys: plain inserts), then the LWT.
        # If the LWT loses, the entries point at a row that is elsewhere: readers skip them.
        await self._write_index(new, index_ttl_s, now_ms * 1000)
        if old.home_at_ms is None:  # an earlier release's row (as read): it moves now
            moved = await self._legacy.move_at_step(old, new)
            if moved is not None:
                if moved and (gone := self._open_index.leave(old, new)):
                    with contextlib.suppress(StoreError):  # a backfilled entry, if any
                        await self._row_writes.submit(gone)
                return moved
        return await self.compare_and_set(old, new, patient=patient)

    async def _write_index(self, t: Trigger, index_ttl_s: int, ts_us: int, *,
                           home_ts_us: int | None = None, keyed: bool = False) -> None:
        """The index entries of ``t``'s fire time; with ``home_ts_us`` also the pointer to
        its row (a creation), written with that timestamp (``keyed``: adding the creation
        to the id's creations)."""
        writes, unwritten = entry_writes(t, index_ttl_s, ts_us, self._versions)
        writes += self._open_index.entry_writes(t, index_ttl_s, ts_us)
        writes += self._created.entry_writes(t, index_ttl_s, ts_us)
        writes += term_writes(t, index_ttl_s, ts_us)
        if home_ts_us is not None and keyed:
            writes.append(("home_put_keyed", [home_ts_us, t.home_at_ms, t.shard,
                                              {creation_of(t)}, t.trigger_id]))
        elif home_ts_us is not None:
            writes.append(("home_put", [home_ts_us, t.home_at_ms, t.shard, t.trigger_id]))
        try:
            await self._index_writes.submit(writes)
        except BaseException:
            unwritten()  # not known to be written: the next registration of the period is
            self._open_index.unwritten(t)
            self._created.unwritten(t)
            raise

    async def get(self, trigger_id: str) -> Trigger | None:
        rows = await self._cql.run("get", [trigger_id])
        return await self._homes.live(trigger_id, await pointer_from_row(
            trigger_id, rows[0] if rows else None, self._sealer))

    async def get_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        row = await self._rows.get(trigger_id, home_at_ms, shard)
        return None if row is None else await self._homes.live_at(row)

    async def get_many_at(self, where: Sequence[tuple[str, int | None, int]]
                          ) -> list[Trigger | None]:
        found: dict[str, Trigger | None] = dict(await self._rows.get_many(
            [(tid, home, shard) for tid, home, shard in where if home is not None]))
        rest = [tid for tid, home, _ in where if home is None]
        found.update(zip(rest, await self.get_many(rest), strict=True))
        # An entry aimed at a home the id's row is not at (a keyed request that found
        # another's row wrote its entries first) reads as nothing.
        return [t if (t := found.get(tid)) is not None and (home is None or t.home_at_ms == home)
                else None for tid, home, _ in where]

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        if len(trigger_ids) <= 1:
            return [await self.get(t) for t in trigger_ids]
        by_id: dict[str, Trigger | None] = {}
        homes: list[tuple[str, int, int]] = []
        # One IN request per chunk: far less driver work per row than a request each.
        for i in range(0, len(trigger_ids), POINTERS_PER_READ):
            found = await pointer_rows(self._cql.run, trigger_ids[i:i + POINTERS_PER_READ])
            for tid, row in found.items():
                if row[schema.COL_STATUS] is not None:
                    # An earlier release's row.
                    by_id[tid] = trigger_from_row(tid, await self._sealer.open_row(tid, row))
                elif (home := settled_home(row)) is not None:
                    homes.append((tid, home, row[schema.COL_SHARD]))
        by_id.update(await self._rows.get_many(homes))
        return [by_id.get(t) for t in trigger_ids]

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        # Only the cells that change (a claim is a few columns, not the payload); a terminal
        # write rewrites every cell with the TTL so that the whole row expires.
        # Compared in clear (a claim leaves the payload unwritten), sealed as written.
        values = self._sealer.values(new.trigger_id,
                                     changed_values(old, new, rewrite=ttl_s is not None))
        after = self._open_index.leave(old, new)  # the open entry goes once it is applied
        if old.home_at_ms is None:
            found = await self._legacy.compare_and_set(old, new, values, ttl_s)
            if isinstance(found, bool):
                return found
            old = found
        applied = await self._rows.compare_and_set(
            old, values, ttl_s=ttl_s, patient=patient,
            alone=ttl_s is not None and len(new.payload_json) > COALESCE_PAYLOAD_MAX_BYTES)
        if applied and ttl_s is not None:
            assert old.home_at_ms is not None
            # Finished: the pointer expires with the row (a keyed one's creations with it,
            # its home elected).
            keyed = old.idem_key is not None
            after.append(("home_ttl", [
                ttl_s, old.home_at_ms, old.shard,
                {creation_of(old)} if keyed else UNSET_VALUE,
                old.home_at_ms if keyed else UNSET_VALUE, old.trigger_id]))
        if applied and after:
            # Best effort (the outcome is decided): a pointer left behind reads as no
            # trigger once the row is gone, an open entry left behind is skipped by readers.
            with contextlib.suppress(StoreError):
                await self._row_writes.submit(after)
                await self._open_index.left(old, new, self._clock.now_ms())  # else a later probe
        return applied

    async def list_by_caller(
        self, caller: str, *, start: ListCursor, last_month: int, limit: int,
        status: Status | None,
    ) -> ListPage:
        if status is not None and status.open:
            return await self._open_index.page(caller, start=start, last_month=last_month,
                                               limit=limit, status=status,
                                               max_rows=self.list_max_rows,
                                               now_ms=self._clock.now_ms())
        return await self._created.page(caller, before=start, limit=limit, status=status,
                                        max_rows=self.list_max_rows)

    async def legacy_listing(self, caller: str, *, start: ListCursor, last_month: int,
                             limit: int) -> ListPage:
        """A page of the fire-month listing of releases before ``triggers_by_created``
        (``indexes.list_page``): what the backfill reads."""
        return await list_page(self._cql.run, self.get_many, caller, start=start,
                               last_month=last_month, limit=limit, status=None,
                               max_rows=self.list_max_rows)

    async def listed_callers(self) -> list[str]:
        """Every caller with listing entries (a whole-table read: for the backfill)."""
        return [r[schema.COL_CALLER] for r in await self._cql.run("listed_callers", [])]

    async def reindex(self, t: Trigger, index_ttl_s: int, now_ms: int) -> None:
        """Write the listing entries of ``t`` as read (the open one only if it is open),
        as of ``now_ms``."""
        ts_us = now_ms * 1000
        await self._cql.run_unlogged(self._open_index.entry_writes(t, index_ttl_s, ts_us)
                                     + self._created.entry_writes(t, index_ttl_s, ts_us))

    async def list_by_filter(self, caller: str, flt: TriggerFilter, *, before: ListCursor,
                             limit: int) -> ListPage:
        return await self._terms.page(caller, flt, before=before, limit=limit,
                                      max_rows=self.list_max_rows)
