"""Event subscriptions: the models and calls of ``/v1/event-subscriptions`` (a caller's own
subscriptions to its events), executed by the sync and async clients alike
(``client.Subscriptions``, ``aio.AsyncSubscriptions``). Each event is POSTed signed to the
subscription's URL; verify it with :func:`trigger_client.receiver.verify_event`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trigger_client._calls import Call, seg
from trigger_client.errors import parse_instant

# The event types a subscription may list (``trigger.fired`` is sent only when listed).
EVENT_TYPES = ("trigger.fired", "trigger.failed", "trigger.dead_lettered", "series.finished",
               "endpoint.disabled", "endpoint.enabled")


@dataclass(frozen=True, slots=True)
class EventSubscription:
    name: str
    url: str
    events: tuple[str, ...]
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EventSubscription:
        return cls(d["name"], d["url"], tuple(d["events"]), d)


@dataclass(frozen=True, slots=True)
class SubscriptionDeleted:
    name: str
    deleted: bool


@dataclass(frozen=True, slots=True)
class FailedEvent:
    """An event given up on for a subscription (attempts spent, 410, URL not allowed)."""

    event_id: str
    type: str
    at: datetime
    failed_at: datetime
    attempts: int
    last_error: str | None
    data: Any = field(compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FailedEvent:
        return cls(d["eventId"], d["type"], parse_instant(d["at"]), parse_instant(d["failedAt"]),
                   d["attempts"], d.get("lastError"), d.get("data"))


def put_subscription(name: str, url: str, events: Iterable[str]) -> Call[EventSubscription]:
    # Idempotent (create or replace): safe to retry.
    return Call("PUT", f"/v1/event-subscriptions/{seg(name)}",
                lambda r: EventSubscription.from_json(r.json()),
                body={"url": url, "events": list(events)}, retry=True)


def list_subscriptions() -> Call[list[EventSubscription]]:
    return Call("GET", "/v1/event-subscriptions",
                lambda r: [EventSubscription.from_json(i) for i in r.json()["items"]],
                retry=True)


def delete_subscription(name: str) -> Call[SubscriptionDeleted]:
    return Call("DELETE", f"/v1/event-subscriptions/{seg(name)}",
                lambda r: SubscriptionDeleted(r.json()["name"], r.json()["deleted"]))


def subscription_failures(name: str) -> Call[list[FailedEvent]]:
    return Call("GET", f"/v1/event-subscriptions/{seg(name)}/failures",
                lambda r: [FailedEvent.from_json(i) for i in r.json()["items"]], retry=True)
