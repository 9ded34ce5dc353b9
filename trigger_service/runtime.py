"""Open and close the real adapters a process needs, from one ``Settings``."""

from __future__ import annotations

from dataclasses import dataclass

from trigger_service.callers import CallerRegistry
from trigger_service.cassandra_store import CassandraStore
from trigger_service.clock import Clock, SystemClock
from trigger_service.metrics import InMemoryMetrics
from trigger_service.redis_cache import RedisIdempotencyCache
from trigger_service.settings import Settings
from trigger_service.sqs_queue import SqsQueue


@dataclass
class Runtime:
    settings: Settings
    callers: CallerRegistry
    store: CassandraStore
    queue: SqsQueue
    cache: RedisIdempotencyCache
    clock: Clock
    metrics: InMemoryMetrics

    @classmethod
    async def open(cls, settings: Settings, *, clock: Clock | None = None) -> Runtime:
        """Load callers, connect Cassandra (applying the schema), SQS (ensuring the queues)
        and Redis. Raises ``ConfigError``, ``StoreError`` or ``QueueError``."""
        callers = CallerRegistry.load(settings.api.callers_file)
        store = await CassandraStore.connect(settings.cassandra)
        try:
            queue = await SqsQueue.connect(
                settings.sqs, visibility_timeout_s=settings.dispatch.visibility_timeout_s)
        except Exception:
            await store.close()
            raise
        cache = RedisIdempotencyCache.from_url(settings.redis.url)
        return cls(settings, callers, store, queue, cache, clock or SystemClock(),
                   InMemoryMetrics())

    async def close(self) -> None:
        await self.cache.close()
        await self.queue.close()
        await self.store.close()
