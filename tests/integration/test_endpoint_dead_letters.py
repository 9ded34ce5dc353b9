"""Endpoint health for a caller whose ``on_disabled`` is ``dead_letter``, on the real stack:
a due occurrence of its disabled endpoint ends FAILED with a dead letter
``endpoint_disabled`` (not attempted); enabling with a replay delivers it once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.integration.conftest import ANY_RECIPIENT, Stack
from trigger_service.core.endpoint_health import first_failure
from trigger_service.core.time.timing import format_rfc3339_ms
from trigger_service.core.urls import callback_origin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def caller_controls() -> str:
    return ANY_RECIPIENT + 'on_disabled = "dead_letter"\n'


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_ENDPOINT_HEALTH_REFRESH_S": "1"}


async def _letters(stack: Stack) -> list[dict[str, Any]]:
    resp = await stack.client.get("/v1/dead-letters", headers=stack.auth(),
                                  params={"reason": "endpoint_disabled"})
    assert resp.status == 200, await resp.text()
    return list((await resp.json())["items"])


async def test_dead_lettered_while_disabled_then_replayed_once(stack: Stack) -> None:
    origin = callback_origin(stack.receiver.base_url)
    now_ms = int(time.time() * 1000)
    since_ms = now_ms - 1_000
    health = stack.runtime.endpoint_health  # as a dispatcher writes it after the failures
    h = await health.note_first_failure(first_failure(stack.caller, origin, now_ms - 9_000,
                                                      "HTTP 503"), 100)
    assert h is not None and await health.mark_disabled(h, now_ms)
    await stack.start_dispatcher(endpoints=True)
    status, got, _ = await stack.post(stack.body(fireAt=format_rfc3339_ms(now_ms + 500)))
    assert status == 201, got
    tid = got["triggerId"]
    view = await stack.wait_status(tid, "FAILED", 10)
    assert view["status"] == "FAILED" and view["lastError"] == "endpoint_disabled"
    assert [d["triggerId"] for d in await _letters(stack)] == [tid]
    assert stack.receiver.for_trigger(tid) == []  # never attempted

    resp = await stack.client.post("/v1/endpoints/enable", headers=stack.auth(), json={
        "origin": origin, "replaySince": format_rfc3339_ms(since_ms)})
    got = await resp.json()
    assert resp.status == 200, got
    assert got["replay"]["deadLetterJobId"] and got["replay"]["triggerJobId"] is None
    assert await stack.receiver.wait_for(lambda: bool(stack.receiver.for_trigger(tid)), 15)
    await asyncio.sleep(2)  # a second delivery would have come by now
    assert len(stack.receiver.for_trigger(tid)) == 1
    assert await _letters(stack) == []  # replayed: no longer open
