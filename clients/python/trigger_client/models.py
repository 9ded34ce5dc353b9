"""The answers of the trigger API as frozen dataclasses (times are aware UTC ``datetime``s).

Each model is built by ``from_json`` from the API's JSON and keeps that JSON, exactly as
received, in ``raw`` (not compared, not shown): ``triggerctl --output json`` prints it.
Treat ``raw`` and ``payload`` as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from trigger_client.errors import parse_instant

T = TypeVar("T")


def _opt_instant(value: Any) -> datetime | None:
    return parse_instant(value) if isinstance(value, str) else None


class Status(StrEnum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    FIRED = "FIRED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PAUSED = "PAUSED"


class Priority(StrEnum):
    """Among one caller's triggers due at the same time, ``HIGH`` ones are delivered before
    ``NORMAL`` ones, and those before ``LOW`` ones; the fair shares between callers are
    unchanged by it. A plain string (``"high"``) is taken wherever a ``Priority`` is."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; ``next_cursor`` is None on the last one."""

    items: tuple[T, ...]
    next_cursor: str | None
    raw: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Resolved:
    """How the API read a natural-language ``when``: the phrase, the first instant, the
    recurrence rule it implies (or None) and the zone it was read in."""

    when: str
    fire_at: datetime | None
    rrule: str | None
    time_zone: str | None

    @classmethod
    def from_json(cls, d: Any) -> Resolved | None:
        if not isinstance(d, Mapping):
            return None
        return cls(str(d.get("when", "")), _opt_instant(d.get("fireAt")), d.get("rrule"),
                   d.get("timeZone"))


@dataclass(frozen=True, slots=True)
class CreatedTrigger:
    """``POST /v1/triggers``'s answer; ``replayed`` when the Idempotency-Key had been used
    with the same body (nothing new was created)."""

    trigger_id: str
    fire_at: datetime
    next_fire_at: datetime
    status: Status
    replayed: bool = False
    resolved: Resolved | None = None
    snoozed_from: str | None = None
    raw: Any = field(default=None, compare=False, repr=False)
    # With ``debounce``: True when the create joined the key's open trigger (answered 200).
    debounced: bool | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any], replayed: bool = False) -> CreatedTrigger:
        return cls(d["triggerId"], parse_instant(d["fireAt"]), parse_instant(d["nextFireAt"]),
                   Status(d["status"]), replayed, Resolved.from_json(d.get("resolved")),
                   d.get("snoozedFrom"), d, d.get("debounced"))


@dataclass(frozen=True, slots=True)
class RunStarted:
    """``POST /v1/triggers/{id}/run``'s answer: the occurrence that fires now
    (``occurrence_id``, what the receiver deduplicates on) and the trigger that fires it
    (``run_trigger_id``: the one asked, or for a series or a paused trigger its one-time
    copy). ``replayed``: a retry with the Idempotency-Key, answered the first run."""

    trigger_id: str
    occurrence_id: str
    fire_at: datetime
    run_trigger_id: str
    replayed: bool = False
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], replayed: bool = False) -> RunStarted:
        return cls(d["triggerId"], d["occurrenceId"], parse_instant(d["fireAt"]),
                   d["runTriggerId"], replayed, d)


@dataclass(frozen=True, slots=True)
class CancelledTrigger:
    trigger_id: str
    status: Status
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CancelledTrigger:
        return cls(d["triggerId"], Status(d["status"]), d)


@dataclass(frozen=True, slots=True)
class DstPolicy:
    """How wall times in a DST gap (``shift``/``skip``) or overlap (``first``/``second``/
    ``both``) resolve."""

    gap: str = "shift"
    overlap: str = "first"

    def to_json(self) -> dict[str, str]:
        return {"gap": self.gap, "overlap": self.overlap}

    @classmethod
    def from_json(cls, d: Any) -> DstPolicy | None:
        if not isinstance(d, Mapping):
            return None
        return cls(d.get("gap", "shift"), d.get("overlap", "first"))


@dataclass(frozen=True, slots=True)
class ChannelState:
    """One channel's state for the current occurrence (the callback is ``http``, last)."""

    type: str
    status: str
    attempts: int
    last_error: str | None
    provider_code: str | None
    provider_message_id: str | None
    delivered_at: datetime | None
    due_at: datetime | None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ChannelState:
        return cls(d["type"], d["status"], d["attempts"], d.get("lastError"),
                   d.get("providerCode"), d.get("providerMessageId"),
                   _opt_instant(d.get("deliveredAt")), _opt_instant(d.get("dueAt")))


@dataclass(frozen=True, slots=True)
class Trigger:
    """A trigger as it is now (``GET /v1/triggers/{id}``, listings, PATCH)."""

    trigger_id: str
    status: Status
    fire_at: datetime
    created_at: datetime
    attempts: int
    last_error: str | None
    fired_at: datetime | None
    callback_url: str
    payload: Any
    time_zone: str | None
    local_time: str | None
    rrule: str | None
    cron: str | None
    dst_policy: DstPolicy | None
    exdates: tuple[str, ...] | None
    next_fire_at: datetime | None
    occurrences_fired: int
    snoozed_from: str | None
    channels: tuple[ChannelState, ...] | None
    acknowledged: bool | None
    jitter_s: int = 0  # each occurrence fires up to this late, on purpose
    scheduled_at: datetime | None = None  # fire_at minus this occurrence's jitter
    recipient: str | None = None  # the recipient profile it is for
    resolved_time_zone: str | None = None  # the zone its current occurrence was resolved in
    raw: Any = field(default=None, compare=False, repr=False)
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # A series' catch-up policy as the API shows it ({"policy", "windowSeconds"}; None for a
    # one-time trigger): ``trigger_client.pausing.CatchUp.from_json`` reads it.
    catch_up: Mapping[str, Any] | None = None
    # Deadlines: no occurrence is sent after ``expires_at``, nor more than ``max_lateness_s``
    # after its fire time (past either it is dead-lettered ``expired``); None: no such bound.
    expires_at: datetime | None = None
    max_lateness_s: int | None = None
    flow_control: FlowControl | None = None  # its own; None: none of its own
    priority: Priority = Priority.NORMAL  # among the caller's triggers due at one time

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Trigger:
        channels = d.get("channels")
        exdates = d.get("exdates")
        return cls(
            d["triggerId"], Status(d["status"]), parse_instant(d["fireAt"]),
            parse_instant(d["createdAt"]), d["attempts"], d.get("lastError"),
            _opt_instant(d.get("firedAt")), d.get("callbackUrl", ""), d.get("payload"),
            d.get("timeZone"), d.get("localTime"), d.get("rrule"), d.get("cron"),
            DstPolicy.from_json(d.get("dstPolicy")),
            tuple(exdates) if isinstance(exdates, list) else None,
            _opt_instant(d.get("nextFireAt")), d.get("occurrencesFired", 0),
            d.get("snoozedFrom"),
            tuple(ChannelState.from_json(c) for c in channels)
            if isinstance(channels, list) else None,
            d.get("acknowledged"), d.get("jitterSeconds", 0),
            _opt_instant(d.get("scheduledAt")), d.get("recipient"), d.get("resolvedTimeZone"),
            raw=d, tags=tuple(d.get("tags") or ()), labels=dict(d.get("labels") or {}),
            catch_up=d.get("catchUp"), expires_at=_opt_instant(d.get("expiresAt")),
            max_lateness_s=d.get("maxLatenessSeconds"),
            flow_control=FlowControl.from_json(d.get("flowControl")),
            # A server from before priorities shows none: normal is what it does.
            priority=Priority(d.get("priority") or Priority.NORMAL))


@dataclass(frozen=True, slots=True)
class Preview:
    """The first occurrences of a schedule (nothing stored)."""

    occurrences: tuple[datetime, ...]
    resolved: Resolved | None = None
    jittered: tuple[JitteredOccurrence, ...] = ()  # with jitter_s: each one's window
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Preview:
        return cls(tuple(parse_instant(o) for o in d["occurrences"]),
                   Resolved.from_json(d.get("resolved")),
                   tuple(JitteredOccurrence.from_json(j) for j in d.get("jittered") or ()),
                   raw=d)


@dataclass(frozen=True, slots=True)
class JitteredOccurrence:
    """A previewed occurrence with jitter: it fires between ``scheduled_at`` and
    ``latest_at``; ``fire_at`` is the exact instant when the trigger's id was known (the
    preview was sent with the Idempotency-Key the create will carry), else None."""

    scheduled_at: datetime
    fire_at: datetime | None
    latest_at: datetime

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JitteredOccurrence:
        return cls(parse_instant(d["scheduledAt"]), _opt_instant(d.get("fireAt")),
                   parse_instant(d["latestAt"]))


@dataclass(frozen=True, slots=True)
class AckResult:
    trigger_id: str
    acknowledged: bool
    status: Status
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AckResult:
        return cls(d["triggerId"], bool(d["acknowledged"]), Status(d["status"]), d)


@dataclass(frozen=True, slots=True)
class SigningSecret:
    """A new current signing secret (shown once); the previous ones sign until
    ``previous_valid_until``."""

    secret: str = field(repr=False)
    created_at: datetime
    previous_valid_until: datetime
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SigningSecret:
        return cls(d["secret"], parse_instant(d["createdAt"]),
                   parse_instant(d["previousValidUntil"]), d)


@dataclass(frozen=True, slots=True)
class Debounce:
    """Debounce on create (``debounce``): while a pending trigger of the caller with this
    ``key`` exists, a create joins it (``CreatedTrigger.debounced``) instead of making
    another: ``"replace"`` gives it the new payload and fire time (never later than
    ``max_wait_s`` after the first request), ``"keep"`` leaves it as it is."""

    key: str
    mode: str = "replace"
    max_wait_s: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "mode": self.mode}
        if self.max_wait_s is not None:
            out["maxWaitSeconds"] = self.max_wait_s
        return out


@dataclass(frozen=True, slots=True)
class FlowControl:
    """Flow control per destination (``flowControl``): the deliveries of every trigger with
    the same ``key`` start at most ``rate_per_second`` a second, at most ``parallelism``
    open at once (at least one of the two)."""

    key: str
    rate_per_second: float | None = None
    parallelism: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key}
        if self.rate_per_second is not None:
            out["ratePerSecond"] = self.rate_per_second
        if self.parallelism is not None:
            out["parallelism"] = self.parallelism
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> FlowControl | None:
        if not d:
            return None
        return cls(d["key"], d.get("ratePerSecond"), d.get("parallelism"))
