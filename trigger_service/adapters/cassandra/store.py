"""The trigger store on Cassandra: one connection, and the parts that serve its ports, each on
the connection's statements (``driver.Statements``), composed here:

====================  =============================================  ==================
part                  ports                                          module
====================  =============================================  ==================
``triggers``          ``TriggerCatalog`` (with ``TriggerStates``),   ``.triggers``
                      ``FilteredListing``
``legacy_keys``       ``IdempotencyStore`` (``LegacyIdempotency``)   ``.legacy``
``due``               ``DueIndex``, ``SweepCursors``                 ``.due_index``
``zones``             ``ZoneIndex``                                  ``.zone_index``
``counters``          ``CounterStore``                               ``.counters``
``dead_letters``      ``AttemptLog``, ``DeadLetterIndex``            ``.dead_letters``
``replay_jobs``       ``ReplayJobStore``                             ``.replay_jobs``
``trigger_jobs``      ``TriggerJobStore``                            ``.trigger_jobs``
``inbox``             ``InboxStore``                                 ``.inbox``
``signing_secrets``   ``SecretStore``, ``Resealer`` (secrets)        ``.secrets``
``reseal``            ``Resealer`` (triggers)                        ``.reseal``
``pauses``            ``CallerPauses``                               ``.pauses``
``debounce``          ``DebounceHeads``                              ``.debounce``
``audit``             ``AuditLog``                                   ``.audit``
====================  =============================================  ==================

``CassandraStore`` is the façade the processes are handed (``platform.wiring.Store``: every
port at once): each port's methods pass to its part, nothing else. The recipient profiles
and endpoint health records are on the same statements (``statements``, ``sealer``), built
by the wiring (``.recipients``, ``.endpoint_health``). Stored values are sealed and opened
by ``.sealing``.

Open with :meth:`CassandraStore.connect` (or :meth:`open_sync` from a script or a test
fixture); the schema must have been applied (``adapters.cassandra.migrate``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from cassandra.cluster import Cluster, Session

from trigger_service.adapters.cassandra import driver, migrate
from trigger_service.adapters.cassandra.audit import CassandraAuditLog
from trigger_service.adapters.cassandra.counters import CassandraCounters
from trigger_service.adapters.cassandra.dead_letters import CassandraDeadLetters
from trigger_service.adapters.cassandra.debounce import CassandraDebounceHeads
from trigger_service.adapters.cassandra.due_index import CassandraDueIndex
from trigger_service.adapters.cassandra.inbox import CassandraInbox
from trigger_service.adapters.cassandra.legacy import LegacyKeys
from trigger_service.adapters.cassandra.pauses import CassandraCallerPauses
from trigger_service.adapters.cassandra.replay_jobs import CassandraReplayJobs
from trigger_service.adapters.cassandra.reseal import CassandraReseal
from trigger_service.adapters.cassandra.sealing import RowSealer
from trigger_service.adapters.cassandra.secrets import CassandraSecrets
from trigger_service.adapters.cassandra.statements import all_statements
from trigger_service.adapters.cassandra.trigger_jobs import CassandraTriggerJobs
from trigger_service.adapters.cassandra.triggers import CassandraTriggers
from trigger_service.adapters.cassandra.zone_index import CassandraZoneIndex
from trigger_service.config.stores import CassandraSettings
from trigger_service.core.audit import AuditCursor, AuditEntry, AuditPage, AuditQuery
from trigger_service.core.dead_letters import (
    Attempt,
    DeadLetter,
    DeadLetterCursor,
    DeadLetterPage,
    DeadLetterQuery,
    ItemState,
    JobItem,
    ReplayJob,
)
from trigger_service.core.debounce import DebounceHead
from trigger_service.core.model import Status, Trigger
from trigger_service.core.notify.inbox import InboxMessage, InboxPage
from trigger_service.core.ports import Clock
from trigger_service.core.ports.crypto import Cipher, ResealReport
from trigger_service.core.ports.homes import KeyedRows
from trigger_service.core.ports.idempotency import IdempotencyRecord
from trigger_service.core.ports.values import BucketEntry, KeyedCreation, ListCursor, ListPage
from trigger_service.core.tags import TriggerFilter
from trigger_service.core.time.clock import SystemClock
from trigger_service.core.trigger_jobs import TriggerJob, TriggerJobItem


class CassandraStore:
    def __init__(self, cluster: Cluster, session: Session, settings: CassandraSettings,
                 clock: Clock | None = None, *, cipher: Cipher,
                 seal_payloads: bool = False) -> None:
        """``clock``: times the write coalescing's linger (the system clock if None);
        ``cipher`` seals the signing secrets, and with ``seal_payloads`` the triggers'
        payloads and plans (``sealing``)."""
        self._cluster = cluster
        self._session = session
        self._compose(driver.PreparedStatements(session, all_statements(settings.keyspace)),
                      RowSealer(cipher, seal_payloads=seal_payloads), clock or SystemClock())

    def _compose(self, statements: driver.Statements, sealer: RowSealer, clock: Clock) -> None:
        """The parts, each given what it needs of ``statements``, ``sealer`` and ``clock``."""
        self.statements = statements
        self.sealer = sealer
        self.triggers = CassandraTriggers(statements, sealer, clock)
        # One row per keyed id's primitives (public: the contract tests build interleavings
        # from them).
        self.keyed_rows: KeyedRows = self.triggers.keyed_rows
        self.legacy_keys = LegacyKeys(statements.run)
        self.due = CassandraDueIndex(statements)
        self.zones = CassandraZoneIndex(statements)
        self.counters = CassandraCounters(statements)
        self.dead_letters = CassandraDeadLetters(statements, clock)
        self.replay_jobs = CassandraReplayJobs(statements)
        self.trigger_jobs = CassandraTriggerJobs(statements)
        self.inbox = CassandraInbox(statements, sealer)
        self.signing_secrets = CassandraSecrets(statements, sealer)
        self.reseal = CassandraReseal(statements, sealer)
        self.pauses = CassandraCallerPauses(statements)
        self.debounce = CassandraDebounceHeads(statements)
        self.audit = CassandraAuditLog(statements, clock)

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
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:  # blocking close, for scripts and test fixtures
        self._cluster.shutdown()

    @property
    def list_max_rows(self) -> int:
        """Index rows a listing page reads at most (``CassandraTriggers.list_max_rows``)."""
        return self.triggers.list_max_rows

    @list_max_rows.setter
    def list_max_rows(self, rows: int) -> None:
        self.triggers.list_max_rows = rows

    # --- Pingable ----------------------------------------------------------------------
    async def ping(self) -> None:
        await self.statements.run("ping", [])

    # --- TriggerCatalog, TriggerStates, FilteredListing: ``triggers`` ------------------
    async def create(self, trigger: Trigger, index_ttl_s: int) -> None:
        await self.triggers.create(trigger, index_ttl_s)

    async def create_keyed(self, trigger: Trigger, index_ttl_s: int) -> KeyedCreation:
        return await self.triggers.create_keyed(trigger, index_ttl_s)

    async def advance(self, old: Trigger, new: Trigger, index_ttl_s: int, now_ms: int, *,
                      patient: bool = False) -> bool:
        return await self.triggers.advance(old, new, index_ttl_s, now_ms, patient=patient)

    async def get(self, trigger_id: str) -> Trigger | None:
        return await self.triggers.get(trigger_id)

    async def get_at(self, trigger_id: str, home_at_ms: int, shard: int) -> Trigger | None:
        return await self.triggers.get_at(trigger_id, home_at_ms, shard)

    async def get_many_at(self, where: Sequence[tuple[str, int | None, int]]
                          ) -> list[Trigger | None]:
        return await self.triggers.get_many_at(where)

    async def get_many(self, trigger_ids: Sequence[str]) -> list[Trigger | None]:
        return await self.triggers.get_many(trigger_ids)

    async def compare_and_set(
        self, old: Trigger, new: Trigger, *, ttl_s: int | None = None, patient: bool = False
    ) -> bool:
        return await self.triggers.compare_and_set(old, new, ttl_s=ttl_s, patient=patient)

    async def list_by_caller(
        self, caller: str, *, start: ListCursor, last_month: int, limit: int,
        status: Status | None,
    ) -> ListPage:
        return await self.triggers.list_by_caller(caller, start=start, last_month=last_month,
                                                  limit=limit, status=status)

    async def list_by_filter(self, caller: str, flt: TriggerFilter, *, before: ListCursor,
                             limit: int) -> ListPage:
        return await self.triggers.list_by_filter(caller, flt, before=before, limit=limit)

    # --- IdempotencyStore, LegacyIdempotency: ``legacy_keys`` --------------------------
    async def put_if_absent(self, record: IdempotencyRecord, ttl_s: int
                            ) -> IdempotencyRecord | None:
        return await self.legacy_keys.put_if_absent(record, ttl_s)

    async def legacy_record(self, caller: str, idem_key: str) -> IdempotencyRecord | None:
        return await self.legacy_keys.record(caller, idem_key)

    async def legacy_records_exist(self) -> bool:
        return await self.legacy_keys.exist()

    # --- DueIndex, SweepCursors: ``due`` -----------------------------------------------
    async def bucket_entries(self, shard: int, after_ms: int, until_ms: int) -> list[BucketEntry]:
        return await self.due.bucket_entries(shard, after_ms, until_ms)

    async def load_cursors(self, group: str) -> dict[int, int]:
        return await self.due.load_cursors(group)

    async def save_cursor(
        self, group: str, shard: int, promoted_until_ms: int, owner: str, fence: int
    ) -> None:
        await self.due.save_cursor(group, shard, promoted_until_ms, owner, fence)

    # --- ZoneIndex: ``zones`` ----------------------------------------------------------
    async def zoned_versions(self) -> list[str]:
        return await self.zones.zoned_versions()

    def zoned_trigger_ids(self, tzdata_version: str, shard: int) -> AsyncIterator[list[str]]:
        return self.zones.zoned_trigger_ids(tzdata_version, shard)

    # --- CounterStore: ``counters`` ----------------------------------------------------
    async def add_counters(self, deltas: dict[str, int]) -> None:
        await self.counters.add_counters(deltas)

    async def read_counters(self) -> dict[str, int]:
        return await self.counters.read_counters()

    # --- AttemptLog, DeadLetterIndex: ``dead_letters`` ---------------------------------
    async def record_attempt(self, attempt: Attempt, ttl_s: int, *, kept: int,
                             patient: bool = False) -> None:
        await self.dead_letters.record_attempt(attempt, ttl_s, kept=kept, patient=patient)

    async def attempts(self, trigger_id: str, occurrence_id: str) -> list[Attempt]:
        return await self.dead_letters.attempts(trigger_id, occurrence_id)

    async def recent_attempts(self, trigger_id: str) -> list[Attempt]:
        return await self.dead_letters.recent_attempts(trigger_id)

    async def put_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        await self.dead_letters.put_dead_letter(d, ttl_s)

    async def put_dead_letter_if_new(self, d: DeadLetter, ttl_s: int) -> bool:
        return await self.dead_letters.put_dead_letter_if_new(d, ttl_s)

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter | None:
        return await self.dead_letters.get_dead_letter(dead_letter_id)

    async def resolve_dead_letter(self, d: DeadLetter, ttl_s: int) -> None:
        await self.dead_letters.resolve_dead_letter(d, ttl_s)

    async def list_dead_letters(self, q: DeadLetterQuery, cursor: DeadLetterCursor | None,
                                limit: int) -> DeadLetterPage:
        return await self.dead_letters.list_dead_letters(q, cursor, limit)

    # --- ReplayJobStore: ``replay_jobs`` -----------------------------------------------
    async def create_job(self, job: ReplayJob, items: Sequence[JobItem], ttl_s: int) -> None:
        await self.replay_jobs.create_job(job, items, ttl_s)

    async def get_job(self, job_id: str) -> ReplayJob | None:
        return await self.replay_jobs.get_job(job_id)

    def job_items(self, job_id: str) -> AsyncIterator[list[JobItem]]:
        return self.replay_jobs.job_items(job_id)

    async def set_item_state(self, job_id: str, item: JobItem, state: ItemState,
                             ttl_s: int) -> None:
        await self.replay_jobs.set_item_state(job_id, item, state, ttl_s)

    async def open_jobs(self, turn: int | None = None) -> list[str]:
        return await self.replay_jobs.open_jobs(turn)

    async def count_open_jobs(self, caller: str | None) -> int:
        return await self.replay_jobs.count_open_jobs(caller)

    async def claim_job(self, job_id: str, owner: str, now_ms: int, lease_ms: int) -> bool:
        return await self.replay_jobs.claim_job(job_id, owner, now_ms, lease_ms)

    async def finish_job(self, job_id: str, ttl_s: int) -> None:
        await self.replay_jobs.finish_job(job_id, ttl_s)

    # --- TriggerJobStore: ``trigger_jobs`` ---------------------------------------------
    async def create_trigger_job(self, job: TriggerJob, items: Sequence[TriggerJobItem],
                                 ttl_s: int) -> None:
        await self.trigger_jobs.create_trigger_job(job, items, ttl_s)

    async def get_trigger_job(self, job_id: str) -> TriggerJob | None:
        return await self.trigger_jobs.get_trigger_job(job_id)

    def trigger_job_items(self, job_id: str) -> AsyncIterator[list[TriggerJobItem]]:
        return self.trigger_jobs.trigger_job_items(job_id)

    async def set_trigger_item_state(self, job_id: str, item: TriggerJobItem,
                                     state: ItemState, ttl_s: int) -> None:
        await self.trigger_jobs.set_trigger_item_state(job_id, item, state, ttl_s)

    async def open_trigger_jobs(self, turn: int | None = None) -> list[str]:
        return await self.trigger_jobs.open_trigger_jobs(turn)

    async def count_open_trigger_jobs(self, caller: str) -> int:
        return await self.trigger_jobs.count_open_trigger_jobs(caller)

    async def claim_trigger_job(self, job_id: str, owner: str, now_ms: int,
                                lease_ms: int) -> bool:
        return await self.trigger_jobs.claim_trigger_job(job_id, owner, now_ms, lease_ms)

    async def finish_trigger_job(self, job_id: str, ttl_s: int) -> None:
        await self.trigger_jobs.finish_trigger_job(job_id, ttl_s)

    # --- InboxStore: ``inbox`` ---------------------------------------------------------
    async def put_inbox_message(self, m: InboxMessage, ttl_s: int) -> InboxMessage | None:
        return await self.inbox.put_inbox_message(m, ttl_s)

    async def get_inbox_message(self, caller: str, recipient: str,
                                message_id: str) -> InboxMessage | None:
        return await self.inbox.get_inbox_message(caller, recipient, message_id)

    async def list_inbox(self, caller: str, recipient: str, *, before: str | None,
                         limit: int, unread_only: bool) -> InboxPage:
        return await self.inbox.list_inbox(caller, recipient, before=before, limit=limit,
                                           unread_only=unread_only)

    async def inbox_after(self, caller: str, recipient: str, after: str,
                          limit: int) -> list[InboxMessage]:
        return await self.inbox.inbox_after(caller, recipient, after, limit)

    async def mark_inbox_read(self, caller: str, recipient: str, message_id: str,
                              read_at_ms: int) -> InboxMessage | None:
        return await self.inbox.mark_inbox_read(caller, recipient, message_id, read_at_ms)

    async def delete_inbox_message(self, caller: str, recipient: str, message_id: str,
                                   now_ms: int) -> None:
        await self.inbox.delete_inbox_message(caller, recipient, message_id, now_ms)

    # --- SecretStore, Resealer: ``signing_secrets``, ``reseal`` ------------------------
    async def add_secret(self, caller: str, created_at_ms: int, secret: str) -> int:
        return await self.signing_secrets.add_secret(caller, created_at_ms, secret)

    async def secrets(self, caller: str, limit: int) -> list[tuple[int, str]]:
        return await self.signing_secrets.secrets(caller, limit)

    async def retire_secrets(self, caller: str, before_ms: int) -> None:
        await self.signing_secrets.retire_secrets(caller, before_ms)

    async def reseal_secrets(self) -> ResealReport:
        return await self.signing_secrets.reseal_secrets()

    async def reseal_triggers(self) -> ResealReport:
        return await self.reseal.reseal_triggers()

    # --- DebounceHeads: ``debounce`` ---------------------------------------------------
    async def debounce_head(self, caller: str, key: str) -> DebounceHead | None:
        return await self.debounce.debounce_head(caller, key)

    async def start_head(self, head: DebounceHead, ttl_s: int) -> DebounceHead:
        return await self.debounce.start_head(head, ttl_s)

    async def replace_head(self, old: DebounceHead, new: DebounceHead,
                           ttl_s: int) -> DebounceHead:
        return await self.debounce.replace_head(old, new, ttl_s)

    # --- AuditLog: ``audit`` -------------------------------------------------------------
    async def append_audit(self, entries: Sequence[AuditEntry], ttl_s: int) -> None:
        await self.audit.append_audit(entries, ttl_s)

    async def list_audit(self, query: AuditQuery, cursor: AuditCursor | None,
                         limit: int) -> AuditPage:
        return await self.audit.list_audit(query, cursor, limit)

    # --- CallerPauses: ``pauses`` ------------------------------------------------------
    async def pause_caller(self, caller: str, paused_at_ms: int) -> None:
        await self.pauses.pause_caller(caller, paused_at_ms)

    async def resume_caller(self, caller: str) -> None:
        await self.pauses.resume_caller(caller)

    async def paused_callers(self) -> dict[str, int]:
        return await self.pauses.paused_callers()
