"""Claims taken ahead of the fire time on the real stack: a cancel still wins over one until
the cancel fence. The API asks SQS to show messages 10 s early here (the suite's default is
1 s), so the dispatcher holds them long enough to claim ahead."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"TRIGGER_ENQUEUE_LEAD_S": "10"}


async def get(stack: Stack, tid: str) -> dict:  # type: ignore[type-arg]
    resp = await stack.client.get(f"/v1/triggers/{tid}", headers=stack.auth())
    assert resp.status == 200
    return await resp.json()  # type: ignore[no-any-return]


async def test_cancel_after_an_early_claim_still_wins(stack: Stack) -> None:
    """A dispatcher that claims 6 s ahead (a backlog's lead): triggers already IN_FLIGHT
    are cancelled with a 200 until the cancel fence (2 s before the fire time) and are never
    sent; their neighbours, claimed the same way, fire."""
    await stack.start_dispatcher(claim_lead_ms=6_000)
    ids = []
    for _ in range(8):
        _, body, _ = await stack.post(stack.body(delaySeconds=9))
        ids.append(body["triggerId"])
    rec = stack.receiver
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        statuses = [(await get(stack, t))["status"] for t in ids]
        if all(s == "IN_FLIGHT" for s in statuses):
            break
        await asyncio.sleep(0.2)
    assert statuses == ["IN_FLIGHT"] * len(ids)
    cancelled, kept = ids[::2], ids[1::2]
    for tid in cancelled:
        resp = await stack.client.delete(f"/v1/triggers/{tid}", headers=stack.auth())
        assert resp.status == 200, await resp.text()
    assert await rec.wait_for(lambda: all(rec.for_trigger(t) for t in kept), 20)
    await asyncio.sleep(1.5)
    assert [t for t in cancelled if rec.for_trigger(t)] == []
    assert {(await get(stack, t))["status"] for t in cancelled} == {"CANCELLED"}
