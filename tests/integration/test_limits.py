"""Limits against the real Redis and Cassandra: two API apps (two processes' worth: their
own Redis clients) share one token bucket and one pending quota per caller; and a real
listening socket keeps serving while 300 half-open connections stall, then closes them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestClient, TestServer

from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.memory.idempotency import MemoryIdempotencyCache
from trigger_service.adapters.memory.store import MemoryLease, MemoryQueue
from trigger_service.adapters.redis.client import open_from_settings
from trigger_service.adapters.redis.limits import RedisPendingQuota, RedisRateLimiter
from trigger_service.app.quota import QuotaGate
from trigger_service.app.triggers import TriggerService
from trigger_service.config.callers import CallerRegistry, hash_token
from trigger_service.config.limits import LimitSettings
from trigger_service.config.settings import Settings
from trigger_service.core.time.clock import SystemClock
from trigger_service.http.app import build_app
from trigger_service.http.server import GuardedAppRunner
from trigger_service.platform.metrics import InMemoryMetrics
from trigger_service.platform.wiring import Runtime

pytestmark = pytest.mark.integration

Client = TestClient[web.Request, web.Application]
BURST = 5


@dataclass
class Api:
    client: Client
    runtime: Runtime
    service: TriggerService


def callers_for(tag: str) -> CallerRegistry:
    """``{tag}``: one token every 2 s (nothing refills mid-test); ``{tag}q``: rate to spare,
    at most 3 pending triggers."""
    def caller(name: str, rate_per_s: float) -> dict[str, object]:
        return {"token_sha256": hash_token(f"tok-{name}"), "rate_per_s": rate_per_s,
                "burst": BURST, "max_pending": 3,
                "callback_prefixes": ["http://127.0.0.1:9000/"]}

    return CallerRegistry.from_mapping({"callers": {tag: caller(tag, 0.5),
                                                    f"{tag}q": caller(f"{tag}q", 1000)}})


async def open_api(settings: Settings, callers: CallerRegistry, store: CassandraStore,
                   ) -> AsyncGenerator[Api, None]:
    """One API process: its own Redis client, metrics, queue fake (SQS is not under test)."""
    clock, metrics = SystemClock(), InMemoryMetrics()
    redis = open_from_settings(settings.redis)
    queue = MemoryQueue(clock)
    cache = MemoryIdempotencyCache(clock)
    quota = RedisPendingQuota(redis)
    gate = QuotaGate(quota, lambda n: getattr(callers.by_name(n), "max_pending", None), metrics)
    service = TriggerService(settings, store, store, queue, cache, clock, metrics, gate)
    runtime = fake_runtime(settings, callers, store, queue, cache, MemoryLease(clock, 10_000),
                           clock, metrics, limiter=RedisRateLimiter(redis), quota=quota)
    app = build_app(runtime, service)
    contract = check_contract(app)  # every exchange against openapi.yaml
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Api(client, runtime, service)
    finally:
        await client.close()
        await redis.aclose()
    contract.assert_clean()


@pytest.fixture
async def two_apis(store: CassandraStore) -> AsyncIterator[tuple[str, Api, Api]]:
    tag = "l" + uuid.uuid4().hex[:10]
    # Refusals answered at once: the bucket is under test, and a waiting refusal would let it
    # refill mid-test (the wait: tests/unit/limits/test_refusal_wait.py).
    base = Settings.from_env()
    settings = replace(base, limits=replace(base.limits, refusal_wait_s=0))
    callers = callers_for(tag)
    gen_a, gen_b = open_api(settings, callers, store), open_api(settings, callers, store)
    a, b = await anext(gen_a), await anext(gen_b)
    try:
        yield tag, a, b
    finally:
        for gen in (gen_a, gen_b):
            await gen.aclose()


async def test_two_api_processes_share_one_bucket(two_apis: tuple[str, Api, Api]) -> None:
    tag, a, b = two_apis
    auth = {"Authorization": f"Bearer tok-{tag}"}
    statuses = []
    for i in range(BURST + 3):
        client = (a if i % 2 == 0 else b).client
        resp = await client.get("/v1/triggers", headers=auth)
        statuses.append(resp.status)
        if resp.status == 429:
            assert resp.headers["Retry-After"] in ("1", "2")
            assert (await resp.json())["error"] == "rate_limited"
    # Alone, each would have allowed BURST; together they allowed BURST in all.
    assert statuses == [200] * BURST + [429] * 3
    refused = [api.runtime.metrics.snapshot().get("rate_limited_total", 0) for api in (a, b)]
    assert sum(refused) == 3 and all(refused)


async def test_two_api_processes_share_one_pending_quota(
        two_apis: tuple[str, Api, Api]) -> None:
    tag, a, b = two_apis
    auth = {"Authorization": f"Bearer tok-{tag}q"}  # rate to spare: the quota is under test
    body = {"callbackUrl": "http://127.0.0.1:9000/cb", "delaySeconds": 30 * 86_400}
    created, statuses = [], []
    for i in range(5):
        resp = await (a if i % 2 == 0 else b).client.post("/v1/triggers", json=body,
                                                           headers=auth)
        statuses.append(resp.status)
        if resp.status == 201:
            created.append((await resp.json())["triggerId"])
        else:
            assert (await resp.json())["error"] == "quota_exceeded"
    assert statuses == [201, 201, 201, 429, 429]
    resp = await b.client.delete(f"/v1/triggers/{created[0]}", headers=auth)
    assert resp.status == 200
    resp = await a.client.post("/v1/triggers", json=body, headers=auth)
    assert resp.status == 201
    created.append((await resp.json())["triggerId"])
    for tid in created[1:]:  # leave nothing pending in the shared keyspace
        assert (await a.client.delete(f"/v1/triggers/{tid}", headers=auth)).status == 200


async def test_300_half_open_connections_do_not_stop_a_normal_request(
        store: CassandraStore) -> None:
    limits = LimitSettings()  # the default head deadline: generous, not a speed test
    settings = replace(Settings.from_env(), limits=limits)
    tag = "h" + uuid.uuid4().hex[:10]
    callers = callers_for(tag)
    clock, metrics = SystemClock(), InMemoryMetrics()
    queue, cache = MemoryQueue(clock), MemoryIdempotencyCache(clock)
    service = TriggerService(settings, store, store, queue, cache, clock, metrics)
    runtime = fake_runtime(settings, callers, store, queue, cache, MemoryLease(clock, 10_000),
                           clock, metrics)
    runner = GuardedAppRunner(build_app(runtime, service), limits, metrics, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = int(runner.addresses[0][1])
    stalled = []
    try:
        for _ in range(300):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /v1/triggers HTTP/1.1\r\nHost: x\r\nAuthoriz")
            stalled.append((reader, writer))
        async with ClientSession() as session:
            resp = await session.get(f"http://127.0.0.1:{port}/v1/triggers",
                                     headers={"Authorization": f"Bearer tok-{tag}q"})
            assert resp.status == 200 and (await resp.json())["items"] == []
            health = await session.get(f"http://127.0.0.1:{port}/healthz")
            assert health.status == 200
        # Served while all 300 were still stalling: none had been timed out yet.
        assert metrics.snapshot().get("http_head_timeouts_total", 0) == 0
        assert not any(reader.at_eof() for reader, _ in stalled)
        served_at = time.monotonic()
        answers = await asyncio.wait_for(
            asyncio.gather(*(reader.read() for reader, _ in stalled)), timeout=30)
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers)
        assert all(a.endswith(b'"the request head did not arrive in time"}') for a in answers)
        assert metrics.snapshot()["http_head_timeouts_total"] == 300
        assert time.monotonic() - served_at <= limits.header_timeout_s + 5
    finally:
        for _, writer in stalled:
            writer.close()
        await runner.cleanup()


async def test_an_unreachable_redis_fails_open(store: CassandraStore) -> None:
    tag = "r" + uuid.uuid4().hex[:10]
    settings = replace(Settings.from_env(), redis=replace(Settings.from_env().redis,
                                                          url="redis://127.0.0.1:1/0"))
    gen = open_api(settings, callers_for(tag), store)
    api = await anext(gen)
    try:
        auth = {"Authorization": f"Bearer tok-{tag}"}  # burst 5: the 6th would be refused
        statuses = [(await api.client.get("/v1/triggers", headers=auth)).status
                    for _ in range(BURST + 2)]
        assert statuses == [200] * (BURST + 2)
        assert api.runtime.metrics.snapshot()["rate_limit_errors_total"] == BURST + 2
    finally:
        await gen.aclose()
