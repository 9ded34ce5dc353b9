"""Trigger reads of concurrent registrations, in one ``get_many`` per turn of the event loop.

A keyed registration reads the row its key derives (``app.idempotency``): a batch create
reads hundreds at once, and one request each costs the store's driver more CPU than the
rest of the registration. Here the reads asked for in the same turn of the loop go as one
``TriggerStates.get_many`` (the store's ``IN`` reads); a lone read waits for nothing but the
end of the current turn. Each caller gets what ``get`` would have answered, or the error of
the read its id was in (``StoreError``).
"""

from __future__ import annotations

import asyncio

from trigger_service.core.model import Trigger
from trigger_service.core.ports import TriggerStates

# Ids per get_many at most.
MAX_READ = 500


class CoalescedReads:
    def __init__(self, states: TriggerStates, max_read: int = MAX_READ) -> None:
        self._states = states
        self._max = max_read
        self._waiting: list[tuple[str, asyncio.Future[Trigger | None]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self, trigger_id: str) -> Trigger | None:
        """``TriggerStates.get``, shared with the reads asked for in the same turn."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Trigger | None] = loop.create_future()
        self._waiting.append((trigger_id, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, []
        for i in range(0, len(waiting), self._max):
            task = asyncio.get_running_loop().create_task(self._read(waiting[i:i + self._max]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read(self, batch: list[tuple[str, asyncio.Future[Trigger | None]]]) -> None:
        try:
            if len(batch) == 1:
                found = [await self._states.get(batch[0][0])]
            else:
                found = await self._states.get_many([tid for tid, _ in batch])
        except BaseException as e:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else
                                      asyncio.CancelledError())
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), t in zip(batch, found, strict=True):
            if not fut.done():
                fut.set_result(t)
