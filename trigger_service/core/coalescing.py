"""Calls made in the same turn of the event loop, sent as one batch.

A batch create runs hundreds of registrations at once; each would read its row, or talk to
Redis, in its own round trip, and one round trip each costs more CPU than the rest of the
registration. ``TurnCoalescer.run`` queues an item and, once per turn of the loop
(``call_soon``), the items queued in that turn go to ``send`` together (at most
``max_batch`` a call). A lone call waits for nothing but the end of the current turn: no
linger, so a single request's latency does not change (``adapters.batching.Batcher`` is the
one with a linger, for SQS).

``send`` answers one result per item, in order; an ``Exception`` among them is raised to
that item's caller alone. An exception raised by ``send`` itself (the round trip failed) is
every caller's of that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")


class TurnCoalescer(Generic[K, R]):
    def __init__(self, send: Callable[[list[K]], Awaitable[Sequence[R | Exception]]],
                 max_batch: int) -> None:
        self._send = send
        self._max = max_batch
        self._waiting: list[tuple[K, asyncio.Future[R]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, item: K) -> R:
        """``item``'s result, sent with the items queued in the same turn. Raises its own
        error, or the batch's."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, []
        for i in range(0, len(waiting), self._max):
            task = asyncio.get_running_loop().create_task(self._one(waiting[i:i + self._max]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, batch: list[tuple[K, asyncio.Future[R]]]) -> None:
        try:
            results = await self._send([item for item, _ in batch])
        except BaseException as e:  # the round trip failed (or the loop is shutting down)
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else
                                      asyncio.CancelledError())
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), result in zip(batch, results, strict=True):
            if fut.done():
                continue  # its caller was cancelled
            if isinstance(result, Exception):
                fut.set_exception(result)
            else:
                fut.set_result(result)
