"""``AuditLog`` in memory, for unit tests: mixed into ``MemoryStore``, which provides
``_enter`` (call counting and injected failures)."""

from __future__ import annotations

from collections.abc import Sequence

from trigger_service.core.audit import AuditCursor, AuditEntry, AuditPage, AuditQuery


class MemoryAuditLog:
    audit_entries: dict[tuple[int, str], AuditEntry]

    def _init_audit(self) -> None:
        self.audit_entries = {}

    def _enter(self, name: str) -> None:  # provided by MemoryStore
        raise NotImplementedError

    async def append_audit(self, entries: Sequence[AuditEntry], ttl_s: int) -> None:
        self._enter("append_audit")
        for e in entries:
            self.audit_entries[(e.at_ms, e.entry_id)] = e

    async def list_audit(self, query: AuditQuery, cursor: AuditCursor | None,
                         limit: int) -> AuditPage:
        self._enter("list_audit")
        keys = sorted((k for k, e in self.audit_entries.items()
                       if query.matches(e) and (cursor is None or k < cursor)), reverse=True)
        items = [self.audit_entries[k] for k in keys[:limit]]
        more = len(keys) > limit
        return AuditPage(items, (items[-1].at_ms, items[-1].entry_id) if more else None)
