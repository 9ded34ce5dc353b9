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

from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from trigger_service.core.coalescing import TurnCoalescer

# Commands per pipeline at most (a batch of 1,000 goes in two).
MAX_PIPELINE = 500

AddCommand = Callable[[Pipeline], object]


class Coalescer:
    def __init__(self, client: aioredis.Redis, max_pipeline: int = MAX_PIPELINE) -> None:
        self._r = client
        self._commands: TurnCoalescer[AddCommand, Any] = TurnCoalescer(self._send, max_pipeline)

    async def run(self, add: AddCommand) -> Any:
        """Queue the command ``add`` puts on a pipeline; its reply. Raises the command's own
        error, or the round trip's (``RedisError``, ``OSError``)."""
        return await self._commands.run(add)

    async def _send(self, batch: list[AddCommand]) -> Sequence[Any]:
        pipe = self._r.pipeline(transaction=False)
        for add in batch:
            add(pipe)
        # A failed command's reply is its exception (raised to its caller alone).
        return list(await pipe.execute(raise_on_error=False))
