"""The trigger store on Cassandra: ``TriggerCatalog``, ``IdempotencyStore``, ``DueIndex``,
``SweepCursors`` and ``Pingable`` (``core.ports``) in one connection, with the attempt log,
dead letters and replay jobs of ``adapters.cassandra.dead_letters`` and the inbox of
``adapters.cassandra.inbox``.

Open with :meth:`CassandraStore.connect` (or :meth:`open_sync` from a script or a test
fixture); the schema must have been applied (``adapters.cassandra.migrate``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from cassandra.cluster import Cluster, Session

from trigger_service.adapters import schema
from trigger_service.adapters.batching import NO_ERRORS, Batcher, ItemErrors
from trigger_service.adapters.cassandra import driver, migrate
from trigger_service.adapters.cassandra.dead_letters import (
    CassandraDeadLetters,
    attempt_values,
    dead_letter_queries,
)
from trigger_service.adapters.cassandra.inbox import CassandraInbox, inbox_queries
from trigger_service.adapters.cassandra.statements import (
    changed_values,
    creation_values,
    decode_request,
    encode_request,
    queries,
    trigger_from_row,
)
from trigger_service.config.settings import CassandraSettings
from trigger_service.core.clock import SystemClock
from trigger_service.core.dead_letters import Attempt
from trigger_service.core.errors import StoreError
from trigger_service.core.idempotency_ports import IdempotencyRecord
from trigger_service.core.model import (
    Route,
    Status,
    Trigger,
    bucket_minute,
    fire_month,
    month_end_ms,
    next_month,
)
from trigger_service.core.ports import BucketEntry, Clock, ListCursor, ListPage

K = TypeVar("K")
_MIN_MS = -(2**63)
_LIST_MAX_READS = 50  # partition reads per LIST page (months with entries, usually a few)
# Index rows (each then a row read) per LIST page: a rare status filter stops after this many
# and answers a short page with a cursor, rather than reading a caller's whole history.
LIST_MAX_ROWS = 2000
_SCAN_PAGE_SIZE = 2000

# Rows per IN request (get_many): big enough to save round trips, small enough for one
# coordinator to answer quickly.
_IN_CHUNK = 100


# A zone-rules release's entry in zoned_versions outlives the entries it was written for by
# this much, so one write covers a day of registrations that resolve with it.
_VERSION_TTL_SLACK_S = 86_400


class WrittenUntil(Generic[K]):
    """Which small index rows this process has written, and until when they live: a row
    is written again only for an entry that must outlive it. Per process, not shared:
    every process writes each row once per period."""

    def __init__(self) -> None:
        self._expires_ms: dict[K, int] = {}

    def claim(self, key: K, now_ms: int, ttl_s: int) -> int | None:
        """The TTL to write the row with, or None if it is written and lives long enough."""
        expires_ms = now_ms + ttl_s * 1000
        if self._expires_ms.get(key, 0) >= expires_ms:
            return None
        self._expires_ms[key] = expires_ms
        return ttl_s

    def forget(self, key: K) -> None:
        self._expires_ms.pop(key, None)


# Write coalescing (``CassandraStore._coalesce``): at most this many registrations share one
# batch (up to 5 index entries each: a batch stays near Cassandra's default warning of 10
# partitions per unlogged batch), rows only with a payload this small (8 such rows stay far
# below the 50 KiB batch limit), a registration waits at most this long for company.
_COALESCE_REGISTRATIONS = 8
_COALESCE_PAYLOAD_MAX_BYTES = 2048
_COALESCE_LINGER_MS = 2
_COALESCE_FLUSHES = 64

# Statements by name with their values, written together.
Writes = Sequence[tuple[str, Sequence[Any]]]


class CassandraStore(CassandraDeadLetters, CassandraInbox):
    def __init__(self, cluster: Cluster, session: Session, settings: CassandraSettings,
                 clock: Clock | None = None) -> None:
        """``clock``: times the write coalescing's linger (the system clock if None)."""
        self._cluster = cluster
        self._session = session
        self.list_max_rows = LIST_MAX_ROWS
        self._months: WrittenUntil[tuple[str, int]] = WrittenUntil()
        self._versions: WrittenUntil[str] = WrittenUntil()
        self._coalesce(clock or SystemClock())
        self._prepared = driver.prepare(session, queries(settings.keyspace)
                                        | dead_letter_queries(settings.keyspace)
                                        | inbox_queries(settings.keyspace))

    @classmethod
    async def connect(cls, settings: CassandraSettings) -> CassandraStore:
        """Connect and prepare. Raises ``StoreError`` (also when the schema is behind)."""
        return await asyncio.to_thread(cls.open_sync, settings)

    @classmethod
    def open_sync(cls, settings: CassandraSettings) -> CassandraStore:
        """Blocking :meth:`connect`, for scripts and test fixtures."""
        cluster, session = driver.connect(settings)
        try:
            migrate.check_applied(session, settings)
            return cls(cluster, session, settings)
        except BaseException:
            cluster.shutdown()
            raise

    async def close(self) -> None:
        await asyncio.to_thread(self._cluster.shutdown)

    def close_sync(self) -> None:
        self._cluster.shutdown()

    async def _run(self, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        return await driver.execute(self._session, name, self._prepared[name], params)

    async def _run_unlogged(self, writes: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Independent writes as one unlogged batch (``driver.execute_unlogged``)."""
        await driver.execute_unlogged(self._session, "+".join(name for name, _ in writes),
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

    async def record_attempt(self, attempt: Attempt, ttl_s: int) -> None:
        # The history lines of concurrent deliveries share unlogged batches too.
        await self._history_writes.submit([("attempt_put", attempt_values(attempt, ttl_s))])

    async def _flush_writes(self, batch: Sequence[Writes]) -> ItemErrors:
        await self._run_unlogged([w for writes in batch for w in writes])
        return NO_ERRORS

    # --- TriggerCatalog ----------------------------------------------------------------
    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        # Index entries first, the row last: a crash in between leaves an index entry that
        # points nowhere (ignored by every reader), never a row that no index can find.
        # Cheaper than a logged batch (no batchlog round) with the same guarantee. Every
        # write carries a timestamp fixed by the trigger, so a repeat rewrites identical
        # cells; the row's is backdated below every LWT's (see schema.CREATE_BACKDATE_MS).
        row_ts_us = (trigger.created_at_ms - schema.CREATE_BACKDATE_MS) * 1000
        await self._write_index(trigger, index_ttl_s, trigger.created_at_ms * 1000)
        row = ("create", [row_ts_us, *creation_values(trigger), trigger.trigger_id])
        if len(trigger.payload_json) > _COALESCE_PAYLOAD_MAX_BYTES:
            await self._run(*row)  # alone: a batch of large rows would pass Cassandra's limits
        else:
            await self._row_writes.submit([row])

    async def create_if_absent(self, trigger: Trigger, index_ttl_s: int) -> Trigger | None:
        # The index entries first, as in create; then the row with Paxos, which cannot take
        # the backdated timestamp (an LWT's cells carry its ballot's), and needs none: no
        # transition can have happened to a row that was not there.
        await self._write_index(trigger, index_ttl_s, trigger.created_at_ms * 1000)
        rows = await self._run("create_lwt", [*creation_values(trigger), trigger.trigger_id])
        if rows and rows[0].get(schema.LWT_APPLIED):
            return None
        # A condition on a column answers that column alone: read the row that won (Paxos
        # committed it before ours was decided, so a quorum read sees it).
        existing = await self.get(trigger.trigger_id)
        if existing is None:
            # Gone between the two (it expired): nothing decided; the caller's retry is.
            raise StoreError(f"trigger {trigger.trigger_id} vanished during its creation")
        return existing

    async def advance(self, old: Trigger, new: Trigger, index_ttl_s: int, now_ms: int) -> bool:
        # The new fire time's index entries first (new keys: plain inserts), then the LWT.
        # If the LWT loses, the entries point at a row that is elsewhere: readers skip them.
        await self._write_index(new, index_ttl_s, now_ms * 1000)
        return await self.compare_and_set(old, new)

    async def _write_index(self, t: Trigger, index_ttl_s: int, ts_us: int) -> None:
        month = fire_month(t.fire_at_ms)
        # Independent entries of several partitions: one unlogged batch, one round trip.
        writes: list[tuple[str, Sequence[Any]]] = [
            ("bucket", [bucket_minute(t.fire_at_ms), t.shard, t.fire_at_ms, t.trigger_id,
                        t.route.value, index_ttl_s, ts_us]),
            ("by_caller", [t.caller, month, t.fire_at_ms, t.trigger_id, index_ttl_s, ts_us]),
        ]
        if t.tzdata_version is not None:
            writes.append(("zoned_put", [t.tzdata_version, t.shard, t.trigger_id,
                                         index_ttl_s, ts_us]))
        # The two small "which partitions exist" tables: written once per process and
        # period, with a TTL that covers every entry of it, not once per registration (they
        # were one partition rewritten by every registration).
        now_ms = ts_us // 1000
        month_ttl_s = index_ttl_s + max(0, month_end_ms(month) - t.fire_at_ms) // 1000
        month_write = self._months.claim((t.caller, month), now_ms, month_ttl_s)
        if month_write is not None:
            writes.append(("month_put", [t.caller, month, month_write, ts_us]))
        version_write = (None if t.tzdata_version is None else self._versions.claim(
            t.tzdata_version, now_ms, index_ttl_s + _VERSION_TTL_SLACK_S))
        if version_write is not None:
            writes.append(("version_put", [schema.ZONED_VERSIONS_KEY, t.tzdata_version,
                                           version_write, ts_us]))
        try:
            await self._index_writes.submit(writes)
        except BaseException:
            # Not known to be written: the next registration of the period writes it.
            if month_write is not None:
                self._months.forget((t.caller, month))
            if version_write is not None and t.tzdata_version is not None:
                self._versions.forget(t.tzdata_version)
            raise

    async def get(self, trigger_id: str) -> Trigger | None:
        rows = await self._run("get", [trigger_id])
        return trigger_from_row(trigger_id, rows[0]) if rows else None

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        if len(trigger_ids) <= 1:
            return [await self.get(t) for t in trigger_ids]
        by_id: dict[str, Trigger | None] = {}
        # One IN request per chunk: far less driver work per row than a request each.
        for i in range(0, len(trigger_ids), _IN_CHUNK):
            chunk = list(dict.fromkeys(trigger_ids[i:i + _IN_CHUNK]))
            for row in await self._run("get_in", [chunk]):
                tid = row[schema.COL_TRIGGER_ID]
                by_id[tid] = trigger_from_row(tid, row)
        return [by_id.get(t) for t in trigger_ids]

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None
    ) -> bool:
        cond = [old.status.value, old.claim_id, old.attempts, old.revision]
        # Only the cells that change (a claim is a few columns, not the payload); a terminal
        # write rewrites every cell with the TTL so that the whole row expires.
        values = changed_values(old, new, rewrite=ttl_s is not None)
        if ttl_s is None:
            rows = await self._run("cas", [*values, new.trigger_id, *cond])
        else:
            rows = await self._run("cas_ttl", [ttl_s, *values, new.trigger_id, *cond])
        return bool(rows and rows[0].get(schema.LWT_APPLIED))

    async def list_by_caller(
        self, caller: str, *, start: ListCursor, last_month: int, limit: int,
        status: Status | None,
    ) -> ListPage:
        month, after_ms, after_id = start
        found: list[Trigger] = []
        # Only the months that hold entries (a few, even ten years ahead).
        used = [r[schema.COL_FIRE_MONTH] for r in await self._run(
            "months", [caller, month, last_month])]
        if not used:
            return ListPage([], None)
        if used[0] > month:
            month, after_ms, after_id = used[0], _MIN_MS, ""
        # Each round reads at most `limit` index entries from one month partition, then the
        # rows themselves; filtering by status happens on the rows (the index has no status).
        reads, rows_left = 0, self.list_max_rows
        while (month <= last_month and len(found) < limit and reads < _LIST_MAX_READS
               and rows_left > 0):
            reads += 1
            want = min(limit - len(found), rows_left)
            rows = await self._run("list", [caller, month, after_ms, after_id, want])
            rows_left -= len(rows)
            triggers = await self.get_many([r[schema.COL_TRIGGER_ID] for r in rows])
            for r, t in zip(rows, triggers, strict=True):
                after_ms, after_id = r[schema.COL_FIRE_AT_MS], r[schema.COL_TRIGGER_ID]
                # An entry for another fire time is a past occurrence (or an edit's old time):
                # the trigger is listed once, at its current one.
                if (t is not None and t.fire_at_ms == after_ms
                        and (status is None or t.status is status)):
                    found.append(t)
            if len(rows) < want:
                later = [m for m in used if m > month]
                month = later[0] if later else next_month(last_month)
                after_ms, after_id = _MIN_MS, ""
        more = month <= last_month
        return ListPage(found, (month, after_ms, after_id) if more else None)

    # --- SecretStore -------------------------------------------------------------------
    async def add_secret(self, caller: str, created_at_ms: int, secret: str) -> None:
        await self._run("secret_put", [caller, created_at_ms, secret])

    async def secrets(self, caller: str) -> list[tuple[int, str]]:
        rows = await self._run("secrets", [caller])
        return [(r[schema.COL_CREATED_AT_MS], r[schema.COL_SECRET]) for r in rows]

    # --- ZoneIndex ---------------------------------------------------------------------
    async def zoned_versions(self) -> list[str]:
        rows = await self._run("versions", [schema.ZONED_VERSIONS_KEY])
        return [r[schema.COL_TZDATA_VERSION] for r in rows]

    async def zoned_trigger_ids(self, tzdata_version: str, shard: int) -> list[str]:
        rows = await self._run("zoned_ids", [tzdata_version, shard])
        return [r[schema.COL_TRIGGER_ID] for r in rows]

    # --- LegacyIdempotency --------------------------------------------------------------
    async def legacy_record(self, caller: str, idem_key: str) -> IdempotencyRecord | None:
        rows = await self._run("idem_get", [caller, idem_key])
        if not rows:
            return None
        row = rows[0]
        trigger = decode_request(row[schema.COL_TRIGGER_ID], caller, idem_key,
                                 row[schema.COL_REQUEST])
        return IdempotencyRecord(caller, idem_key, row[schema.COL_REQUEST_HASH], trigger)

    async def legacy_records_exist(self) -> bool:
        return bool(await self._run("idem_any", []))

    async def put_if_absent(
        self, record: IdempotencyRecord, ttl_s: int
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

    async def ping(self) -> None:
        await self._run("ping", [])

    # --- DueIndex, SweepCursors --------------------------------------------------------
    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        """One query per minute partition, paged."""
        out: list[BucketEntry] = []
        for minute in range(bucket_minute(after_ms + 1), bucket_minute(until_ms) + 1):
            state: bytes | None = None
            while True:
                stmt = self._prepared["bucket_scan"].bind([minute, shard, after_ms, until_ms])
                stmt.fetch_size = _SCAN_PAGE_SIZE
                rows, state = await driver.execute_page(
                    self._session, "bucket scan", stmt, state)
                out.extend(BucketEntry(r[schema.COL_TRIGGER_ID], r[schema.COL_FIRE_AT_MS], shard,
                                       Route(r[schema.COL_PATH])) for r in rows)
                if state is None:
                    break
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
