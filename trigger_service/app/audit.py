"""The audit log's use cases: record who did what (best effort, after the answer is decided)
and list it (a caller its own entries, operators all). No HTTP here: the edge says who acted,
on what and how it was answered (``http.audit``).

Recording never fails nor delays the request it records: the write starts in the background
and the answer goes out; a write that fails, or one more than ``TRIGGER_AUDIT_MAX_PENDING``
in flight (a slow Cassandra), is lost and counted in ``audit_write_failures_total``. The
store coalesces concurrent entries into shared batches (``adapters.cassandra.audit``).
"""

from __future__ import annotations

import asyncio

import structlog

from trigger_service.config.audit import AuditSettings
from trigger_service.core.audit import (
    AuditAction,
    AuditCursor,
    AuditEntry,
    AuditPage,
    AuditQuery,
)
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.audit import AuditLog

log = structlog.get_logger(__name__)

MAX_LIMIT = 500  # the API's own cap (http.parsing.MAX_LIST_LIMIT)
DEFAULT_LIMIT = 50


class AuditTrail:
    def __init__(self, settings: AuditSettings, store: AuditLog, clock: Clock,
                 metrics: Metrics) -> None:
        self._s = settings
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._running: set[asyncio.Future[None]] = set()

    @property
    def logs_creates(self) -> bool:
        """Whether creates are logged (``TRIGGER_AUDIT_CREATES``) or only counted."""
        return self._s.creates

    def count_create(self) -> None:
        """A create not logged: counted in ``audit_creates_total``."""
        self._metrics.inc("audit_creates_total")

    def record(self, *, actor: str, caller: str | None, action: AuditAction, target: str,
               request_id: str, outcome: str) -> None:
        """Start writing one entry, stamped now, and return at once. ``caller``: whose own
        listing shows it (None: an operator acted; operators see every entry). Never
        raises: a lost entry is counted."""
        if len(self._running) >= self._s.max_pending:
            self._lost("overflow", action, request_id)
            return
        entry = AuditEntry(self._clock.now_ms(), request_id, actor, action, target,
                           request_id, outcome, caller)
        write = asyncio.ensure_future(self._store.append_audit([entry], self._s.retention_s))
        self._running.add(write)
        write.add_done_callback(lambda f: self._written(f, entry))

    def _written(self, write: asyncio.Future[None], e: AuditEntry) -> None:
        self._running.discard(write)
        if write.cancelled():
            self._lost("cancelled", e.action, e.request_id)
        elif (error := write.exception()) is not None:
            self._lost(str(error), e.action, e.request_id)
        else:
            self._metrics.inc("audit_entries_total")

    def _lost(self, why: str, action: AuditAction, request_id: str) -> None:
        # An entry lost is counted and logged, never raised: the request it records is done.
        self._metrics.inc("audit_write_failures_total")
        log.warning("audit_write_failed", action=action.value, audited_request=request_id,
                    error=why)

    async def drain(self) -> None:
        """Wait for the writes started so far (their failures are counted, not raised)."""
        while self._running:
            await asyncio.wait(list(self._running))

    def query(self, *, caller: str | None, since_ms: int | None = None,
              action: AuditAction | None = None, actor: str | None = None) -> AuditQuery:
        """A listing's query: from ``since_ms`` (default: the retention's start) to now.
        ``caller`` None: every entry (operators)."""
        now = self._clock.now_ms()
        start = now - self._s.retention_s * 1000
        return AuditQuery(caller, max(start, since_ms if since_ms is not None else start),
                          now, action, actor)

    async def list(self, query: AuditQuery, cursor: AuditCursor | None,
                   limit: int = DEFAULT_LIMIT) -> AuditPage:
        """Entries newest first (``AuditLog.list_audit``). Raises ``StoreError``."""
        return await self._store.list_audit(query, cursor, min(max(limit, 1), MAX_LIMIT))
