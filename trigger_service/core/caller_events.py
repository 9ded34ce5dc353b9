"""Events to the caller: what a caller's event subscriptions are, what an event is, and how
it is addressed and signed. Pure: no I/O.

A subscription (``PUT /v1/event-subscriptions/{name}``) is a URL under one of the caller's
callback prefixes and the event types it wants. Every event is POSTed, signed like a
callback (Standard Webhooks), as ``{"type", "at", "data"}``; its ``webhook-id`` is the
event's id (``CallerEvent.event_id``), derived from its type and what it is about (an
occurrence, a series, an endpoint's change), so every send of one event, and every copy of it
emitted again after a crash, carries the same id: receivers dedupe on it.

The types:

- ``trigger.fired``: an occurrence delivered (a 2xx). Opt-in: sent only to subscriptions
  that list it (it is one event per delivery);
- ``trigger.dead_lettered``: an occurrence given up on and listed as a dead letter (any
  reason: attempts spent, 410, expired, endpoint disabled, ...);
- ``trigger.failed``: the trigger itself ended ``failed`` (a one-time trigger's occurrence
  dead-lettered, or a series ended by a failure); comes with the dead letter's event;
- ``series.finished``: a series ended (its rule, ``until`` or ``count`` has no next
  occurrence, or it ended failed): ``data.status`` says which;
- ``endpoint.disabled``, ``endpoint.enabled``: one of the caller's callback origins was
  disabled after failing without a break, or enabled again (``core.endpoint_health``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trigger_service.core.dead_letters import truncate
from trigger_service.core.endpoint_health import OpsEvent, OpsEventType
from trigger_service.core.model import Trigger
from trigger_service.core.time.timing import format_rfc3339_ms

# A subscription's name: what the caller calls it (a path segment).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
NAME_MAX_CHARS = 64
URL_MAX_CHARS = 2048


class EventType(StrEnum):
    TRIGGER_FIRED = "trigger.fired"
    TRIGGER_FAILED = "trigger.failed"
    TRIGGER_DEAD_LETTERED = "trigger.dead_lettered"
    SERIES_FINISHED = "series.finished"
    ENDPOINT_DISABLED = "endpoint.disabled"
    ENDPOINT_ENABLED = "endpoint.enabled"


EVENT_TYPES: tuple[str, ...] = tuple(t.value for t in EventType)


def parse_event_types(raw: Iterable[str]) -> frozenset[EventType] | str:
    """The types named (a set: repeats are one), or the first unknown name."""
    out: set[EventType] = set()
    for name in raw:
        try:
            out.add(EventType(name))
        except ValueError:
            return name
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Subscription:
    """One of a caller's subscriptions: ``url`` (normalised, under a callback prefix of the
    caller) gets the events of ``events``."""

    caller: str
    name: str
    url: str
    events: frozenset[EventType]
    created_at_ms: int
    updated_at_ms: int

    def wants(self, event_type: EventType) -> bool:
        return event_type in self.events


@dataclass(frozen=True, slots=True)
class CallerEvent:
    """One event of ``caller``: ``subject`` is what it is about (an occurrence id, a
    trigger id, ``origin@ms``), which with ``type`` makes its id; ``data_json`` its
    ``data`` object, as JSON (a value: never a dict to change)."""

    type: EventType
    caller: str
    subject: str
    at_ms: int
    data_json: str

    @property
    def event_id(self) -> str:
        """The same for every copy and send of this event: the ``webhook-id``."""
        raw = f"{self.type.value}|{self.caller}|{self.subject}".encode()
        return "evt_" + hashlib.sha256(raw).hexdigest()[:32]

    def body(self) -> str:
        """What is POSTed (and signed): ``{"type", "at", "data"}``."""
        return ('{"type":' + json.dumps(self.type.value) + ',"at":'
                + json.dumps(format_rfc3339_ms(self.at_ms)) + ',"data":' + self.data_json + "}")

    @classmethod
    def of(cls, type_: EventType, caller: str, subject: str, at_ms: int,
           data: Mapping[str, Any]) -> CallerEvent:
        return cls(type_, caller, subject, at_ms,
                   json.dumps(dict(data), separators=(",", ":"), ensure_ascii=False))


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """An event on its way to one subscription (the event queue's message)."""

    subscription: str  # its name, of the event's caller
    event: CallerEvent


@dataclass(frozen=True, slots=True)
class FailedEvent:
    """An event given up on for a subscription (attempts spent, 410, or its URL no longer
    allowed): listed on ``GET /v1/event-subscriptions/{name}/failures`` for the retention.
    Never an event itself: a failed event is not announced."""

    caller: str
    subscription: str
    event_id: str
    type: EventType
    at_ms: int
    failed_at_ms: int
    attempts: int
    last_error: str | None
    data_json: str


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """An event's sends for one subscription: at most ``max_attempts``, the n-th failure
    followed by a wait of ``backoff_s[n - 1]`` (the last one repeated)."""

    max_attempts: int
    backoff_s: tuple[int, ...]

    def wait_s(self, attempts: int) -> int | None:
        """Seconds before the next send after ``attempts`` failed ones (None: give up)."""
        if attempts >= self.max_attempts or not self.backoff_s:
            return None
        return self.backoff_s[min(attempts, len(self.backoff_s)) - 1]


def ms(at_ms: int | None) -> str | None:
    return None if at_ms is None else format_rfc3339_ms(at_ms)


# --- the events, from what the dispatcher decided ------------------------------------------
def _trigger_data(t: Trigger, **more: Any) -> dict[str, Any]:
    """What every trigger event says about its occurrence (what the caller sees of it in
    the API: nothing of its payload)."""
    return {"triggerId": t.trigger_id, "occurrenceId": t.occurrence_id,
            "fireAt": format_rfc3339_ms(t.fire_at_ms), "attempts": t.attempts,
            "callbackUrl": t.callback_url, "tags": list(t.tags), **more}


def fired(t: Trigger, status_code: int | None, at_ms: int) -> CallerEvent:
    """``t``'s occurrence delivered (``t`` as claimed)."""
    return CallerEvent.of(EventType.TRIGGER_FIRED, t.caller, t.occurrence_id, at_ms,
                          _trigger_data(t, statusCode=status_code))


def dead_lettered(t: Trigger, reason: str, error: str | None, at_ms: int) -> CallerEvent:
    """``t``'s occurrence given up on and listed as a dead letter (``reason``: its
    ``DeadLetterReason``)."""
    return CallerEvent.of(EventType.TRIGGER_DEAD_LETTERED, t.caller, t.occurrence_id, at_ms,
                          _trigger_data(t, reason=reason, lastError=truncate(error)))


def failed(t: Trigger, reason: str, error: str | None, at_ms: int) -> CallerEvent:
    """The trigger ``t`` (as it was before) ended FAILED. One per trigger: its id is the
    subject."""
    return CallerEvent.of(EventType.TRIGGER_FAILED, t.caller, t.trigger_id, at_ms,
                          _trigger_data(t, reason=reason, lastError=truncate(error)))


def series_finished(t: Trigger, *, fired_last: bool, at_ms: int) -> CallerEvent:
    """The series ``t`` (as it was before its last occurrence finished) ended: ``status``
    ``fired`` when its rule has no next occurrence, ``failed`` when it ended failing."""
    return CallerEvent.of(EventType.SERIES_FINISHED, t.caller, t.trigger_id, at_ms, {
        "triggerId": t.trigger_id, "lastOccurrenceId": t.occurrence_id,
        "status": "fired" if fired_last else "failed",
        "occurrencesFired": t.occurrences_fired + (1 if fired_last else 0),
        "tags": list(t.tags)})


def endpoint_changed(e: OpsEvent) -> CallerEvent:
    """An operators' endpoint event, as its caller's (the same id for every copy)."""
    kind = (EventType.ENDPOINT_DISABLED if e.type is OpsEventType.DISABLED
            else EventType.ENDPOINT_ENABLED)
    return CallerEvent.of(kind, e.caller, f"{e.origin}@{e.at_ms}", e.at_ms, {
        "origin": e.origin, "failingSince": ms(e.since_ms), "failures": e.failures,
        "lastError": truncate(e.last_error), "by": e.by})
