"""The audit log's boundary (``app.audit``): entries appended once, listed newest first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trigger_service.core.audit import AuditCursor, AuditEntry, AuditPage, AuditQuery


class AuditLog(Protocol):
    async def append_audit(self, entries: Sequence[AuditEntry], ttl_s: int) -> None:
        """Store ``entries`` for ``ttl_s``. Idempotent (an entry is keyed by its time and
        id): safe to retry. Raises ``StoreError``; callers treat it as best effort."""
        ...

    async def list_audit(self, query: AuditQuery, cursor: AuditCursor | None,
                         limit: int) -> AuditPage:
        """Up to ``limit`` entries matching ``query``, newest first, strictly older than
        ``cursor``. Bounded work per call: a page may be short with a cursor to go on; the
        cursor is None once the window is read to its start. Raises ``StoreError``."""
        ...
