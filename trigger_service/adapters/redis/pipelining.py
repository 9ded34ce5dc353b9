"""Commands issued in the same turn of the event loop go to Redis in one pipeline.

A batch create runs hundreds of registrations at once, each claiming its key and then
recording it done: one round trip each (and a pool connection each) cost more CPU than the
rest of the registration (bench/results/batch-*.json). Coalesced, they are one round trip
per turn of the loop, and a lone command waits for nothing but the end of the current turn
(``call_soon``): no linger, so a single request's latency does not change.

A pipeline is not a transaction (``transaction=False``): each command applies or fails on
its own, as when sent alone, and each caller gets its own command's reply or error. A
failure of the whole round trip (connection lost) is every caller's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

# Commands per pipeline at most (a batch of 1,000 goes in two).
MAX_PIPELINE = 500

AddCommand = Callable[[Pipeline], object]


class Coalescer:
    def __init__(self, client: aioredis.Redis, max_pipeline: int = MAX_PIPELINE) -> None:
        self._r = client
        self._max = max_pipeline
        self._waiting: list[tuple[AddCommand, asyncio.Future[Any]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, add: AddCommand) -> Any:
        """Queue the command ``add`` puts on a pipeline; its reply. Raises the command's own
        error, or the round trip's (``RedisError``, ``OSError``)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((add, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, []
        for i in range(0, len(waiting), self._max):
            task = asyncio.get_running_loop().create_task(self._send(waiting[i:i + self._max]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[AddCommand, asyncio.Future[Any]]]) -> None:
        pipe = self._r.pipeline(transaction=False)
        for add, _ in batch:
            add(pipe)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as e:  # the round trip failed (or the loop is shutting down)
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else
                                      asyncio.CancelledError())
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), reply in zip(batch, replies, strict=True):
            if fut.done():
                continue  # its caller was cancelled
            if isinstance(reply, Exception):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)
