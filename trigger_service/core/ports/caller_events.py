"""The boundaries of events to the caller (``core.caller_events``): the subscriptions and
their failed events (Cassandra), and the queue events travel on to their sender (SQS)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trigger_service.core.caller_events import EventDelivery, FailedEvent, Subscription


class SubscriptionStore(Protocol):
    """A caller's subscriptions by name (a handful: ``put`` refuses past ``max_count``) and
    each one's failed events. Every method raises ``StoreError``."""

    async def subscriptions(self, caller: str) -> list[Subscription]:
        """``caller``'s subscriptions, by name."""
        ...

    async def put_subscription(self, sub: Subscription, max_count: int
                               ) -> tuple[Subscription, bool] | None:
        """Create or replace ``sub`` (the ``created_at_ms`` of one replaced is kept): the
        subscription as stored and whether it is new, or None when it is new and the caller
        has ``max_count`` already (nothing written). The cap holds under concurrent puts:
        of creations that would pass it, the later are refused; a replacement is never
        refused for the cap."""
        ...

    async def delete_subscription(self, caller: str, name: str) -> bool:
        """Delete it and its failed events (idempotent); whether it was there."""
        ...

    async def put_failed_event(self, failed: FailedEvent, ttl_s: int) -> None:
        """List ``failed`` for ``ttl_s`` (idempotent: its event id again is one row)."""
        ...

    async def failed_events(self, caller: str, name: str, limit: int) -> list[FailedEvent]:
        """The subscription's newest failed events, at most ``limit``."""
        ...


@dataclass(frozen=True, slots=True)
class ReceivedEvent:
    """An event received from the queue: ``receive_count`` is its sends so far, this one
    included (each receive is one)."""

    receipt_handle: str
    delivery: EventDelivery
    receive_count: int


class EventQueue(Protocol):
    """Durable, at least once. Every method raises ``QueueError``."""

    async def send_event(self, delivery: EventDelivery) -> None:
        """Queue ``delivery`` for its sender."""
        ...

    async def receive_events(self, *, max_messages: int, wait_s: int,
                             visibility_s: int) -> Sequence[ReceivedEvent]:
        """Up to ``max_messages`` events, each hidden ``visibility_s`` (a body that cannot
        be read is deleted here, logged)."""
        ...

    async def delete_event(self, receipt_handle: str) -> None:
        """Done with it (sent, or given up on)."""
        ...

    async def retry_event(self, receipt_handle: str, delay_s: int) -> None:
        """Show it again after ``delay_s`` (its next send)."""
        ...
