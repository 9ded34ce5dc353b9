"""``InboxBus`` on Redis pub/sub: channel ``inbox:{caller}:{recipient}`` (``adapters.schema``).

Each open stream holds one subscription (one pooled connection) for as long as it is open;
a publish reaches every API process that has one. Pub/sub keeps nothing: a message published
while nobody listens is gone, and the store's replay covers it. Errors become ``CacheError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.core.errors import CacheError

_POLL_S = 1.0  # how long one read waits (the client's socket timeout is shorter)
_CONFIRM_S = 2.0


class RedisInboxBus:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    async def publish(self, caller: str, recipient: str, payload: str) -> None:
        try:
            await self._r.publish(schema.inbox_channel(caller, recipient), payload)
        except (RedisError, OSError) as e:
            raise CacheError(f"redis publish failed: {e}") from e

    @asynccontextmanager
    async def subscribe(self, caller: str, recipient: str) -> AsyncIterator[AsyncIterator[str]]:
        channel = schema.inbox_channel(caller, recipient)
        pubsub = self._r.pubsub()
        try:
            try:
                await pubsub.subscribe(channel)
                await _confirmed(pubsub)
            except (RedisError, OSError) as e:
                raise CacheError(f"redis subscribe failed: {e}") from e
            yield _payloads(pubsub)
        finally:
            # Unsubscribing on a broken connection fails too; closing releases it anyway.
            with suppress(RedisError, OSError):
                await pubsub.unsubscribe(channel)
            await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _confirmed(pubsub: aioredis.client.PubSub) -> None:
    """Wait for Redis's answer to SUBSCRIBE: from then on every publish reaches us."""
    msg = await pubsub.get_message(timeout=_CONFIRM_S)
    if msg is None or msg.get("type") != "subscribe":
        raise CacheError(f"redis did not confirm the subscription: {msg!r}")


async def _payloads(pubsub: aioredis.client.PubSub) -> AsyncIterator[str]:
    while True:
        try:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=_POLL_S)
        except (RedisError, OSError) as e:
            raise CacheError(f"redis subscription failed: {e}") from e
        if msg is not None and msg.get("type") == "message":
            yield str(msg["data"])
