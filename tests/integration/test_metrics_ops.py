"""Metrics and the ops overview on the real stack: the fire lag a delivery observes, breaker
states and lag published through the real Redis, and circuits per callback origin."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.integration.conftest import Receiver, Stack, serving
from trigger_service.adapters import schema
from trigger_service.adapters.redis.ops_board import RedisOpsBoard
from trigger_service.core.ports.ops import BreakerView

pytestmark = pytest.mark.integration


@pytest.fixture
async def healthy() -> AsyncIterator[Receiver]:
    """A second receiver: another callback origin (its own port)."""
    async with serving(Receiver()) as rec:
        yield rec


@pytest.fixture
def extra_prefixes(healthy: Receiver) -> tuple[str, ...]:
    return (healthy.base_url,)


def origin(rec: Receiver) -> str:
    return f"http://127.0.0.1:{rec.port}"


async def overview_until(stack: Stack, pred: Callable[[Any], bool],
                         timeout_s: float = 10) -> Any:
    """GET the overview (operator token) until ``pred`` holds or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = await stack.client.get("/v1/ops/overview", headers=stack.auth(
            stack.token + "-ops"))
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        if pred(body) or time.monotonic() >= deadline:
            return body
        await asyncio.sleep(0.2)


async def test_a_delivery_shows_its_fire_lag_and_its_origin_on_the_overview(
    stack: Stack,
) -> None:
    d = await stack.start_dispatcher()
    _, created, _ = await stack.post(stack.body(delaySeconds=1))
    view = await stack.wait_status(created["triggerId"], "FIRED", timeout_s=15)
    assert view["status"] == "FIRED"
    assert len(d.metrics.observed("fire_lag_seconds")) == 1
    assert "trigger_fire_lag_seconds_count 1.0" in d.metrics.exposition().decode()
    body = await overview_until(stack, lambda b: b["lag"]["count"] >= 1 and b["breakers"])
    assert body["lag"]["count"] == 1 and body["lag"]["windowS"] == 300
    assert body["lag"]["p50Ms"] is not None and body["lag"]["p99Ms"] is not None
    [breaker] = body["breakers"]
    assert breaker["origin"] == origin(stack.receiver) and breaker["state"] == "closed"
    assert breaker["updatedAt"].endswith("Z")
    assert isinstance(body["queues"]["main"], int)
    assert isinstance(body["queues"]["deadLetter"], int)
    assert set(body["deadLetters"]["byReason"]) == {
        "max_attempts", "max_age", "gone", "callback_not_allowed", "budget_exhausted",
        "recipient_deleted", "expired", "endpoint_disabled"}
    resp = await stack.client.get("/v1/ops/overview", headers=stack.auth())
    assert resp.status == 403 and (await resp.json())["error"] == "forbidden"


async def test_a_failing_origin_does_not_defer_another_origin(
    stack: Stack, healthy: Receiver
) -> None:
    stack.receiver.default_status = 500
    await stack.start_dispatcher(breaker_fail_max=2, breaker_reset_s=60)
    failing = [(await stack.post(stack.body(delaySeconds=1)))[1]["triggerId"] for _ in range(2)]
    body = await overview_until(stack, lambda b: any(
        x["state"] == "open" for x in b["breakers"]), timeout_s=15)
    assert {x["origin"]: x["state"] for x in body["breakers"]} == {
        origin(stack.receiver): "open"}
    # A retry claimed before the circuit opened may still post (the claim is taken up to
    # TRIGGER_DISPATCH_CLAIM_LEAD_MS early); after that the failing origin gets nothing.
    await asyncio.sleep(1.5)
    attempts = len(stack.receiver.arrivals)
    _, ok, _ = await stack.post({"callbackUrl": healthy.base_url + "cb", "payload": {},
                                 "delaySeconds": 1})
    assert (await stack.wait_status(ok["triggerId"], "FIRED", timeout_s=15))["status"] == "FIRED"
    await asyncio.sleep(1)  # the failing ones' retries (1 s backoff) are deferred meanwhile
    assert len(stack.receiver.arrivals) == attempts
    for trigger_id in failing:  # no attempt spent while deferred: none ran out of them
        assert (await stack.wait_status(trigger_id, "PENDING"))["status"] == "PENDING"
    body = await overview_until(stack, lambda b: len(b["breakers"]) == 2)
    assert {x["origin"]: x["state"] for x in body["breakers"]} == {
        origin(stack.receiver): "open", origin(healthy): "closed"}


async def test_one_callers_failures_do_not_open_anothers_circuit_to_the_same_origin(
    stack: Stack,
) -> None:
    # Two callers, one receiver (one origin): the first caller's triggers fail there.
    await stack.start_dispatcher(breaker_fail_max=2, breaker_reset_s=60)
    mine = []
    for _ in range(2):
        _, created, _ = await stack.post(stack.body(delaySeconds=1))
        stack.receiver.script[created["triggerId"]] = [500] * 10
        mine.append(created["triggerId"])
    body = await overview_until(stack, lambda b: any(
        x["state"] == "open" for x in b["breakers"]), timeout_s=15)
    here = origin(stack.receiver)
    assert {(x["caller"], x["origin"]): x["state"] for x in body["breakers"]} == {
        (stack.caller, here): "open"}
    # The other caller's deliveries to that same origin still go out.
    other = stack.auth(stack.token + "-other")
    theirs = []
    for _ in range(2):
        resp = await stack.client.post("/v1/triggers", json=stack.body(delaySeconds=1),
                                       headers=other)
        assert resp.status == 201, await resp.text()
        theirs.append((await resp.json())["triggerId"])
    assert await stack.receiver.wait_for(
        lambda: all(stack.receiver.for_trigger(t) for t in theirs), timeout_s=15)
    for trigger_id in theirs:
        view = await wait_status_as(stack, other, trigger_id, "FIRED")
        assert view["status"] == "FIRED" and view["attempts"] == 1
    body = await overview_until(stack, lambda b: len(b["breakers"]) == 2)
    assert {(x["caller"], x["origin"]): x["state"] for x in body["breakers"]} == {
        (stack.caller, here): "open", (f"{stack.caller}_other", here): "closed"}
    # ...while the first caller's stay deferred behind its own open circuit.
    for trigger_id in mine:
        assert (await stack.wait_status(trigger_id, "PENDING"))["status"] == "PENDING"


async def wait_status_as(stack: Stack, headers: dict[str, str], trigger_id: str, status: str,
                         timeout_s: float = 15) -> Any:
    """GET the trigger with ``headers`` until it has ``status`` (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = await stack.client.get(f"/v1/triggers/{trigger_id}", headers=headers)
        assert resp.status == 200, await resp.text()
        view = await resp.json()
        if view["status"] == status or time.monotonic() >= deadline:
            return view
        await asyncio.sleep(0.1)


async def test_the_redis_board_keys_circuits_by_caller_and_deletes_dropped_ones(
    stack: Stack,
) -> None:
    ns = f"board-{stack.caller}"
    board = RedisOpsBoard(stack.redis, ns)
    now_ms = int(time.time() * 1000)
    o = "http://127.0.0.1:9000"
    await board.publish_breakers("d1", [BreakerView(o, "open", now_ms, caller="a"),
                                        BreakerView(o, "closed", now_ms, caller="b")],
                                 now_ms, 30)
    # An earlier release's field (no caller) is skipped and deleted, not misread.
    key = schema.ops_breakers_key(ns)
    await stack.redis.hset(key, "d0|" + o, '{"state": "open", "changedAtMs": 1, '  # type: ignore[misc]
                           '"expiresAtMs": 99999999999999}')
    views = await board.read_breakers(now_ms)
    assert sorted((v.source, v.caller, v.origin, v.state) for v in views) == [
        ("d1", "a", o, "open"), ("d1", "b", o, "closed")]
    assert not await stack.redis.hexists(key, "d0|" + o)  # type: ignore[misc]
    await board.publish_breakers("d1", [], now_ms, 30, dropped=[("b", o)])
    assert [(v.caller, v.state) for v in await board.read_breakers(now_ms)] == [("a", "open")]
    await stack.redis.delete(key)
