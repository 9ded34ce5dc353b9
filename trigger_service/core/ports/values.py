"""The values the ports of ``core.ports`` take and answer: the trigger store's (a due-index
entry, a keyed creation, a page of a listing and its cursor), the queue's (a message sent, a
message received, a visibility change) and the delivery channel's (a delivery's result).
Frozen: each is a value, never updated in place."""

from __future__ import annotations

from dataclasses import dataclass, field

from trigger_service.core.model import Priority, Route, Trigger


# --- the trigger store --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BucketEntry:
    """One due-index entry: which trigger fires when, in which shard, enqueued by whom."""

    trigger_id: str
    fire_at_ms: int
    shard: int
    route: Route
    # Where its row is (None: an earlier release's row); not part of the entry's identity.
    home_at_ms: int | None = field(default=None, compare=False)


ListCursor = tuple[int, int, str]  # (month, fire ms, id); newest first: (0, created ms, id)
NEWEST: ListCursor = (0, 2**63 - 1, "")  # where the newest-first order starts


@dataclass(frozen=True, slots=True)
class KeyedCreation:
    """What ``TriggerCatalog.create_keyed`` left: the id's one row, and whether this call
    wrote it."""

    trigger: Trigger
    created: bool


@dataclass(frozen=True, slots=True)
class ListPage:
    triggers: list[Trigger]
    next_cursor: ListCursor | None


# --- the queue ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """Hints, not the message's value: its row's home (one read), its caller (fair shares)."""

    trigger_id: str
    fire_at_ms: int
    delay_s: int
    home_at_ms: int | None = field(default=None, compare=False)
    shard: int | None = field(default=None, compare=False)
    caller: str | None = field(default=None, compare=False)
    # Its lane (high has lanes of its own, ``core.lanes``) and its order in the dispatcher.
    priority: Priority = field(default=Priority.NORMAL, compare=False)

    @classmethod
    def of(cls, t: Trigger, delay_s: int) -> OutgoingMessage:
        """The message for ``t``'s current occurrence, sent with ``delay_s``."""
        return cls(t.trigger_id, t.fire_at_ms, delay_s, t.home_at_ms,
                   t.shard if t.home_at_ms is not None else None, t.caller, t.priority)


@dataclass(frozen=True, slots=True)
class VisibilityChange:
    """Hide a received message for ``visibility_s`` from now (0: show it again now)."""

    receipt_handle: str
    visibility_s: int


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    message_id: str
    receipt_handle: str
    trigger_id: str  # "" for a body that could not be parsed
    fire_at_ms: int
    receive_count: int
    home_at_ms: int | None = None  # hints (OutgoingMessage), if the body says
    shard: int | None = None
    caller: str | None = None
    priority: Priority = Priority.NORMAL  # the body's (normal when it names none)


# --- delivery -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeliveryResult:
    ok: bool
    status_code: int | None
    error: str | None
    retry_after_s: float | None = None  # the receiver's Retry-After (429/503), in seconds
    response_excerpt: str | None = None  # the start of the answer's body (attempt history)
    # Not sent: the SSRF guard refused the address (permanent: callback_not_allowed).
    refused: bool = False

    @property
    def gone(self) -> bool:
        """410: the receiver says it will never want this; no retry."""
        return self.status_code == 410

    @property
    def origin_failed(self) -> bool:
        """Does this answer show the origin in trouble (for its circuit breaker)? No answer,
        5xx or 429 do; any other answer (2xx, 4xx including 410) shows it up."""
        code = self.status_code
        return not self.ok and not self.refused and (code is None or code >= 500
                                                     or code == 429)
