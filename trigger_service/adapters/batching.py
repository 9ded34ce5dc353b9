"""A micro-batcher with an adaptive linger: many concurrent single-item calls become few
batch round trips, and a lone call pays no wait (used by the SQS adapter, so callers send,
delete and re-hide one message at a time).

Callers ``await submit(item)``. When the batcher is idle (nothing waiting, no flush in
flight) an item goes out at once, alone: at low load batching costs no latency. Otherwise
(a flush is in flight, or others wait) it waits for company: the waiting items go out as
soon as ``max_batch`` of them are there, or when the oldest has waited ``linger_ms``,
whichever comes first. So under load batches are full and the linger is only a bound on
the wait (the first item waiting starts the timer; none waits longer).

A batch's size can follow the load (``busy_batch``): small while few flushes are in flight,
where the far end has room and a small batch is answered sooner (each item waits for its
whole batch), fuller once it is busy, where waiting in its queue costs more than sharing a
batch, and a fuller batch costs both ends less per item.

Each caller gets its own item's outcome: the flush returns the errors of the items that
failed, by position in the batch (the others succeeded); an exception raised by the flush
itself (the request failed) is raised to every caller of that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Generic, TypeVar

from trigger_service.core.ports import Clock

T = TypeVar("T")

# A flush's per-item failures: position in the batch -> that item's error.
ItemErrors = Mapping[int, Exception]
Flush = Callable[[Sequence[T]], Awaitable[ItemErrors]]
NO_ERRORS: ItemErrors = {}


class Batcher(Generic[T]):
    def __init__(
        self,
        flush: Flush[T],
        clock: Clock,
        *,
        max_batch: int = 10,
        linger_ms: int = 20,
        max_concurrent_flushes: int = 8,
        eager: bool = True,
        busy_batch: int | None = None,
        busy_flushes: int = 0,
    ) -> None:
        """``flush`` sends one batch of at most ``max_batch`` items; at most
        ``max_concurrent_flushes`` run at once (more wait their turn: back-pressure, on top
        of the linger). The linger is timed on ``clock``. ``eager=False``: an item never goes
        alone at once, it always waits for company (for calls whose caller does not wait
        on them, where a full batch matters more than a few hundred ms). ``busy_batch``:
        the size of a batch cut while ``busy_flushes`` or more flushes are in flight
        (None: always ``max_batch``)."""
        self._flush = flush
        self._clock = clock
        self._max_batch = max_batch
        self._linger_ms = linger_ms
        self._pending: list[tuple[T, asyncio.Future[None]]] = []
        self._timer: asyncio.Task[None] | None = None
        self._in_flight = 0  # flushes started and not finished (waiting for a slot counts)
        self._slots = asyncio.Semaphore(max_concurrent_flushes)
        self._tasks: set[asyncio.Task[None]] = set()
        self._eager = eager
        self._busy_batch = busy_batch
        self._busy_flushes = busy_flushes

    async def submit(self, item: T) -> None:
        """Return once ``item`` was sent in a batch; raise its error (``flush``'s item error,
        or the exception the whole flush raised). A caller cancelled while its item waits
        does not take the item back: it may still be sent."""
        await self._add([item])[0]

    async def submit_many(self, items: Sequence[T]) -> list[BaseException | None]:
        """Submit all at once; return each item's error (None: sent). Full batches go at
        once; the rest too if the batcher was idle, else it waits for company like any."""
        return await asyncio.gather(*self._add(items), return_exceptions=True)

    def _add(self, items: Sequence[T]) -> list[asyncio.Future[None]]:
        loop = asyncio.get_running_loop()
        idle = self._eager and not self._pending and self._in_flight == 0
        futs: list[asyncio.Future[None]] = [loop.create_future() for _ in items]
        self._pending += zip(items, futs, strict=True)
        self._cut(everything=idle)
        return futs

    async def _linger(self) -> None:
        await self._clock.sleep_ms(self._linger_ms)
        self._timer = None  # before _cut, so that it does not cancel this very task
        self._cut(everything=True)

    def _cut(self, *, everything: bool) -> None:
        """Start a flush of each full batch waiting, and with ``everything`` of the rest
        too; what still waits has a timer (the one its elders started, if running)."""
        while len(self._pending) >= (size := self._size()) or (everything and self._pending):
            batch, self._pending = self._pending[:size], self._pending[size:]
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if not self._pending and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        elif self._pending and self._timer is None:
            self._timer = asyncio.ensure_future(self._linger())

    def _size(self) -> int:
        if self._busy_batch is not None and self._in_flight >= self._busy_flushes:
            return self._busy_batch
        return self._max_batch

    async def _run(self, batch: list[tuple[T, asyncio.Future[None]]]) -> None:
        try:
            async with self._slots:
                errors = await self._flush([item for item, _ in batch])
        except Exception as e:
            errors = dict.fromkeys(range(len(batch)), e)
        except BaseException:
            for _, fut in batch:
                fut.cancel()  # the flush itself was cancelled (loop shutting down)
            raise
        finally:
            self._in_flight -= 1
        for i, (_, fut) in enumerate(batch):
            if fut.done():
                continue  # its caller was cancelled: nobody to tell
            error = errors.get(i)
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

    async def drain(self) -> None:
        """Flush what is waiting now and wait for every flush in progress."""
        self._cut(everything=True)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
