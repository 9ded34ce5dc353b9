"""``InboxBus`` on Redis pub/sub, with one subscription per process (the hub).

``publish`` is a PUBLISH on ``inbox:{caller}:{recipient}`` (``adapters.schema``) through the
command client. What travels is a message id only: a stream reads the message from the store
within its own (caller, recipient), so anything on the bus is a hint, never content.

``subscribe`` registers a local subscriber with the hub: one PSUBSCRIBE ``inbox:*`` held on
the listener client's own connection (a pool of one), opened on first need, whose messages
are fanned out to the local subscribers of their channel (``adapters.inbox_fanout``). Open
streams thus cost no Redis connection of their own, and never take one from the command
pool. The price: every API process receives every inbox publish (an id, a few dozen bytes)
whether or not it streams that recipient.

When the subscription breaks, every local subscriber fails with ``CacheError`` (their
streams end; clients reconnect and replay from the store) and the next ``subscribe`` opens it
again. Pub/sub keeps nothing: a message published while the hub is down is gone, and the
store's replay covers it. Errors become ``CacheError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from trigger_service.adapters import schema
from trigger_service.adapters.inbox_fanout import QUEUE_MAX, Fanout
from trigger_service.adapters.redis.client import open_client
from trigger_service.core.errors import CacheError

log = structlog.get_logger(__name__)

_POLL_S = 1.0  # how long one read waits (the client's socket timeout is longer)
_CONFIRM_S = 2.0


HUB_CLIENT_NAME = "trigger-inbox-hub"


def open_listener(url: str, client_name: str = HUB_CLIENT_NAME, *,
                  tls_ca_file: str = "") -> aioredis.Redis:
    """The hub's client: a pool of exactly one connection, apart from the command pool,
    named ``client_name`` in Redis's CLIENT LIST (TLS as ``open_client``)."""
    return open_client(url, max_connections=1, client_name=client_name,
                       tls_ca_file=tls_ca_file)


class RedisInboxBus:
    """``client``: the command client (publishes). ``listener``: the hub's own client (see
    ``open_listener``; None: this bus only publishes, as in the dispatcher). ``close`` ends
    the hub and closes ``listener``, not ``client``."""

    def __init__(self, client: aioredis.Redis, listener: aioredis.Redis | None = None,
                 queue_max: int = QUEUE_MAX) -> None:
        self._r = client
        self._listener = listener
        self._fanout: Fanout[str] = Fanout(queue_max)
        self._hub: asyncio.Task[None] | None = None
        # Set while the hub is subscribed or subscribing; None once it has failed.
        self._ready: asyncio.Future[None] | None = None

    async def publish(self, caller: str, recipient: str, payload: str) -> None:
        try:
            await self._r.publish(schema.inbox_channel(caller, recipient), payload)
        except (RedisError, OSError) as e:
            raise CacheError(f"redis publish failed: {e}") from e

    @asynccontextmanager
    async def subscribe(self, caller: str, recipient: str) -> AsyncIterator[AsyncIterator[str]]:
        with self._fanout.subscriber(schema.inbox_channel(caller, recipient)) as sub:
            await self._hub_live()
            sub.live = True
            yield sub.payloads()

    def local_subscribers(self) -> int:
        """How many live subscriptions this process holds (all on the hub's one connection):
        each sees every publish from now on."""
        return self._fanout.count(live_only=True)

    async def close(self) -> None:
        """Fail every local subscriber, stop the hub and close the listener."""
        closing = CacheError("the inbox bus is closing")
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(closing)
        self._ready = None
        self._fanout.fail_all(closing)
        if self._hub is not None:
            self._hub.cancel()
            with suppress(asyncio.CancelledError):
                await self._hub
        if self._listener is not None:
            await self._listener.aclose()

    async def _hub_live(self) -> None:
        """Return once the hub's PSUBSCRIBE is confirmed (starting it if need be): from then
        on every publish reaches the local subscribers. Raises ``CacheError``."""
        if self._listener is None:
            raise CacheError("this inbox bus only publishes (no listener)")
        if self._ready is None:
            ready = asyncio.get_running_loop().create_future()
            ready.add_done_callback(_retrieve)
            self._ready = ready
            self._hub = asyncio.create_task(self._run(self._listener, ready))
        await asyncio.shield(self._ready)

    async def _run(self, listener: aioredis.Redis, ready: asyncio.Future[None]) -> None:
        pubsub = listener.pubsub()
        try:
            await pubsub.psubscribe(schema.INBOX_CHANNELS)
            await _confirmed(pubsub)
            ready.set_result(None)
            while True:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=_POLL_S)
                if msg is not None and msg.get("type") == "pmessage":
                    self._fanout.deliver(str(msg["channel"]), str(msg["data"]))
        except Exception as e:  # whatever ends the hub must end its subscribers too
            if not isinstance(e, RedisError | OSError | CacheError):
                log.exception("inbox_hub_failed")  # a bug
            error = e if isinstance(e, CacheError) else CacheError(
                f"redis subscription failed: {e}")
            # Synchronously with failing the subscribers: a subscribe from now on starts a
            # new hub rather than trusting this one.
            if self._ready is ready:
                self._ready = None
            if not ready.done():
                ready.set_exception(error)
            self._fanout.fail_all(error)
            log.warning("inbox_hub_broken", error=str(error))
        finally:
            # Closing a broken connection may fail too; it is released to the pool anyway.
            with suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]


def _retrieve(ready: asyncio.Future[None]) -> None:
    """Mark a failure as seen: the subscribers that waited got it; nobody else needs it."""
    if not ready.cancelled():
        ready.exception()


async def _confirmed(pubsub: aioredis.client.PubSub) -> None:
    """Wait for Redis's answer to PSUBSCRIBE: from then on every publish reaches us."""
    msg = await pubsub.get_message(timeout=_CONFIRM_S)
    if msg is None or msg.get("type") != "psubscribe":
        raise CacheError(f"redis did not confirm the subscription: {msg!r}")
