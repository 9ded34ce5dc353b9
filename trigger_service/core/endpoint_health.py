"""Endpoint health: per (caller, callback origin), a record of consecutive failure
since the first failure, the rules that turn it into a disabled endpoint, and the operators'
events about it. Pure: every "now" is an argument.

A failure is an attempt whose answer shows the origin in trouble
(``DeliveryResult.origin_failed``: no answer, 5xx, 429), never a refused URL. The record is
made at the first failure (healthy → failing), then rewritten at most every
``write_every_ms`` per origin and process while failures go on, so a herd of failures costs
a few writes, not one per attempt; ``failures`` is then at least what any one dispatcher
counted (processes do not add up each other's counts). A success deletes a failing record;
a disabled one stays disabled until someone enables it (``app.endpoints``).

After ``disable_after_s`` of continuous failure the endpoint is DISABLED: the dispatchers
park its caller's due occurrences (PAUSED) or fail them with a dead letter, per the
caller's ``on_disabled``, with ``last_error`` ``ENDPOINT_DISABLED``, so the replay on enable
finds them again: a parked trigger through its ``ParkedTrigger`` entry of the (caller,
origin), written before it is PAUSED, a dead letter by its reason.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from trigger_service.core.dead_letters import DeadLetterReason
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.core.urls import UrlError, normalise_callback_url

# ``last_error`` of an occurrence parked for a disabled endpoint (the marker the replay reads).
ENDPOINT_DISABLED = DeadLetterReason.ENDPOINT_DISABLED.value
ERROR_MAX_CHARS = 500


class EndpointState(StrEnum):
    FAILING = "failing"
    DISABLED = "disabled"


class OnDisabled(StrEnum):
    """What a caller's due occurrences for a disabled endpoint become (callers file)."""

    HOLD = "hold"  # parked: PAUSED (resumed by the replay on enable); the value is a setting
    DEAD_LETTER = "dead_letter"  # FAILED (a series goes on) with a dead letter


class OpsEventType(StrEnum):
    DISABLED = "endpoint.disabled"
    ENABLED = "endpoint.enabled"


@dataclass(frozen=True, slots=True)
class ParkedTrigger:
    """An entry of the index of parked triggers of one (caller, origin): the trigger
    ``trigger_id`` was parked for the disabled endpoint at its occurrence due at
    ``due_at_ms`` (``Trigger.due_at_ms``). A hint, not the truth: the trigger may have been
    resumed, cancelled or edited since (its row says)."""

    trigger_id: str
    due_at_ms: int


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    """One (caller, origin)'s failure since ``first_failure_at_ms`` (the record's identity:
    a reset and a new first failure make another record)."""

    caller: str
    origin: str  # ``callback_origin``
    first_failure_at_ms: int
    last_failure_at_ms: int
    failures: int
    last_error: str | None
    disabled_at_ms: int | None = None
    notified_at_ms: int | None = None  # the disabled event was sent

    @property
    def state(self) -> EndpointState:
        return EndpointState.FAILING if self.disabled_at_ms is None else EndpointState.DISABLED

    @property
    def key(self) -> tuple[str, str]:
        return self.caller, self.origin


def origin_prefix(origin: str) -> str:
    """The start of every stored callback URL on ``origin`` (a stored URL leaves a default
    port out): for matching dead letters' URLs."""
    for scheme, port in (("http", 80), ("https", 443)):
        if origin.startswith(f"{scheme}://") and origin.endswith(f":{port}"):
            return origin.removesuffix(f":{port}") + "/"
    return origin + "/"


def parse_origin(text: str) -> str | None:
    """An origin as given by a person (``https://host[:port]``, a trailing ``/`` allowed) in
    the form records use; None when it is not one."""
    text = text.strip()
    try:
        u = normalise_callback_url(text)  # the form stored URLs, and so records, have
    except UrlError:
        return None
    if u.path != "/" or u.query or "#" in text:
        return None
    return u.origin


def first_failure(caller: str, origin: str, now_ms: int, error: str | None) -> EndpointHealth:
    return EndpointHealth(caller, origin, now_ms, now_ms, 1, _short(error))


def failed_again(h: EndpointHealth, now_ms: int, error: str | None, n: int = 1
                 ) -> EndpointHealth:
    """``h`` after ``n`` more failures, the last at ``now_ms``."""
    return replace(h, last_failure_at_ms=max(h.last_failure_at_ms, now_ms),
                   failures=h.failures + n, last_error=_short(error) or h.last_error)


def write_due(written_at_ms: int, now_ms: int, write_every_ms: int) -> bool:
    """Whether a failing record last written at ``written_at_ms`` is rewritten now."""
    return now_ms - written_at_ms >= write_every_ms


def disable_due(h: EndpointHealth, now_ms: int, disable_after_ms: int) -> bool:
    """Failing without a break for ``disable_after_ms``: the endpoint is disabled now."""
    return h.disabled_at_ms is None and now_ms - h.first_failure_at_ms >= disable_after_ms


def _short(error: str | None) -> str | None:
    return None if error is None else error[:ERROR_MAX_CHARS]


@dataclass(frozen=True, slots=True)
class OpsEvent:
    """An operators' event about an endpoint, sent signed to the ops webhook."""

    type: OpsEventType
    caller: str
    origin: str
    at_ms: int  # when it happened (disabled, enabled)
    since_ms: int | None  # failing since
    failures: int
    last_error: str | None
    by: str | None = None  # who enabled it (an operator's name, or the caller's)

    @property
    def event_id(self) -> str:
        """The same for every send of one event: receivers dedupe on ``webhook-id``."""
        raw = f"{self.type}|{self.caller}|{self.origin}|{self.at_ms}".encode()
        return "evt_" + hashlib.sha256(raw).hexdigest()[:32]

    def body(self) -> dict[str, Any]:
        """The Standard Webhooks payload: ``type``, ``timestamp``, ``data``."""
        return {"type": self.type.value, "timestamp": format_rfc3339_ms(self.at_ms), "data": {
            "caller": self.caller, "origin": self.origin,
            "since": None if self.since_ms is None else format_rfc3339_ms(self.since_ms),
            "failures": self.failures, "lastError": self.last_error, "by": self.by}}


def disabled_event(h: EndpointHealth, at_ms: int) -> OpsEvent:
    return OpsEvent(OpsEventType.DISABLED, h.caller, h.origin, at_ms, h.first_failure_at_ms,
                    h.failures, h.last_error)


def enabled_event(h: EndpointHealth | None, caller: str, origin: str, at_ms: int,
                  by: str) -> OpsEvent:
    return OpsEvent(OpsEventType.ENABLED, caller, origin, at_ms,
                    h.first_failure_at_ms if h else None, h.failures if h else 0,
                    h.last_error if h else None, by)
