"""``GET /v1/ops/flow`` on in-memory fakes (every exchange checked against openapi.yaml):
one row per key over every dispatcher's view, the busiest first, operators and viewers only,
and an empty list while the board does not answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.fake_runtime import fake_runtime
from tests.openapi_check import check_contract
from tests.unit.app.support import NOW_MS, make_env
from tests.unit.http.test_routes import AUTH, CALLERS, OPERATOR, VIEWER
from trigger_service.adapters.memory.flow import MemoryFlowBoard
from trigger_service.adapters.memory.store import MemoryLease
from trigger_service.core.ports.flow import FlowView
from trigger_service.http.app import build_app

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def board() -> MemoryFlowBoard:
    return MemoryFlowBoard()


@pytest.fixture
async def client(board: MemoryFlowBoard) -> AsyncIterator[Client]:
    env = make_env()
    runtime = fake_runtime(env.settings, CALLERS, env.store, env.queue, env.cache,
                           MemoryLease(env.clock, 10_000), env.clock, env.metrics,
                           flow_board=board)
    app = build_app(runtime, env.service)
    contract = check_contract(app)
    c: Client = TestClient(TestServer(app))
    await c.start_server()
    try:
        yield c
    finally:
        await c.close()
    contract.assert_clean()


async def test_one_row_per_key_over_every_dispatcher_busiest_first(
        client: Client, board: MemoryFlowBoard) -> None:
    await board.publish_flow("d0", [FlowView("a", 100.0, 10, 3, 2.0, 9.5, 300, caller="x"),
                                    FlowView("quiet", 0.5, None, 0, 0.0, 0.0, 1, caller="x")],
                             NOW_MS, 30)
    await board.publish_flow("d1", [FlowView("a", 100.0, 10, 4, 1.0, 12.25, 100, caller="x")],
                             NOW_MS, 30)
    resp = await client.get("/v1/ops/flow", headers=VIEWER)
    assert resp.status == 200
    body = await resp.json()
    assert body["windowS"] == 60
    assert body["keys"] == [
        {"caller": "x", "key": "a", "default": False, "ratePerSecond": 100.0,
         "parallelism": 10, "openNow": 7, "delayP50Seconds": 2.0, "delayMaxSeconds": 12.25,
         "recentStarts": 400, "dispatchers": 2},
        {"caller": "x", "key": "quiet", "default": False, "ratePerSecond": 0.5,
         "parallelism": None, "openNow": 0, "delayP50Seconds": 0.0, "delayMaxSeconds": 0.0,
         "recentStarts": 1, "dispatchers": 1}]


async def test_two_callers_equal_keys_are_two_rows(
        client: Client, board: MemoryFlowBoard) -> None:
    """Keys are per caller: a key another caller writes (or a caller's default of the same
    text) is its own row, never merged into this caller's."""
    await board.publish_flow("d0", [
        FlowView("x|https://h:443", 1.0, None, 1, 0.0, 0.0, 1, caller="x", default=True),
        FlowView("x|https://h:443", 1.0, None, 2, 0.0, 0.0, 1, caller="x"),
        FlowView("x|https://h:443", 1.0, None, 3, 0.0, 0.0, 1, caller="y")], NOW_MS, 30)
    body = await (await client.get("/v1/ops/flow", headers=VIEWER)).json()
    assert [(k["caller"], k["default"], k["openNow"]) for k in body["keys"]] == [
        ("y", False, 3), ("x", False, 2), ("x", True, 1)]


async def test_operators_and_viewers_only_and_empty_without_the_board(
        client: Client, board: MemoryFlowBoard) -> None:
    assert (await client.get("/v1/ops/flow", headers=AUTH)).status == 403
    assert (await client.get("/v1/ops/flow")).status == 401
    board.fail = True
    resp = await client.get("/v1/ops/flow", headers=OPERATOR)
    assert resp.status == 200 and (await resp.json())["keys"] == []
