"""A micro-batcher: many concurrent single-item calls become few batch round trips (used by
the SQS adapter, so callers send and delete one message at a time).

Callers ``await submit(item)``; items collected while a flush is in progress (or within
``linger_s``) go out together in batches of at most ``max_batch``. Each caller gets its own
item's outcome: the flush function's exception is raised to every caller of that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Batcher(Generic[T]):
    def __init__(
        self,
        flush: Callable[[Sequence[T]], Awaitable[None]],
        *,
        max_batch: int = 10,
        linger_s: float = 0.002,
        max_concurrent_flushes: int = 8,
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._pending: list[tuple[T, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._slots = asyncio.Semaphore(max_concurrent_flushes)
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> None:
        """Return once ``item`` was part of a successful flush; raise that flush's error."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if len(self._pending) >= self._max_batch:
            self._cut()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._linger_s, self._cut)
        await fut

    def _cut(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            batch, self._pending = (self._pending[: self._max_batch],
                                    self._pending[self._max_batch:])
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[None]]]) -> None:
        async with self._slots:
            try:
                await self._flush([item for item, _ in batch])
            except Exception as e:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                return
        for _, fut in batch:
            if not fut.done():
                fut.set_result(None)

    async def drain(self) -> None:
        """Flush what is pending and wait for every flush in progress."""
        self._cut()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
