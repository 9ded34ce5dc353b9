"""The boundaries of the in-app inbox (``core.ports`` holds the others; the same rules apply).

=====================  ==================================  ====================================
port                   used by                             implementations
=====================  ==================================  ====================================
``InboxStore``         dispatcher (write), API             adapters.cassandra.inbox,
                                                           adapters.memory.inbox
``InboxBus``           dispatcher (publish), API (stream)  adapters.redis.inbox_bus,
                                                           adapters.memory.inbox
=====================  ==================================  ====================================

Every message is scoped by (caller, recipient): nothing here reads across callers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from trigger_service.core.notify.inbox import InboxMessage, InboxPage


class InboxStore(Protocol):
    """Messages per (caller, recipient), newest first; each lives ``ttl_s`` from its store."""

    async def put_inbox_message(self, m: InboxMessage, ttl_s: int) -> InboxMessage | None:
        """Store ``m`` unless its id is there already (also when deleted): idempotent, and a
        repeat never changes the stored content nor its read time. The stored message (the
        first one's content), or None when it has been deleted. Raises ``StoreError``."""
        ...

    async def get_inbox_message(self, caller: str, recipient: str,
                                message_id: str) -> InboxMessage | None:
        """None if unknown, expired or deleted. Raises ``StoreError``."""
        ...

    async def list_inbox(self, caller: str, recipient: str, *, before: str | None,
                         limit: int, unread_only: bool) -> InboxPage:
        """Up to ``limit`` messages with ids below ``before`` (None: from the newest), newest
        first, without deleted ones (and read ones when ``unread_only``). Reads a bounded
        number of rows per call: a page may be short with ``next_before`` to go on; None
        when nothing older is left. Raises ``StoreError``."""
        ...

    async def inbox_after(self, caller: str, recipient: str, after: str,
                          limit: int) -> list[InboxMessage]:
        """Up to ``limit`` messages with ids above ``after``, oldest first (what a stream
        replays on reconnect). Raises ``StoreError``."""
        ...

    async def mark_inbox_read(self, caller: str, recipient: str, message_id: str,
                              read_at_ms: int) -> InboxMessage | None:
        """Set the read time unless one is set (the first read time is kept; safe to
        repeat). The message as stored, or None if unknown or deleted. Raises
        ``StoreError``."""
        ...

    async def delete_inbox_message(self, caller: str, recipient: str, message_id: str,
                                   now_ms: int) -> None:
        """Hide the message for good (it stays as a deleted marker until it expires, so a
        redelivery does not bring it back). Unknown ids are ignored: safe to repeat.
        Raises ``StoreError``."""
        ...


class InboxBus(Protocol):
    """Live fan-out of new messages to every API process: at most once, no history (the
    store is the history). Payloads are message ids: a subscriber reads the message from the
    ``InboxStore`` within its own (caller, recipient), and treats a payload as a hint only
    (anyone who can publish on the bus can send any text)."""

    async def publish(self, caller: str, recipient: str, payload: str) -> None:
        """Hand ``payload`` to every current subscriber of (caller, recipient). Raises
        ``CacheError``."""
        ...

    def subscribe(self, caller: str,
                  recipient: str) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """An async context whose entry returns once the subscription is live (anything
        published later is seen) and yields the payloads as they come. Entering and
        iterating raise ``CacheError`` (iterating also when the subscription breaks or its
        reader falls too far behind: the subscriber then starts over and replays from the
        store); leaving unsubscribes."""
        ...
