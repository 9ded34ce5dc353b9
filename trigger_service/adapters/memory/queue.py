"""The in-memory queue: ``Enqueuer``, ``DeliveryQueue``, ``RedriveQueue`` and ``QueueDepth``
with SQS's visibility rules on an injected clock (unit tests; the contract tests run the same
checks against it and ``adapters.sqs``)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from trigger_service.adapters.memory.failing import Failing
from trigger_service.core.errors import MessageNotInFlight, QueueError
from trigger_service.core.lanes import Lanes
from trigger_service.core.model import Priority
from trigger_service.core.ports import Clock
from trigger_service.core.ports.values import OutgoingMessage, ReceivedMessage, VisibilityChange
from trigger_service.core.time.timing import SQS_MAX_DELAY_S


@dataclass
class _Message:
    trigger_id: str
    fire_at_ms: int
    visible_at_ms: int
    message_id: str
    receipt: str = ""
    receive_count: int = 0
    home_at_ms: int | None = None
    shard: int | None = None
    caller: str | None = None
    priority: Priority = Priority.NORMAL
    lane: int = 0


@dataclass
class QueuedDeadLetter:
    """What ``send_dead_letter`` put on the fake's dead-letter queue (an SQS message, not the
    listed ``core.dead_letters.DeadLetter``)."""

    trigger_id: str
    fire_at_ms: int
    reason: str


class MemoryQueue(Failing):
    """``Enqueuer``, ``DeliveryQueue`` and ``RedriveQueue`` with SQS's visibility rules on an
    injected clock. ``redrive()`` moves a message to the redrive queue as SQS's policy would.

    ``receive`` never long-polls (it yields to the loop once and returns what is visible).
    With ``lanes`` > 1 a message goes to its caller's lane (``core.lanes``) and is received
    only from it.
    """

    def __init__(self, clock: Clock, lanes: int = 1, high_lanes: int = 0) -> None:
        super().__init__()
        self._clock = clock
        self.lane_plan = Lanes(lanes, high_lanes)
        self.lanes = self.lane_plan.total
        self.high_lanes = high_lanes
        self._ids = itertools.count(1)
        self.messages: list[_Message] = []
        self.dead_letters: list[QueuedDeadLetter] = []
        self.redriven: list[_Message] = []
        self.sent: list[OutgoingMessage] = []
        # Messages per send_many and per change_visibility_many call, in call order (a
        # single send or re-hide is a call of one).
        self.send_calls: list[int] = []
        self.visibility_calls: list[int] = []

    async def send(self, message: OutgoingMessage) -> None:
        await self.send_many([message])

    async def send_many(self, messages: Sequence[OutgoingMessage]) -> None:
        self._enter("send")
        self.send_calls.append(len(messages))
        now_ms = self._clock.now_ms()
        for m in messages:
            self.sent.append(m)
            self.messages.append(_Message(m.trigger_id, m.fire_at_ms,
                                          now_ms + max(0, min(SQS_MAX_DELAY_S, m.delay_s)) * 1000,
                                          f"m{next(self._ids)}", home_at_ms=m.home_at_ms,
                                          shard=m.shard, caller=m.caller,
                                          priority=m.priority,
                                          lane=self.lane_plan.of(m.caller, m.priority)))

    async def receive(
        self, *, max_messages: int, wait_s: int, visibility_s: int, lane: int = 0
    ) -> list[ReceivedMessage]:
        self._enter("receive")
        if not 0 <= lane < self.lanes:
            raise QueueError(f"no lane {lane} (of {self.lanes})")
        return await self._receive_from([m for m in self.messages if m.lane == lane],
                                        max_messages, visibility_s)

    async def _receive_from(self, queue: list[_Message], max_messages: int,
                            visibility_s: int) -> list[ReceivedMessage]:
        """SQS's receive: up to 10 visible messages, each hidden ``visibility_s`` from now."""
        await asyncio.sleep(0)
        now_ms = self._clock.now_ms()
        out: list[ReceivedMessage] = []
        for m in queue:
            if len(out) >= min(max_messages, 10) or m.visible_at_ms > now_ms:
                continue
            m.receive_count += 1
            m.receipt = f"{m.message_id}/{m.receive_count}"
            m.visible_at_ms = now_ms + visibility_s * 1000
            out.append(ReceivedMessage(m.message_id, m.receipt, m.trigger_id, m.fire_at_ms,
                                       m.receive_count, m.home_at_ms, m.shard, m.caller,
                                       m.priority))
        return out

    def _by_receipt(self, receipt: str) -> _Message | None:
        return next((m for m in self.messages if m.receipt == receipt), None)

    async def delete(self, receipt_handle: str) -> None:
        self._enter("delete")
        m = self._by_receipt(receipt_handle)
        if m is not None:
            self.messages.remove(m)

    async def change_visibility(self, receipt_handle: str, visibility_s: int) -> None:
        self._enter("change_visibility")
        m = self._by_receipt(receipt_handle)
        if m is None:  # deleted, or received again (SQS: only the latest receipt hides it)
            raise MessageNotInFlight("receipt handle is no longer valid")
        m.visible_at_ms = self._clock.now_ms() + max(0, visibility_s) * 1000

    async def change_visibility_many(self, changes: Sequence[VisibilityChange]) -> None:
        self._enter("change_visibility_many")
        self.visibility_calls.append(len(changes))
        now_ms = self._clock.now_ms()
        missing = 0
        for c in changes:
            m = self._by_receipt(c.receipt_handle)
            if m is None:
                missing += 1
                continue
            m.visible_at_ms = now_ms + max(0, c.visibility_s) * 1000
        if missing:
            raise QueueError(f"{missing} of {len(changes)} receipt handles no longer valid")

    async def replace(self, receipt_handle: str, message: OutgoingMessage) -> None:
        self._enter("replace")
        await self.send_many([message])
        await self.delete(receipt_handle)

    async def send_dead_letter(self, trigger_id: str, fire_at_ms: int, reason: str) -> None:
        self._enter("send_dead_letter")
        self.dead_letters.append(QueuedDeadLetter(trigger_id, fire_at_ms, reason))

    def redrive(self, trigger_id: str, fire_at_ms: int, receive_count: int = 50) -> None:
        """Put a message on the redrive queue, as SQS does after ``receive_count`` receives."""
        self.redriven.append(_Message(trigger_id, fire_at_ms, 0, f"r{next(self._ids)}",
                                      receive_count=receive_count))

    async def receive_redriven(self, *, max_messages: int, wait_s: int,
                               visibility_s: int) -> list[ReceivedMessage]:
        self._enter("receive_redriven")
        return await self._receive_from(self.redriven, max_messages, visibility_s)

    async def delete_redriven(self, receipt_handle: str) -> None:
        self._enter("delete_redriven")
        self.redriven = [m for m in self.redriven if m.receipt != receipt_handle]

    async def ping(self) -> None:
        self._enter("ping")

    async def visible_backlog(self) -> int:
        self._enter("visible_backlog")
        now_ms = self._clock.now_ms()
        return sum(1 for m in self.messages if m.visible_at_ms <= now_ms)

    async def dead_letter_backlog(self) -> int:
        self._enter("dead_letter_backlog")
        return len(self.dead_letters)

    def visible_at_ms(self, trigger_id: str) -> list[int]:
        """When each queued copy of ``trigger_id`` becomes visible (for assertions)."""
        return [m.visible_at_ms for m in self.messages if m.trigger_id == trigger_id]

