"""The audit log's values: who did what to which thing, and how it was answered.

An entry is written once per mutating request of a caller or an operator (``app.audit``),
after the answer is decided, and never changed. Its ``actor`` is the caller's or the
operator's name from the callers file; ``scope`` says whose listing shows it: the caller's
own (``GET /v1/audit``) and always the operators' (``GET /v1/ops/audit``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

HOUR_MS = 3_600_000


class AuditAction(enum.StrEnum):
    """What a request did (snake case, as the API shows it)."""

    CREATE = "create"  # only with TRIGGER_AUDIT_CREATES (otherwise counted, not logged)
    CANCEL = "cancel"
    PATCH = "patch"  # PATCH /v1/triggers/{id} and its snooze
    PAUSE = "pause"
    RESUME = "resume"
    RUN = "run"
    BACKFILL = "backfill"
    REPLAY = "replay"
    PURGE = "purge"
    ROTATE_SECRET = "rotate_secret"
    RECIPIENT_PUT = "recipient_put"
    RECIPIENT_DELETE = "recipient_delete"
    ENDPOINT_ENABLE = "endpoint_enable"
    CALLER_PAUSE = "caller_pause"
    CALLER_RESUME = "caller_resume"
    SUBSCRIPTION_PUT = "subscription_put"
    SUBSCRIPTION_DELETE = "subscription_delete"


OUTCOME_OK = "ok"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited request. ``entry_id`` is unique (the request's id: fresh per request);
    ``caller`` is the caller whose own listing shows it (None: an operator's action, shown
    to operators only); ``outcome`` is ``ok`` or the error code the request was answered with."""

    at_ms: int
    entry_id: str
    actor: str
    action: AuditAction
    target: str
    request_id: str
    outcome: str
    caller: str | None


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """A listing's filters. ``caller`` None: every entry (operators); else only the entries
    of that caller's own listing. Bounds are instants, both inclusive."""

    caller: str | None
    since_ms: int
    until_ms: int
    action: AuditAction | None = None
    actor: str | None = None

    def matches(self, e: AuditEntry) -> bool:
        return ((self.caller is None or e.caller == self.caller)
                and (self.action is None or e.action is self.action)
                and (self.actor is None or e.actor == self.actor)
                and self.since_ms <= e.at_ms <= self.until_ms)


# Where a listing goes on: strictly older than (at_ms, entry_id). Opaque to clients.
AuditCursor = tuple[int, str]


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Entries newest first; ``next_cursor`` None: nothing more in the query's window. A
    page may be short (even empty) with a cursor: each call's work is bounded."""

    items: list[AuditEntry]
    next_cursor: AuditCursor | None


def hour_of(at_ms: int) -> int:
    """Hours since the epoch: the time part of the log's partitions."""
    return at_ms // HOUR_MS
