"""``Fanout``: the local half of an inbox bus. One process receives each published payload
once (one Redis subscription, or the in-memory bus) and hands it to the queue of every local
subscriber of that channel.

Each subscriber's queue is bounded: one that falls ``queue_max`` payloads behind (a stalled
client) is failed rather than let grow, and so is every subscriber when the source breaks;
its iterator then raises ``CacheError`` and the stream ends (the client's reconnect replays
from the store). Standard library only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from trigger_service.core.errors import CacheError

K = TypeVar("K", bound=Hashable)
QUEUE_MAX = 1000


class Subscriber:
    """One local subscription: the payloads of its channel, in order, until failed."""

    def __init__(self, queue_max: int) -> None:
        self._queue: asyncio.Queue[str | CacheError] = asyncio.Queue(queue_max + 1)
        self._queue_max = queue_max
        self.failed = False
        self.live = False  # set by the bus once its source is subscribed (for observers)

    def offer(self, payload: str) -> None:
        if self.failed:
            return
        if self._queue.qsize() >= self._queue_max:
            self.fail(CacheError(f"inbox stream fell {self._queue_max} messages behind"))
            return
        self._queue.put_nowait(payload)

    def fail(self, error: CacheError) -> None:
        """End the iteration with ``error`` after what is queued; the first failure wins."""
        if not self.failed:
            self.failed = True
            self._queue.put_nowait(error)  # the one slot kept free for it

    async def payloads(self) -> AsyncIterator[str]:
        """The payloads as they come; raises ``CacheError`` once failed."""
        while True:
            item = await self._queue.get()
            if isinstance(item, CacheError):
                raise item
            yield item


class Fanout(Generic[K]):
    """channel → local subscribers; everything runs on one event loop."""

    def __init__(self, queue_max: int = QUEUE_MAX) -> None:
        self._subs: dict[K, set[Subscriber]] = {}
        self._queue_max = queue_max

    @contextmanager
    def subscriber(self, channel: K) -> Iterator[Subscriber]:
        """Registered on entry (it sees every later ``deliver``), removed on exit."""
        sub = Subscriber(self._queue_max)
        subs = self._subs.setdefault(channel, set())
        subs.add(sub)
        try:
            yield sub
        finally:
            subs.discard(sub)
            if not subs and self._subs.get(channel) is subs:
                del self._subs[channel]

    def deliver(self, channel: K, payload: str) -> int:
        """Queue ``payload`` for each subscriber of ``channel``; how many there were."""
        subs = self._subs.get(channel, ())
        for sub in subs:
            sub.offer(payload)
        return len(subs)

    def fail_all(self, error: CacheError) -> None:
        for subs in self._subs.values():
            for sub in subs:
                sub.fail(error)

    def count(self, channel: K | None = None, *, live_only: bool = False) -> int:
        """Local subscribers of ``channel`` (None: of every channel), only the live ones
        with ``live_only``."""
        groups = [self._subs.get(channel, set())] if channel is not None else self._subs.values()
        return sum(1 for subs in groups for sub in subs if sub.live or not live_only)
