"""Dead letters, delivery attempts and bulk replay jobs: the values (no I/O).

A dead letter is one occurrence that will not be delivered again by itself: its id is the
occurrence id (``<trigger id>.<n>``, what the receiver deduplicates on). It is *open* until an
operator or its caller replays or purges it. The same occurrence may die again after a replay;
``dead_at_ms`` tells the two deaths apart (a replay job targets one of them, never the next).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trigger_service.core.model import Status, Trigger
from trigger_service.core.time.timing import DAY_MS

ERROR_MAX_CHARS = 500
EXCERPT_MAX_BYTES = 512


class DeadLetterReason(StrEnum):
    MAX_ATTEMPTS = "max_attempts"  # every attempt failed (or SQS gave up on a poison message)
    MAX_AGE = "max_age"  # the caller's max_age_s passed since the fire time
    GONE = "gone"  # the receiver answered 410
    CALLBACK_NOT_ALLOWED = "callback_not_allowed"  # the callers file no longer allows the URL
    BUDGET_EXHAUSTED = "budget_exhausted"  # a channel's daily_budget was spent: not sent
    RECIPIENT_DELETED = "recipient_deleted"  # its recipient profile was deleted
    EXPIRED = "expired"  # its deadline (expiresAt, maxLatenessSeconds) passed before a send
    ENDPOINT_DISABLED = "endpoint_disabled"  # its endpoint was disabled


class DeadLetterState(StrEnum):
    OPEN = "open"
    REPLAYED = "replayed"
    PURGED = "purged"


class JobStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"


class ItemState(StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


def with_reason(reason: DeadLetterReason, error: str | None) -> str | None:
    """The FAILED trigger's ``last_error``: the reason first (except the usual one, the
    attempts ran out), so that it can be recovered from the row alone (``reason_of``)."""
    if reason is DeadLetterReason.MAX_ATTEMPTS:
        return error
    return f"{reason.value}: {error}" if error else reason.value


def reason_of(last_error: str | None) -> DeadLetterReason:
    """The reason ``with_reason`` put in front of ``last_error`` (rows written before that
    prefix existed, and poison messages, count as ``max_attempts``)."""
    head = (last_error or "").partition(":")[0]
    try:
        return DeadLetterReason(head)
    except ValueError:
        return DeadLetterReason.MAX_ATTEMPTS


def truncate(text: str | None, max_chars: int = ERROR_MAX_CHARS) -> str | None:
    if text is None or len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + "…"


def excerpt(body: bytes) -> str | None:
    """At most ``EXCERPT_MAX_BYTES`` of a response body, as text (undecodable bytes replaced)."""
    if not body:
        return None
    return body[:EXCERPT_MAX_BYTES].decode("utf-8", errors="replace")


class AttemptOutcome(StrEnum):
    """What became of an occurrence by an attempt, as the dispatcher decided it: sent and
    ``delivered``; due again later (``retry``); a notification channel given up on
    (``failed``: the occurrence's other channels go on, and it is dead-lettered when they
    are done); the occurrence given up on and listed as a dead letter (``dead_lettered``);
    or not sent at all (``skipped``: an acknowledged occurrence's channel)."""

    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"
    SKIPPED = "skipped"


WEBHOOK = "webhook"  # the channel of an attempt at the callback URL


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery attempt, as the dispatcher that made it saw it. ``number``: its place
    among the trigger's attempts (``core.recent_attempts.attempt_number``: grows with every
    attempt, never the same for two of one trigger); ``outcome`` None: written before
    outcomes were (read from the per-occurrence history only)."""

    trigger_id: str
    occurrence_id: str
    attempt: int
    started_at_ms: int
    duration_ms: int
    status_code: int | None
    error: str | None
    response_excerpt: str | None
    dispatcher: str
    outcome: AttemptOutcome | None = None
    channel: str = WEBHOOK
    number: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    id: str  # the occurrence id
    trigger_id: str
    caller: str
    reason: DeadLetterReason
    last_error: str | None
    attempt_count: int
    dead_at_ms: int
    fire_at_ms: int
    callback_url: str
    state: DeadLetterState = DeadLetterState.OPEN
    resolved_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterFilters:
    """What a listing or a bulk replay asked for, before the use case turns it into a
    ``DeadLetterQuery`` (``DeadLetterService.query``). ``since_ms`` None: from the oldest
    dead letter that can still exist; ``until_ms`` None: until now; ``caller`` None: every
    caller (ops users)."""

    caller: str | None
    since_ms: int | None = None
    until_ms: int | None = None
    reason: DeadLetterReason | None = None
    callback_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterQuery:
    """Filters of a listing or a bulk replay, every bound an instant. ``caller`` None: every
    caller (ops users)."""

    caller: str | None
    since_ms: int
    until_ms: int
    reason: DeadLetterReason | None = None
    callback_prefix: str | None = None

    def matches(self, d: DeadLetter) -> bool:
        return ((self.reason is None or d.reason is self.reason)
                and (self.callback_prefix is None
                     or d.callback_url.startswith(self.callback_prefix))
                and (self.caller is None or d.caller == self.caller)
                and self.since_ms <= d.dead_at_ms <= self.until_ms)


# Where a listing goes on: (day, dead_at_ms, id) of the last entry read, exclusive.
DeadLetterCursor = tuple[int, int, str]


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    items: list[DeadLetter]
    next_cursor: DeadLetterCursor | None


@dataclass(frozen=True, slots=True)
class ReplayJob:
    job_id: str
    query: DeadLetterQuery
    created_at_ms: int
    total: int
    status: JobStatus = JobStatus.RUNNING
    done: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class JobItem:
    id: str  # the dead letter's
    dead_at_ms: int  # which death of it the job replays
    state: ItemState = ItemState.PENDING


def day_of(at_ms: int) -> int:
    """Days since the epoch (UTC): the listing's partition."""
    return at_ms // DAY_MS


def letter_for_failed(t: Trigger, now_ms: int) -> DeadLetter:
    """The dead letter of a FAILED one-time trigger, from its row alone (for the paths that
    find a FAILED row whose letter may not have been written: a crash in between). Finishing
    counted the occurrence, so the one that failed is ``occurrence_seq``."""
    assert t.status is Status.FAILED
    return DeadLetter(f"{t.trigger_id}.{max(1, t.occurrence_seq)}", t.trigger_id, t.caller,
                      reason_of(t.last_error), truncate(t.last_error), t.attempts, now_ms,
                      t.fire_at_ms, t.callback_url)
