"""A caller's ``max_pending``: how many of its triggers may wait to fire at once.

What counts (``core.ports.limit.PendingQuota``, a Redis sorted set shared by the API
processes): a one-time trigger from its registration until its fire time; a recurring series
from its registration until it is cancelled. Registration reserves the new trigger's place
before anything is written (a failed write gives it back; an idempotent replay writes nothing
and takes none), cancel gives it back. It is an approximation, kept honest by what it cannot
drift on, and documented in docs/operations/limits.md ("Rate limits"):

- a one-time trigger stops counting at its fire time, not when its retries end, and an edit
  that moves it later does not move its count;
- a series that ends by its own rule (COUNT, UNTIL) keeps counting until it is cancelled; a
  DELETE on it (even one answered 409 because it has finished) releases it;
- triggers registered while Redis was unreachable, or before a limit was set, are not counted.

When Redis fails the registration goes through (fail open) and ``quota_errors_total`` counts it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from trigger_service.core.errors import CacheError, QuotaExceeded
from trigger_service.core.model import Trigger
from trigger_service.core.ports import Metrics
from trigger_service.core.ports.limit import PendingQuota

log = structlog.get_logger(__name__)

# A series counts until cancelled: a score beyond any fire time (exact in a double).
SERIES_UNTIL_MS = 2**53 - 1


class QuotaGate:
    def __init__(self, quota: PendingQuota, max_pending_of: Callable[[str], int | None],
                 metrics: Metrics) -> None:
        self._quota = quota
        self._max_of = max_pending_of
        self._metrics = metrics

    async def reserve(self, t: Trigger, now_ms: int) -> bool:
        """Count ``t`` against its caller's ``max_pending``; True if it was counted (so a
        failed registration must ``release`` it). Raises ``QuotaExceeded`` when full."""
        limit = self._max_of(t.caller)
        if limit is None:
            return False
        recurring = t.schedule is not None and t.schedule.recurring
        until_ms = SERIES_UNTIL_MS if recurring else t.fire_at_ms
        try:
            ok = await self._quota.reserve(t.caller, t.trigger_id, until_ms, limit, now_ms)
        except CacheError as e:
            self._metrics.inc("quota_errors_total")
            log.warning("quota_unavailable", caller=t.caller, error=str(e))
            return False
        if not ok:
            self._metrics.inc("quota_exceeded_total", caller=t.caller)
            raise QuotaExceeded(f"at most {limit} pending triggers per caller; cancel some or "
                                "wait for them to fire")
        return True

    async def release(self, caller: str, trigger_id: str) -> None:
        """Stop counting ``trigger_id``. Never raises: a failure only leaves it counted
        until its fire time."""
        if self._max_of(caller) is None:
            return
        try:
            await self._quota.release(caller, trigger_id)
        except CacheError as e:
            self._metrics.inc("quota_errors_total")
            log.warning("quota_release_failed", caller=caller, error=str(e))
