"""Contract fixtures, dramatiq-style: each port's fixture is parametrized over the in-memory
fake (``adapters.memory``) and the real adapter, so one test body checks both.

The real parametrizations are marked ``integration``: they need the Cassandra, LocalStack SQS
and Redis that ``infra/up.sh`` starts; ``-m "not integration"`` runs the fakes alone. Each test
gets its own callers, shards, groups and SQS queues; the Cassandra keyspace
(``TRIGGER_CONTRACT_KEYSPACE``, default ``triggers_contract``) is shared by the session.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.contract.support import DeadLetterRow, QueueUnderTest, Store, unique
from tests.integration.helpers import SqsAdmin
from tests.keys import fixture_cipher
from trigger_service.adapters.cassandra.migrate import migrate
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.deaths import MemoryDispatcherDeaths
from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.adapters.memory.inbox import MemoryInboxBus
from trigger_service.adapters.memory.store import (
    MemoryLease,
    MemoryQueue,
    MemoryStore,
)
from trigger_service.adapters.redis.client import open_client
from trigger_service.adapters.redis.deaths import RedisDispatcherDeaths
from trigger_service.adapters.redis.idempotency import RedisIdempotencyCache
from trigger_service.adapters.redis.inbox_bus import RedisInboxBus, open_listener
from trigger_service.adapters.redis.lease import RedisLease
from trigger_service.adapters.sqs import SqsQueue
from trigger_service.config.sqs import SqsSettings
from trigger_service.config.stores import CassandraSettings, RedisSettings
from trigger_service.core.ports import Lease
from trigger_service.core.ports.deaths import DispatcherDeaths
from trigger_service.core.ports.idempotency import IdempotencyCache
from trigger_service.core.ports.inbox import InboxBus
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.metrics import InMemoryMetrics

KEYSPACE = os.environ.get("TRIGGER_CONTRACT_KEYSPACE", "triggers_contract")
REDIS_URL = RedisSettings().url


def _impls(fake: str, real: str) -> list[object]:
    return [pytest.param(fake), pytest.param(real, marks=pytest.mark.integration)]


@pytest.fixture(scope="session")
def cassandra_store() -> Iterator[CassandraStore]:
    settings = CassandraSettings(keyspace=KEYSPACE)
    migrate(settings, SystemClock().now_ms())
    store = CassandraStore.open_sync(settings, fixture_cipher())
    yield store
    store.close_sync()


@pytest.fixture(params=_impls("memory", "cassandra"))
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        return MemoryStore()
    real: CassandraStore = request.getfixturevalue("cassandra_store")
    return real


# Rows per page of ``small_pages_store``: a read of ten rows takes four requests.
SMALL_PAGE = 3
QUEUE_LANES = 3  # fewer than the default 8 (each is a queue to create), more than one
QUEUE_HIGH_LANES = 1  # after them: lane 3


@pytest.fixture(scope="session")
def small_pages_cassandra_store(cassandra_store: CassandraStore) -> Iterator[CassandraStore]:
    """A second connection to the contract keyspace (migrated by ``cassandra_store``) that
    reads ``SMALL_PAGE`` rows per page: real paging without writing thousands of rows."""
    store = CassandraStore.open_sync(CassandraSettings(keyspace=KEYSPACE, fetch_size=SMALL_PAGE),
                                     fixture_cipher())
    yield store
    store.close_sync()


@pytest.fixture(params=_impls("memory", "cassandra"))
def small_pages_store(request: pytest.FixtureRequest) -> Store:
    """``store`` whose multi-row reads come back in pages of ``SMALL_PAGE`` rows."""
    if request.param == "memory":
        fake = MemoryStore()
        fake.page_size = SMALL_PAGE
        return fake
    real: CassandraStore = request.getfixturevalue("small_pages_cassandra_store")
    return real


@pytest.fixture(params=_impls("memory", "sqs"))
async def queue(request: pytest.FixtureRequest) -> AsyncIterator[QueueUnderTest]:
    if request.param == "memory":
        fake = MemoryQueue(SystemClock(), lanes=QUEUE_LANES, high_lanes=QUEUE_HIGH_LANES)

        async def fake_dead_letters() -> list[DeadLetterRow]:
            return [(d.trigger_id, d.fire_at_ms, d.reason) for d in fake.dead_letters]

        yield QueueUnderTest("memory", fake, fake_dead_letters)
        return
    name = unique("c-")
    settings = SqsSettings(queue=name, dlq=f"{name}-dlq", lanes=QUEUE_LANES,
                           high_lanes=QUEUE_HIGH_LANES)
    real = await SqsQueue.connect(settings, visibility_timeout_s=30, metrics=InMemoryMetrics(),
                                  clock=SystemClock())
    admin = await SqsAdmin(settings).open()

    async def real_dead_letters() -> list[DeadLetterRow]:
        return [(str(b["triggerId"]), int(b["fireAtMs"]), str(b["reason"]))
                for b in await admin.dlq_bodies()]

    try:
        yield QueueUnderTest("sqs", real, real_dead_letters)
    finally:
        await real.close()
        await admin.delete_queues()
        await admin.close()


@pytest.fixture(params=_impls("memory", "redis"))
async def cache(request: pytest.FixtureRequest) -> AsyncIterator[IdempotencyCache]:
    """Tests use unique callers and TTLs of at most a minute, so nothing needs deleting."""
    if request.param == "memory":
        yield MemoryIdempotencyCache(SystemClock())
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisIdempotencyCache(client)
    finally:
        await client.aclose()


@pytest.fixture
def lease_ttl_ms() -> int:
    """The lease TTL; tests about expiry parametrize it down to a few hundred ms."""
    return 10_000


@pytest.fixture(params=_impls("memory", "redis"))
async def lease(request: pytest.FixtureRequest, lease_ttl_ms: int) -> AsyncIterator[Lease]:
    if request.param == "memory":
        yield MemoryLease(SystemClock(), lease_ttl_ms)
        return
    client = open_client(REDIS_URL)
    group = unique("contract-")
    try:
        yield RedisLease(client, lease_ttl_ms, group)
    finally:
        keys = [k async for k in client.scan_iter(match=f"*:{group}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture(params=_impls("memory", "redis"))
async def deaths(request: pytest.FixtureRequest) -> AsyncIterator[DispatcherDeaths]:
    """Tests use unique incarnations and TTLs of seconds: nothing needs deleting."""
    if request.param == "memory":
        yield MemoryDispatcherDeaths(SystemClock())
        return
    client = open_client(REDIS_URL)
    try:
        yield RedisDispatcherDeaths(client)
    finally:
        await client.aclose()


@pytest.fixture(params=_impls("memory", "redis"))
async def inbox_bus(request: pytest.FixtureRequest) -> AsyncIterator[InboxBus]:
    """Pub/sub keeps nothing, and tests use unique callers: nothing needs deleting."""
    if request.param == "memory":
        yield MemoryInboxBus()
        return
    client = open_client(REDIS_URL)
    bus = RedisInboxBus(client, open_listener(REDIS_URL))
    try:
        yield bus
    finally:
        await bus.close()
        await client.aclose()
