"""The trigger store on Cassandra: ``TriggerCatalog``, ``IdempotencyStore``, ``DueIndex``,
``SweepCursors`` and ``Pingable`` (``core.ports``) in one connection, with the attempt log,
dead letters and replay jobs of ``adapters.cassandra.dead_letters``, the inbox of ``.inbox``,
the signing secrets of ``.secrets``, the paused callers of ``.pauses``, ``Resealer``
(``.secrets``, ``.reseal``); stored values sealed and opened by ``.sealing``.

Open with :meth:`CassandraStore.connect` (or :meth:`open_sync` from a script or a test
fixture); the schema must have been applied (``adapters.cassandra.migrate``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from cassandra.cluster import Cluster, Session
from cassandra.query import UNSET_VALUE

from trigger_service.adapters import schema
from trigger_service.adapters.batching import NO_ERRORS, Batcher, ItemErrors
from trigger_service.adapters.cassandra import driver, migrate, pauses, trigger_jobs
from trigger_service.adapters.cassandra.created_index import CreatedIndex
from trigger_service.adapters.cassandra.dead_letters import CassandraDeadLetters, attempt_values
from trigger_service.adapters.cassandra.homes import (
    CassandraKeyedRows,
    pointer_from_row,
    settled_home,
)
from trigger_service.adapters.cassandra.inbox import CassandraInbox
from trigger_service.adapters.cassandra.indexes import WrittenUntil, entry_writes, list_page
from trigger_service.adapters.cassandra.legacy import LegacyKeys, LegacyRows
from trigger_service.adapters.cassandra.open_index import OpenIndex
from trigger_service.adapters.cassandra.reseal import CassandraReseal
from trigger_service.adapters.cassandra.rows import TriggerRows
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.secrets import CassandraSecrets
from trigger_service.adapters.cassandra.statements import (
    all_statements,
    changed_values,
    trigger_from_row,
)
from trigger_service.adapters.cassandra.term_index import TermIndex, TermListing, term_writes
from trigger_service.adapters.homes import Homes
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.dead_letters import Attempt
from trigger_service.core.errors import StoreError
from trigger_service.core.model import Route, Status, Trigger, bucket_minute
from trigger_service.core.ports import Clock
from trigger_service.core.ports.crypto import Cipher
from trigger_service.core.ports.homes import KeyedRows, creation_of
from trigger_service.core.ports.idempotency import IdempotencyRecord
from trigger_service.core.ports.values import BucketEntry, KeyedCreation, ListCursor, ListPage
from trigger_service.core.time.clock import SystemClock

# Index rows (each then a row read) per LIST page: a rare status filter stops after this many
# and answers a short page with a cursor, rather than reading a caller's whole history.
LIST_MAX_ROWS = 2000
_SCAN_PAGE_SIZE = 2000
# Rows per IN request (get_many): few round trips, and one coordinator answers quickly.
_IN_CHUNK = 100

# Write coalescing (``CassandraStore._coalesce``): at most this many registrations share one
# batch (up to 5 index entries each, and one a tag or label: near Cassandra's default warning
# of 10 partitions per unlogged batch untagged), rows only with a payload this small (8 such
# rows stay far below the 50 KiB batch limit), a registration waits at most this long for company.
_COALESCE_REGISTRATIONS = 8
_COALESCE_PAYLOAD_MAX_BYTES = 2048
_COALESCE_LINGER_MS = 2
_COALESCE_FLUSHES = 64

Writes = Sequence[tuple[str, Sequence[Any]]]  # statements by name with values, written together


class CassandraStore(CassandraDeadLetters, CassandraInbox, CassandraSecrets, CassandraReseal,
                     TermListing, trigger_jobs.CassandraTriggerJobs, pauses.CassandraCallerPauses):
    def __init__(self, cluster: Cluster, session: Session, settings: CassandraSettings,
                 clock: Clock | None = None, *, cipher: Cipher,
                 seal_payloads: bool = False) -> None:
        """``clock``: times the write coalescing's linger (the system clock if None);
        ``cipher`` seals the signing secrets, and with ``seal_payloads`` the triggers'
        payloads and plans (``sealing``)."""
        self._cluster = cluster
        self._session = session
        self._sealer = RowSealer(cipher, seal_payloads=seal_payloads)
        self.list_max_rows = LIST_MAX_ROWS
        self._versions: WrittenUntil[str] = WrittenUntil()
        self._coalesce(clock or SystemClock())
        self._prepared = driver.prepare(session, all_statements(settings.keyspace))

    @classmethod
    async def connect(cls, settings: CassandraSettings, cipher: Cipher, *,
                      seal_payloads: bool = False) -> CassandraStore:
        """Connect and prepare. Raises ``StoreError`` (also when the schema is behind)."""
        return await asyncio.to_thread(cls.open_sync, settings, cipher,
                                       seal_payloads=seal_payloads)

    @classmethod
    def open_sync(cls, settings: CassandraSettings, cipher: Cipher, *,
                  seal_payloads: bool = False) -> CassandraStore:
        """Blocking :meth:`connect`, for scripts and test fixtures."""
        cluster, session = driver.connect(settings)
        try:
            migrate.check_applied(session, settings)
            return cls(cluster, session, settings, cipher=cipher, seal_payloads=seal_payloads)
        except BaseException:
            cluster.shutdown()
            raise

    async def close(self) -> None:
        await asyncio.to_thread(self._cluster.shutdown)

    def close_sync(self) -> None:
        self._cluster.shutdown()

    async def _run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        """Every row of a statement, all pages read (``driver.execute``)."""
        return await driver.execute(self._session, name, self._prepared[name], params)

    def _pages(self, name: str, params: Sequence[Any]) -> AsyncIterator[list[dict[str, Any]]]:
        """Every row of a statement, a page at a time (``driver.pages``)."""
        return driver.pages(self._session, name, self._prepared[name].bind(params))

    async def _run_unlogged(self, writes: Sequence[driver.Write]) -> None:
        """Independent writes as one unlogged batch (``driver.execute_unlogged``)."""
        await driver.execute_unlogged(self._session, "+".join(name for name, _ in writes),
                                      [(self._prepared[name], params) for name, params in writes])

    async def _run_conditional(self, writes: Sequence[tuple[str, Sequence[Any]]]
                               ) -> list[dict[str, Any]]:
        """Conditional writes to one partition as one request (``driver.execute_conditional``)."""
        return await driver.execute_conditional(
            self._session, "+".join(sorted({name for name, _ in writes})),
            [(self._prepared[name], params) for name, params in writes])

    def _coalesce(self, clock: Clock) -> None:
        """Concurrent registrations share requests: their index entries go together in one
        unlogged batch, then their rows in another (each registration still writes its
        entries before its row); so do concurrent deliveries' history lines. A lone write
        waits for nobody (the batcher's adaptive linger). A batch's failure fails each
        registration in it: each is retried by its caller, and every write is idempotent
        (timestamps fixed by the trigger; a history line is best effort)."""
        self._index_writes: Batcher[Writes] = Batcher(
            self._flush_writes, clock, max_batch=_COALESCE_REGISTRATIONS,
            linger_ms=_COALESCE_LINGER_MS, max_concurrent_flushes=_COALESCE_FLUSHES)
        self._row_writes: Batcher[Writes] = Batcher(
            self._flush_writes, clock, max_batch=_COALESCE_REGISTRATIONS,
            linger_ms=_COALESCE_LINGER_MS, max_concurrent_flushes=_COALESCE_FLUSHES)
        self._history_writes: Batcher[Writes] = Batcher(
            self._flush_writes, clock, max_batch=_COALESCE_REGISTRATIONS,
            linger_ms=_COALESCE_LINGER_MS, max_concurrent_flushes=_COALESCE_FLUSHES)
        # The rows themselves, whose conditional writes share Paxos rounds per partition.
        self._rows = TriggerRows(self._run, self._run_conditional, clock, self._sealer)
        self._legacy = LegacyRows(self._run, self._rows)
        self._keys = LegacyKeys(self._run)
        # The listing indexes: open triggers by fire time (``now`` from here), all newest first.
        self._clock = clock
        self._open_index = OpenIndex(self._run, self._run_unlogged, self.get_many_at)
        self._created = CreatedIndex(self._run, self.get_many_at)
        self._terms = TermIndex(self._run, self.get_many_at)  # tags, labels, recipients
        # One row per keyed id (``adapters.homes``) over the pointers and rows (its
        # primitives public: the contract tests build interleavings from them).
        self.keyed_rows: KeyedRows = CassandraKeyedRows(self._run, self._rows, self._sealer,
                                             self._write_keyed_index, self._write_keyed_row)
        self._homes = Homes(self.keyed_rows)

    async def record_attempt(self, attempt: Attempt, ttl_s: int) -> None:
        # The history lines of concurrent deliveries share unlogged batches too.
        await self._history_writes.submit([("attempt_put", attempt_values(attempt, ttl_s))])

    async def _flush_writes(self, batch: Sequence[Writes]) -> ItemErrors:
        await self._run_unlogged([w for writes in batch for w in writes])
        return NO_ERRORS

    # --- TriggerCatalog ----------------------------------------------------------------
    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        # Index entries and the pointer first, the row last: a crash in between leaves
        # entries and a pointer to no row (read as no trigger), never a row that no index
        # can find. Cheaper than a logged batch (no batchlog round) with the same guarantee.
        # Every write carries a timestamp fixed by the trigger, so a repeat rewrites
        # identical cells; the row's is backdated below every LWT's (see
        # schema.CREATE_BACKDATE_MS).
        t = trigger.homed()
        row_ts_us = (t.created_at_ms - schema.CREATE_BACKDATE_MS) * 1000
        await self._write_index(t, index_ttl_s, t.created_at_ms * 1000, home_ts_us=row_ts_us)
        await self._write_row(t, row_ts_us)

    async def _write_row(self, t: Trigger, ts_us: int) -> None:
        row = self._rows.create(t, ts_us)
        if len(t.payload_json) > _COALESCE_PAYLOAD_MAX_BYTES:
            await self._run(*row)  # alone: a batch of large rows would pass Cassandra's limits
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
        rows = await self._run("get", [trigger_id])
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
        for i in range(0, len(trigger_ids), _IN_CHUNK):
            chunk = list(dict.fromkeys(trigger_ids[i:i + _IN_CHUNK]))
            for row in await self._run("get_in", [chunk]):
                tid = row[schema.COL_TRIGGER_ID]
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
            alone=ttl_s is not None and len(new.payload_json) > _COALESCE_PAYLOAD_MAX_BYTES)
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
                                               now_ms=self._clock.now_ms())
        return await self._created.page(caller, before=start, limit=limit, status=status,
                                        max_rows=self.list_max_rows)

    async def legacy_listing(self, caller: str, *, start: ListCursor, last_month: int,
                             limit: int) -> ListPage:
        """A page of the fire-month listing of releases before ``triggers_by_created``
        (``indexes.list_page``): what the backfill reads."""
        return await list_page(self._run, self.get_many, caller, start=start,
                               last_month=last_month, limit=limit, status=None,
                               max_rows=self.list_max_rows)

    async def listed_callers(self) -> list[str]:
        """Every caller with listing entries (a whole-table read: for the backfill)."""
        return [r[schema.COL_CALLER] for r in await self._run("listed_callers", [])]

    async def reindex(self, t: Trigger, index_ttl_s: int, now_ms: int) -> None:
        """Write the listing entries of ``t`` as read (the open one only if it is open),
        as of ``now_ms``."""
        ts_us = now_ms * 1000
        await self._run_unlogged(self._open_index.entry_writes(t, index_ttl_s, ts_us)
                                 + self._created.entry_writes(t, index_ttl_s, ts_us))

    # --- ZoneIndex ---------------------------------------------------------------------
    async def zoned_versions(self) -> list[str]:
        rows = await self._run("versions", [schema.ZONED_VERSIONS_KEY])
        return [r[schema.COL_TZDATA_VERSION] for r in rows]

    async def zoned_trigger_ids(self, tzdata_version: str, shard: int
                                ) -> AsyncIterator[list[str]]:
        async for rows in self._pages("zoned_ids", [tzdata_version, shard]):
            yield [r[schema.COL_TRIGGER_ID] for r in rows]

    # --- LegacyIdempotency (``legacy.LegacyKeys``) ------------------------------------
    async def legacy_record(self, caller: str, idem_key: str) -> IdempotencyRecord | None:
        return await self._keys.record(caller, idem_key)

    async def legacy_records_exist(self) -> bool:
        return await self._keys.exist()

    async def put_if_absent(self, record: IdempotencyRecord, ttl_s: int
                            ) -> IdempotencyRecord | None:
        return await self._keys.put_if_absent(record, ttl_s)

    async def ping(self) -> None:
        await self._run("ping", [])

    # --- DueIndex, SweepCursors --------------------------------------------------------
    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        """One query per minute partition, paged."""
        out: list[BucketEntry] = []
        for minute in range(bucket_minute(after_ms + 1), bucket_minute(until_ms) + 1):
            stmt = self._prepared["bucket_scan"].bind([minute, shard, after_ms, until_ms])
            stmt.fetch_size = _SCAN_PAGE_SIZE
            async for rows in driver.pages(self._session, "bucket scan", stmt):
                out.extend(BucketEntry(r[schema.COL_TRIGGER_ID], r[schema.COL_FIRE_AT_MS], shard,
                                       Route(r[schema.COL_PATH]), r[schema.COL_HOME_AT_MS])
                           for r in rows)
        return out

    async def load_cursors(self, group: str) -> dict[int, int]:
        rows = await self._run("cursor_get", [group])
        return {r[schema.COL_SHARD]: r[schema.COL_PROMOTED_UNTIL_MS] for r in rows}

    async def save_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None:
        await self._run("cursor_put", [group, shard, promoted_until_ms, owner, fence])

    # --- CounterStore ------------------------------------------------------------------
    async def add_counters(self, deltas: dict[str, int]) -> None:
        await asyncio.gather(*(self._run("counter_add", [delta, name])
                               for name, delta in deltas.items() if delta))

    async def read_counters(self) -> dict[str, int]:
        rows = await self._run("counters_get", [])
        return {r[schema.COL_COUNTER_NAME]: r[schema.COL_COUNTER_VALUE] for r in rows}

