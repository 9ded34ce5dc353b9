"""The answers about the API's resources beside a trigger itself, as frozen dataclasses (see
:mod:`trigger_client.models` for the conventions): a batch's items, dead letters and their
replays, trigger and replay jobs, the inbox, recipients, and the ops answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trigger_client.errors import parse_instant
from trigger_client.models import Status


def _opt_instant(value: Any) -> datetime | None:
    return parse_instant(value) if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class BatchItemResult:
    """One item's answer in ``triggers.create_batch``: ``status`` 201 (created), 200 (a
    replay of its key: ``replayed``) with ``trigger_id`` and ``fire_at``; else the error the
    single create would have raised, as ``error``, ``message``, ``error_field`` (and
    ``retry_after_s`` for a 429)."""

    index: int
    status: int
    trigger_id: str | None = None
    fire_at: datetime | None = None
    replayed: bool = False
    error: str | None = None
    message: str | None = None
    error_field: str | None = None  # the API's "field": which field of the item was wrong
    retry_after_s: int | None = None
    raw: Any = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        """Registered now or before (201 or 200)."""
        return self.status < 300

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BatchItemResult:
        return cls(d["index"], d["status"], d.get("triggerId"), _opt_instant(d.get("fireAt")),
                   bool(d.get("replayed")), d.get("error"), d.get("message"), d.get("field"),
                   d.get("retryAfter"), d)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery attempt of a dead occurrence."""

    attempt: int
    at: datetime
    duration_ms: int
    status_code: int | None
    error: str | None
    response_excerpt: str | None
    dispatcher: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Attempt:
        return cls(d["attempt"], parse_instant(d["at"]), d["durationMs"], d.get("statusCode"),
                   d.get("error"), d.get("responseExcerpt"), d["dispatcher"])


@dataclass(frozen=True, slots=True)
class TriggerAttempt:
    """One delivery attempt of a trigger (``attempts``): ``outcome`` is what became of its
    occurrence by it: ``delivered``, ``retry``, ``failed`` (a notification channel given up
    on), ``dead_lettered`` or ``skipped``; ``channel`` is ``webhook`` for the callback URL."""

    occurrence_id: str
    attempt: int
    channel: str
    started_at: datetime
    duration_ms: int
    outcome: str
    status_code: int | None
    error: str | None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TriggerAttempt:
        return cls(d["occurrenceId"], d["attempt"], d["channel"], parse_instant(d["startedAt"]),
                   d["durationMs"], d["outcome"], d.get("statusCode"), d.get("error"))


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter as listed; the detail view adds ``state``, ``payload``, ``attempts``."""

    id: str
    trigger_id: str
    occurrence_id: str
    caller: str
    reason: str
    last_error: str | None
    attempt_count: int
    dead_at: datetime
    fire_at: datetime
    callback_url: str
    state: str | None = None
    resolved_at: datetime | None = None
    trigger_status: Status | None = None
    payload: Any = None
    attempts: tuple[Attempt, ...] = ()
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DeadLetter:
        status = d.get("triggerStatus")
        return cls(d["id"], d["triggerId"], d["occurrenceId"], d["caller"], d["reason"],
                   d.get("lastError"), d["attemptCount"], parse_instant(d["deadAt"]),
                   parse_instant(d["fireAt"]), d["callbackUrl"], d.get("state"),
                   _opt_instant(d.get("resolvedAt")), Status(status) if status else None,
                   d.get("payload"),
                   tuple(Attempt.from_json(a) for a in d.get("attempts") or ()), d)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """One replayed dead letter: ``trigger_id`` delivers it (a new one for a series)."""

    id: str
    trigger_id: str
    status: Status
    fire_at: datetime
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplayResult:
        return cls(d["id"], d["triggerId"], Status(d["status"]), parse_instant(d["fireAt"]), d)


@dataclass(frozen=True, slots=True)
class PurgeResult:
    id: str
    purged: bool
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PurgeResult:
        return cls(d["id"], bool(d["purged"]), d)


@dataclass(frozen=True, slots=True)
class TriggerJob:
    """A job over the triggers a filter matches (``cancel``, ``pause``, ``resume``) or a
    series' backfill (``backfill``: its series and range, ``matched`` its occurrences):
    ``done`` + ``failed`` of ``matched`` so far; ``finished`` once ``state`` is ``done``."""

    job_id: str
    action: str
    state: str
    filter: Mapping[str, str]
    policy: str | None
    matched: int
    done: int
    failed: int
    created_at: datetime
    backfill: Mapping[str, Any] | None = None  # triggerId, from, to, paceMs
    raw: Any = field(default=None, compare=False, repr=False)

    @property
    def finished(self) -> bool:
        return self.state == "done"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TriggerJob:
        return cls(d["jobId"], d["action"], d["state"], dict(d.get("filter") or {}),
                   d.get("policy"), d["matched"], d["done"], d["failed"],
                   parse_instant(d["createdAt"]), d.get("backfill"), d)


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """A bulk replay: ``done`` + ``failed`` of ``total`` so far; ``finished`` once
    ``status`` is ``done``."""

    job_id: str
    status: str
    total: int
    done: int
    failed: int
    created_at: datetime
    reason: str | None
    since: datetime | None
    until: datetime | None
    callback_prefix: str | None
    caller: str | None
    raw: Any = field(default=None, compare=False, repr=False)

    @property
    def finished(self) -> bool:
        return self.status == "done"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplayJob:
        f = d.get("filters") or {}
        return cls(d["jobId"], d["status"], d["total"], d["done"], d["failed"],
                   parse_instant(d["createdAt"]), f.get("reason"),
                   _opt_instant(f.get("since")), _opt_instant(f.get("until")),
                   f.get("callbackPrefix"), f.get("caller"), d)


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """One inbox message; the acknowledgement link is ``data["ackUrl"]``."""

    message_id: str
    trigger_id: str
    occurrence_id: str
    title: str
    body: str
    data: Any
    created_at: datetime
    read_at: datetime | None
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InboxMessage:
        return cls(d["messageId"], d["triggerId"], d["occurrenceId"], d["title"], d["body"],
                   d.get("data"), parse_instant(d["createdAt"]), _opt_instant(d.get("readAt")),
                   d)


@dataclass(frozen=True, slots=True)
class Breaker:
    origin: str
    state: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class OpsOverview:
    """What the people on call look at (ops tokens only). Queue depths are None when SQS
    does not answer; lag percentiles None when nothing fired in the window."""

    counters: Mapping[str, int]
    dead_letters_by_reason: Mapping[str, int]
    queue_main: int | None
    queue_dead_letter: int | None
    breakers: tuple[Breaker, ...]
    lag_window_s: int
    lag_count: int
    lag_p50_ms: float | None
    lag_p95_ms: float | None
    lag_p99_ms: float | None
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpsOverview:
        lag, queues = d["lag"], d["queues"]
        return cls(dict(d["counters"]), dict(d["deadLetters"]["byReason"]), queues.get("main"),
                   queues.get("deadLetter"),
                   tuple(Breaker(b["origin"], b["state"], parse_instant(b["updatedAt"]))
                         for b in d["breakers"]),
                   lag["windowS"], lag["count"], lag.get("p50Ms"), lag.get("p95Ms"),
                   lag.get("p99Ms"), d)


@dataclass(frozen=True, slots=True)
class Health:
    """``/healthz`` or ``/readyz``: ``ok``, and for readiness the dependencies ``down``."""

    ok: bool
    status_code: int
    down: tuple[str, ...] = ()
    raw: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Recipient:
    """A recipient profile (``/v1/recipients/{id}``): home zone, quiet hours, addresses,
    the ordered channel preference, the locale, the Telegram chat (a numeric chat id or a
    channel's ``@username``)."""

    recipient_id: str
    time_zone: str
    quiet_hours: Mapping[str, str] | None = None
    email: tuple[str, ...] | None = None
    phone: str | None = None
    push_tokens: tuple[str, ...] | None = None
    inbox: str | None = None
    channels: tuple[str, ...] = ()
    locale: str | None = None
    raw: Any = field(default=None, compare=False, repr=False)
    telegram: int | str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Recipient:
        email, tokens = d.get("email"), d.get("pushTokens")
        return cls(d["recipientId"], d["timeZone"], d.get("quietHours"),
                   tuple(email) if email else None, d.get("phone"),
                   tuple(tokens) if tokens else None, d.get("inbox"),
                   tuple(d.get("channels") or ()), d.get("locale"), d,
                   telegram=d.get("telegram"))

    def to_json(self) -> dict[str, Any]:
        """The PUT body (the fields set)."""
        body: dict[str, Any] = {"timeZone": self.time_zone}
        for key, value in (("quietHours", self.quiet_hours), ("phone", self.phone),
                           ("email", list(self.email) if self.email else None),
                           ("pushTokens", list(self.push_tokens) if self.push_tokens else None),
                           ("inbox", self.inbox), ("locale", self.locale),
                           ("channels", list(self.channels) or None),
                           ("telegram", self.telegram)):
            if value is not None:
                body[key] = value
        return body


@dataclass(frozen=True, slots=True)
class RecipientPage:
    items: tuple[Recipient, ...]
    next_after: str | None  # pass as ``after`` for the next page


@dataclass(frozen=True, slots=True)
class RecipientDeleted:
    recipient_id: str
    triggers_failed: int  # its pending triggers ended FAILED (recipient_deleted)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited request (``audit``, ``ops.audit``): who (``actor``: a caller's or an
    operator's name) did what (``action``, e.g. ``cancel``) to which thing (``target``), in
    which request, and how it was answered (``outcome``: ``ok`` or the error code)."""

    at: datetime
    actor: str
    action: str
    target: str
    request_id: str
    outcome: str
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AuditEntry:
        return cls(parse_instant(d["at"]), d["actor"], d["action"], d["target"],
                   d["requestId"], d["outcome"], d)
