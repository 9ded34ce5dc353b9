"""A trigger's recent delivery attempts, newest first (no HTTP here).

Scope: a caller reads its own triggers' attempts only (another caller's trigger is
``NotFound``, exactly like an unknown id: ``TriggerService.get``). What is kept, and how a
page goes on: ``core.recent_attempts``.
"""

from __future__ import annotations

from trigger_service.app.triggers import TriggerService
from trigger_service.config.settings import Settings
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.ports.history import AttemptLog
from trigger_service.core.recent_attempts import AttemptKey, AttemptPage, newest_first, page

DEFAULT_LIMIT = 50


class AttemptHistory:
    def __init__(self, settings: Settings, store: AttemptLog, triggers: TriggerService) -> None:
        self._kept = settings.attempts_kept
        self._store = store
        self._triggers = triggers

    @property
    def max_limit(self) -> int:
        """The largest page: every attempt a trigger keeps (``TRIGGER_ATTEMPTS_KEPT``)."""
        return self._kept

    async def recent(self, caller: str, trigger_id: str, limit: int | None,
                     after: AttemptKey | None) -> AttemptPage:
        """Up to ``limit`` (None: ``DEFAULT_LIMIT``, or fewer if fewer are kept) of the
        trigger's kept attempts, newest first, after the cursor ``after``. Raises
        ``NotFound`` (unknown, or another caller's), ``InvalidRequest`` naming ``limit``
        (outside 1 to ``max_limit``), ``StoreError``. Reads only."""
        if limit is None:
            limit = min(DEFAULT_LIMIT, self._kept)
        elif not 1 <= limit <= self._kept:
            raise InvalidRequest(f"limit: 1 to {self._kept}", field="limit")
        await self._triggers.get(caller, trigger_id)  # ownership first: NotFound
        found = await self._store.recent_attempts(trigger_id)
        return page(newest_first(found, self._kept), after, limit)
