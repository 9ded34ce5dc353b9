"""A trigger's attempts end to end on the real stack: API → Cassandra → SQS → dispatcher →
receiver, and back through ``GET /v1/triggers/{id}/attempts``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_cli import base_url, cli, cli_json
from trigger_client import AsyncTriggerClient, NotFound
from trigger_service.core.time.timing import parse_rfc3339_ms

pytestmark = pytest.mark.integration


async def wait_attempts(stack: Stack, tid: str, count: int, timeout_s: float = 30) -> Any:
    """The trigger's attempts page once ``count`` are there (the history line of the last
    attempt may land just after its outcome)."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = await stack.client.get(f"/v1/triggers/{tid}/attempts", headers=stack.auth())
        body = await resp.json()
        assert resp.status == 200, body
        if len(body["items"]) >= count or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.2)


async def test_two_failures_then_a_delivery_list_newest_first(stack: Stack) -> None:
    await stack.start_dispatcher(max_attempts=5)
    _, body, _ = await stack.post(stack.body(delaySeconds=1))
    tid = body["triggerId"]
    stack.receiver.script[tid] = [500, 503]
    assert (await stack.wait_status(tid, "FIRED", 30))["status"] == "FIRED"
    page = await wait_attempts(stack, tid, 3)
    items = page["items"]
    assert [(i["attempt"], i["outcome"], i["statusCode"]) for i in items] == [
        (3, "delivered", 200), (2, "retry", 503), (1, "retry", 500)]
    assert page["nextCursor"] is None
    assert all(i["occurrenceId"] == f"{tid}.1" and i["channel"] == "webhook"
               and i["durationMs"] >= 0 for i in items)
    assert [i["error"] for i in items] == [None, "HTTP 503", "HTTP 500"]
    started = [parse_rfc3339_ms(i["startedAt"]) for i in items]
    assert started == sorted(started, reverse=True)
    # A page at a time: the cursor goes on where the first page stopped.
    resp = await stack.client.get(f"/v1/triggers/{tid}/attempts", headers=stack.auth(),
                                  params={"limit": "2"})
    first = await resp.json()
    resp = await stack.client.get(f"/v1/triggers/{tid}/attempts", headers=stack.auth(),
                                  params={"limit": "2", "cursor": first["nextCursor"]})
    rest = await resp.json()
    assert [i["attempt"] for i in first["items"] + rest["items"]] == [3, 2, 1]
    # Another caller's trigger is not found, exactly like an unknown one.
    other = stack.token + "-other"
    resp = await stack.client.get(f"/v1/triggers/{tid}/attempts", headers=stack.auth(other))
    assert resp.status == 404 and (await resp.json())["error"] == "not_found"
    # The SDK and triggerctl read the same page.
    async with AsyncTriggerClient(base_url(stack), stack.token) as client:
        sdk = await client.triggers.attempts(tid, limit=2)
        assert [(a.attempt, a.outcome) for a in sdk.items] == [(3, "delivered"), (2, "retry")]
        more = await client.triggers.attempts(tid, cursor=sdk.next_cursor)
        assert [a.attempt for a in more.items] == [1] and more.next_cursor is None
    async with AsyncTriggerClient(base_url(stack), other) as theirs:
        with pytest.raises(NotFound):
            await theirs.triggers.attempts(tid)
    shown = await cli_json(stack, "attempts", tid)
    assert [i["outcome"] for i in shown["items"]] == ["delivered", "retry", "retry"]
    code, text = await cli(stack, "attempts", tid, "--limit", "1")
    assert code == 0 and "delivered" in text and "--cursor" in text
