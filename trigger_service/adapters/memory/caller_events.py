"""``SubscriptionStore`` and ``EventQueue`` in memory, for unit tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from trigger_service.core.caller_events import EventDelivery, FailedEvent, Subscription
from trigger_service.core.ports.caller_events import ReceivedEvent


class MemorySubscriptions:
    def __init__(self) -> None:
        self.subs: dict[tuple[str, str], Subscription] = {}
        self.failed: dict[tuple[str, str], dict[str, FailedEvent]] = {}
        self.reads = 0  # subscriptions() calls: tests count the dispatchers' reads

    async def subscriptions(self, caller: str) -> list[Subscription]:
        self.reads += 1
        return sorted((s for (c, _), s in self.subs.items() if c == caller),
                      key=lambda s: s.name)

    async def put_subscription(self, sub: Subscription, max_count: int
                               ) -> tuple[Subscription, bool] | None:
        key = (sub.caller, sub.name)
        old = self.subs.get(key)
        if old is None and sum(1 for c, _ in self.subs if c == sub.caller) >= max_count:
            return None
        if old is not None:
            sub = dataclasses.replace(sub, created_at_ms=old.created_at_ms)
        self.subs[key] = sub
        return sub, old is None

    async def delete_subscription(self, caller: str, name: str) -> bool:
        self.failed.pop((caller, name), None)
        return self.subs.pop((caller, name), None) is not None

    async def put_failed_event(self, failed: FailedEvent, ttl_s: int) -> None:
        self.failed.setdefault((failed.caller, failed.subscription), {})[failed.event_id] = failed

    async def failed_events(self, caller: str, name: str, limit: int) -> list[FailedEvent]:
        rows = self.failed.get((caller, name), {}).values()
        return sorted(rows, key=lambda f: (-f.failed_at_ms, f.event_id))[:limit]


class MemoryEventQueue:
    """Messages by receipt; ``retry_event`` and a receive's visibility are ignored in time
    (tests look at ``visible``, ``hidden`` and ``retries``)."""

    def __init__(self) -> None:
        self.visible: list[tuple[EventDelivery, int]] = []  # (delivery, receives so far)
        self.hidden: dict[str, tuple[EventDelivery, int]] = {}
        self.retries: list[tuple[EventDelivery, int]] = []  # (delivery, delay_s)
        self.deleted: list[EventDelivery] = []
        self._next = 0

    @property
    def sent(self) -> list[EventDelivery]:
        """Everything not yet deleted."""
        return [d for d, _ in self.visible] + [d for d, _ in self.hidden.values()]

    async def send_event(self, delivery: EventDelivery) -> None:
        self.visible.append((delivery, 0))

    async def receive_events(self, *, max_messages: int, wait_s: int,
                             visibility_s: int) -> Sequence[ReceivedEvent]:
        taken, self.visible = self.visible[:max_messages], self.visible[max_messages:]
        out = []
        for delivery, count in taken:
            self._next += 1
            receipt = f"r{self._next}"
            self.hidden[receipt] = (delivery, count + 1)
            out.append(ReceivedEvent(receipt, delivery, count + 1))
        return out

    async def delete_event(self, receipt_handle: str) -> None:
        held = self.hidden.pop(receipt_handle, None)
        if held is not None:
            self.deleted.append(held[0])

    async def retry_event(self, receipt_handle: str, delay_s: int) -> None:
        held = self.hidden.pop(receipt_handle, None)
        if held is not None:
            self.retries.append((held[0], delay_s))
            self.visible.append(held)  # shown again: a test's next receive gets it
