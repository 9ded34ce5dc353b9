"""Waiting in priority order: one caller's waiters for a place (a claim slot, a place in its
bulkhead) are served high before normal before low (``core.model.Priority.rank``), first come
first served within a rank.

Only within one caller: which caller is served next is ``fair_share``'s choice, so priority
never changes how the dispatcher is shared between callers.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RankedWaiters:
    """Futures waiting for a turn, handed out lowest rank first, in arrival order within a
    rank. A waiter cancelled while it waits is skipped."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def add(self, rank: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (rank, next(self._seq), fut))
        self._live += 1
        return fut

    def forget(self) -> None:
        """One waiter left without its turn (it was cancelled): its entry is skipped."""
        self._live -= 1

    def wake_next(self) -> bool:
        """Hand the turn to the first waiter still waiting; False: none waits."""
        while self._heap:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                self._live -= 1
                fut.set_result(None)
                return True
        return False


class RankedSlots:
    """A semaphore of ``size`` places whose waiters are served by ``RankedWaiters``."""

    def __init__(self, size: int) -> None:
        self._free = max(1, size)
        self._waiters = RankedWaiters()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def held(self, rank: int) -> AsyncIterator[None]:
        await self.acquire(rank)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, rank: int) -> None:
        if self._free > 0 and not len(self._waiters):
            self._free -= 1
            return
        fut = self._waiters.add(rank)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a place just as it was cancelled: pass it on
            else:
                fut.cancel()
                self._waiters.forget()
            raise

    def release(self) -> None:
        if not self._waiters.wake_next():
            self._free += 1
