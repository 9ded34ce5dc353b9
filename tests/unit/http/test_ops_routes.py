"""``GET /v1/ops/overview`` and the request-latency series, on in-memory fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import NOW_MS, Env, make_env
from tests.unit.http.test_routes import AUTH, CALLERS, OPERATOR, VIEWER
from trigger_service.adapters.memory.board import MemoryOpsBoard
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.core.errors import CacheError, QueueError
from trigger_service.core.ports.ops import BreakerView
from trigger_service.core.time.lag import BUCKETS, bucket_of, slot_of
from trigger_service.http.app import build_app

Client = TestClient[web.Request, web.Application]
ORIGIN = "http://127.0.0.1:9000"


@dataclass
class Ops:
    env: Env
    board: MemoryOpsBoard
    client: Client


@pytest.fixture
async def ops() -> AsyncIterator[Ops]:
    env = make_env()
    board = MemoryOpsBoard()
    runtime = fake_runtime(env.settings, CALLERS, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics, board=board)
    app = build_app(runtime, env.service)
    contract = check_contract(app)  # every exchange against openapi.yaml
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Ops(env, board, client)
    finally:
        await client.close()
    contract.assert_clean()


async def test_overview_for_operators_and_viewers_only(ops: Ops) -> None:
    for headers, status in ((OPERATOR, 200), (VIEWER, 200), (AUTH, 403), ({}, 401)):
        resp = await ops.client.get("/v1/ops/overview", headers=headers)
        assert resp.status == status, await resp.text()
        if status != 200:
            body = await resp.json()
            assert set(body) == {"error", "message"}
            assert body["error"] == ("forbidden" if status == 403 else "unauthorized")


async def test_overview_shape_with_counters_queues_breakers_and_lag(ops: Ops) -> None:
    await ops.env.store.add_counters({'dead_lettered_total{reason="gone"}': 2,
                                      'deliveries_total{outcome="fired"}': 7})
    await ops.env.queue.send_dead_letter("t1", NOW_MS, "gone")
    await ops.board.publish_breakers("d1", [
        BreakerView(ORIGIN, "closed", NOW_MS - 5, caller="orders"),
        BreakerView(ORIGIN, "closed", NOW_MS - 5, caller="billing")], NOW_MS, 30)
    await ops.board.publish_breakers("d2", [
        BreakerView(ORIGIN, "open", NOW_MS - 250, caller="orders")], NOW_MS, 30)
    counts = [0] * BUCKETS
    counts[bucket_of(0.004)] = 98
    counts[bucket_of(2.0)] = 2
    await ops.board.add_lag({slot_of(NOW_MS - 60_000): counts})
    await ops.board.add_lag({slot_of(NOW_MS - 400_000): counts})  # outside the window
    resp = await ops.client.get("/v1/ops/overview", headers=VIEWER)
    assert resp.status == 200
    assert await resp.json() == {
        "counters": {'dead_lettered_total{reason="gone"}': 2,
                     'deliveries_total{outcome="fired"}': 7},
        "deadLetters": {"byReason": {"max_attempts": 0, "max_age": 0, "gone": 2,
                                     "callback_not_allowed": 0, "budget_exhausted": 0,
                                     "recipient_deleted": 0, "expired": 0,
                                     "endpoint_disabled": 0}},
        "queues": {"main": 0, "deadLetter": 1},
        "breakers": [  # per (caller, origin): orders' open circuit leaves billing's closed
            {"caller": "billing", "origin": ORIGIN, "state": "closed",
             "updatedAt": "2023-11-14T22:13:19.995Z"},
            {"caller": "orders", "origin": ORIGIN, "state": "open",
             "updatedAt": "2023-11-14T22:13:19.750Z"}],
        "lag": {"windowS": 300, "count": 100, "p50Ms": 3.8, "p95Ms": 4.9, "p99Ms": 1750.0},
    }


async def test_overview_without_the_board_or_sqs_still_answers(ops: Ops) -> None:
    async def down(*args: object) -> list[int]:
        raise CacheError("redis away")

    ops.board.read_lag = down  # type: ignore[assignment,method-assign]
    ops.env.queue.failures["visible_backlog"] = QueueError("sqs away")
    resp = await ops.client.get("/v1/ops/overview", headers=OPERATOR)
    body = await resp.json()
    assert resp.status == 200
    assert body["queues"] == {"main": None, "deadLetter": None} and body["breakers"] == []
    assert body["lag"] == {"windowS": 300, "count": 0, "p50Ms": None, "p95Ms": None,
                           "p99Ms": None}


async def test_request_latency_is_by_route_pattern_and_status(ops: Ops) -> None:
    await ops.client.get("/v1/triggers/trg_nope", headers=AUTH)
    await ops.client.get("/no/such/path")
    text = await (await ops.client.get("/metrics")).text()
    assert ('trigger_http_request_duration_seconds_count{method="GET",'
            'route="/v1/triggers/{id}",status="404"} 1.0') in text
    assert ('trigger_http_request_duration_seconds_count{method="GET",route="unmatched",'
            'status="404"} 1.0') in text
    assert 'trigger_queue_depth{queue="dead_letter"} 0.0' in text
