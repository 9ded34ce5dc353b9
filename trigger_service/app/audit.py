"""The audit log's use cases: record who did what (best effort, after the answer is decided)
and list it (a caller its own entries, operators all). No HTTP here: the edge says who acted,
on what and how it was answered (``http.audit``).

Recording never fails nor delays the request it records: the write starts in the background
and the answer goes out. An entry is lost, and counted in ``audit_write_failures_total`` by
``reason``, when its write fails (``error``) or is cancelled (``cancelled``), when
``TRIGGER_AUDIT_MAX_PENDING`` are in flight (``overflow``: a slow Cassandra), or when its
caller already has its share of them in flight (``caller_share``: a fraction,
``CALLER_SHARE_DIVISOR``, so one caller's burst leaves room for the others' entries; an
operator's entries, caller None, are shared under the operator's actor). The store coalesces
concurrent entries into shared batches (``adapters.cassandra.audit``).
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter

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
# A caller's entries in flight: at most this fraction of ``max_pending`` (as
# ``platform.caller_events``' events waiting to be queued).
CALLER_SHARE_DIVISOR = 4

# Whose share an entry takes: ("caller", its caller), or ("operator", the acting operator).
Share = tuple[str, str]


class AuditTrail:
    def __init__(self, settings: AuditSettings, store: AuditLog, clock: Clock,
                 metrics: Metrics) -> None:
        self._s = settings
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._running: set[asyncio.Future[None]] = set()
        self._max_per_share = max(1, settings.max_pending // CALLER_SHARE_DIVISOR)
        self._by_share: Counter[Share] = Counter()  # entries in flight, dropped at zero

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
        raises: a lost entry is counted (the module docstring)."""
        share: Share = ("caller", caller) if caller is not None else ("operator", actor)
        if len(self._running) >= self._s.max_pending:
            self._lost("overflow", "", action, request_id)
            return
        if self._by_share[share] >= self._max_per_share:
            self._lost("caller_share", "", action, request_id)
            return
        entry = AuditEntry(self._clock.now_ms(), request_id, actor, action, target,
                           request_id, outcome, caller)
        write = asyncio.ensure_future(self._store.append_audit([entry], self._s.retention_s))
        self._running.add(write)
        self._by_share[share] += 1
        write.add_done_callback(functools.partial(self._written, share, entry))

    def _written(self, share: Share, e: AuditEntry, write: asyncio.Future[None]) -> None:
        self._running.discard(write)
        self._by_share[share] -= 1
        if self._by_share[share] <= 0:
            del self._by_share[share]  # an idle caller keeps no state
        if write.cancelled():
            self._lost("cancelled", "", e.action, e.request_id)
        elif (error := write.exception()) is not None:
            self._lost("error", str(error), e.action, e.request_id)
        else:
            self._metrics.inc("audit_entries_total")

    def _lost(self, reason: str, error: str, action: AuditAction, request_id: str) -> None:
        # An entry lost is counted and logged, never raised: the request it records is done.
        self._metrics.inc("audit_write_failures_total", reason=reason)
        log.warning("audit_write_failed", action=action.value, audited_request=request_id,
                    reason=reason, error=error or None)

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
