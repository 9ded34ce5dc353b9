"""An in-memory ``Notifier`` for unit tests: records every send and answers scripted
outcomes, per channel type or per recipient, the way the provider adapters would."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from trigger_service.core.notify.channels import (
    ChannelOutcome,
    ChannelSpec,
    EmailSpec,
    InboxSpec,
    OccurrenceNotice,
    PushSpec,
    SmsSpec,
    TelegramSpec,
)


def recipient_of(spec: ChannelSpec) -> str:
    """Who a channel reaches: the first address, the number, the device token, the inbox."""
    if isinstance(spec, EmailSpec):
        return spec.to[0]
    if isinstance(spec, SmsSpec):
        return spec.to
    if isinstance(spec, PushSpec):
        return spec.token
    if isinstance(spec, TelegramSpec):
        return str(spec.chat_id)
    assert isinstance(spec, InboxSpec)
    return spec.recipient


@dataclass
class MemoryNotifier:
    """``sent``: every (spec, occurrence) in order, failures included. ``script(key,
    *outcomes)`` queues outcomes for a recipient (``recipient_of``) or a channel type
    (``"sms"``); the recipient's come first, and once both are used up a send succeeds with
    a provider message id of ``mem-<n>``."""

    sent: list[tuple[ChannelSpec, OccurrenceNotice]] = field(default_factory=list)
    scripts: dict[str, deque[ChannelOutcome]] = field(
        default_factory=lambda: defaultdict(deque))
    opened: bool = False
    closed: bool = False

    def script(self, key: str, *outcomes: ChannelOutcome) -> None:
        self.scripts[key].extend(outcomes)

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.closed = True

    async def send(self, spec: ChannelSpec, occ: OccurrenceNotice) -> ChannelOutcome:
        self.sent.append((spec, occ))
        for key in (recipient_of(spec), spec.type.value):
            queue = self.scripts.get(key)
            if queue:
                return queue.popleft()
        return ChannelOutcome(True, provider_message_id=f"mem-{len(self.sent)}")
