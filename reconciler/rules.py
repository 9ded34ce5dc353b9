"""The reconciler's one rule, pure: which triggers count as leaked."""

from __future__ import annotations

from trigger_service.core.model import Status, Trigger


def is_leak(t: Trigger, now_ms: int, *, grace_ms: int, callback_timeout_ms: int) -> bool:
    """Should this trigger be re-sent? PENDING more than ``grace_ms`` past its due time, or
    IN_FLIGHT with a claim that went stale more than ``grace_ms`` ago."""
    if t.status is Status.PENDING:
        return t.due_at_ms() < now_ms - grace_ms
    if t.status is Status.IN_FLIGHT:
        return t.claim_stale_at_ms(callback_timeout_ms) < now_ms - grace_ms
    return False
