"""Metrics and the ops overview on the real stack: the fire lag a delivery observes, breaker
states and lag published through the real Redis, and circuits per callback origin."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.integration.conftest import Receiver, Stack, serving

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
        "max_attempts", "max_age", "gone", "callback_not_allowed"}
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
    # TRIGGER_CLAIM_LEAD_MS early); after that the failing origin gets nothing.
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
