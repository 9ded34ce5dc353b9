"""In-memory ``InboxStore`` (mixed into ``MemoryStore``, which provides ``_enter``: call
counting and injected failures) and ``InboxBus``, for unit tests: the same contracts as
``adapters.cassandra.inbox`` and ``adapters.redis.inbox_bus`` (tests/contract runs both).
TTLs are not kept: nothing expires here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from trigger_service.adapters.inbox_fanout import Fanout
from trigger_service.core.errors import CacheError
from trigger_service.core.notify.inbox import InboxMessage, InboxPage

_Key = tuple[str, str]  # (caller, recipient)


@dataclass
class _Stored:
    message: InboxMessage
    deleted: bool = False


class MemoryInbox:
    inbox: dict[_Key, dict[str, _Stored]]

    def _init_inbox(self) -> None:
        self.inbox = {}

    def _enter(self, name: str) -> None:  # provided by MemoryStore
        raise NotImplementedError

    def _live(self, caller: str, recipient: str) -> list[InboxMessage]:
        """Not deleted, newest first."""
        box = self.inbox.get((caller, recipient), {})
        return [s.message for _, s in sorted(box.items(), reverse=True) if not s.deleted]

    async def put_inbox_message(self, m: InboxMessage, ttl_s: int) -> InboxMessage | None:
        self._enter("put_inbox_message")
        box = self.inbox.setdefault((m.caller, m.recipient), {})
        s = box.setdefault(m.message_id, _Stored(replace(m, read_at_ms=None)))
        return None if s.deleted else s.message

    async def get_inbox_message(self, caller: str, recipient: str,
                                message_id: str) -> InboxMessage | None:
        self._enter("get_inbox_message")
        s = self.inbox.get((caller, recipient), {}).get(message_id)
        return None if s is None or s.deleted else s.message

    async def list_inbox(self, caller: str, recipient: str, *, before: str | None,
                         limit: int, unread_only: bool) -> InboxPage:
        self._enter("list_inbox")
        found = [m for m in self._live(caller, recipient)
                 if (before is None or m.message_id < before)
                 and not (unread_only and m.read_at_ms is not None)]
        page = found[:limit]
        more = len(found) > limit
        return InboxPage(page, page[-1].message_id if more and page else None)

    async def inbox_after(self, caller: str, recipient: str, after: str,
                          limit: int) -> list[InboxMessage]:
        self._enter("inbox_after")
        newer = [m for m in self._live(caller, recipient) if m.message_id > after]
        return list(reversed(newer))[:limit]

    async def mark_inbox_read(self, caller: str, recipient: str, message_id: str,
                              read_at_ms: int) -> InboxMessage | None:
        self._enter("mark_inbox_read")
        s = self.inbox.get((caller, recipient), {}).get(message_id)
        if s is None or s.deleted:
            return None
        if s.message.read_at_ms is None:
            s.message = replace(s.message, read_at_ms=read_at_ms)
        return s.message

    async def delete_inbox_message(self, caller: str, recipient: str, message_id: str,
                                   now_ms: int) -> None:
        self._enter("delete_inbox_message")
        s = self.inbox.get((caller, recipient), {}).get(message_id)
        if s is not None:
            s.deleted = True


class MemoryInboxBus:
    """``InboxBus`` within one process. ``failure`` set: every call raises it."""

    def __init__(self) -> None:
        self._fanout: Fanout[_Key] = Fanout()
        self.published: list[tuple[str, str, str]] = []
        self.failure: CacheError | None = None

    def subscribers(self, caller: str, recipient: str) -> int:
        return self._fanout.count((caller, recipient))

    async def publish(self, caller: str, recipient: str, payload: str) -> None:
        if self.failure is not None:
            raise self.failure
        self.published.append((caller, recipient, payload))
        self._fanout.deliver((caller, recipient), payload)

    @asynccontextmanager
    async def subscribe(self, caller: str, recipient: str) -> AsyncIterator[AsyncIterator[str]]:
        if self.failure is not None:
            raise self.failure
        with self._fanout.subscriber((caller, recipient)) as sub:
            yield sub.payloads()
