"""``priority`` on the real stack (Cassandra, SQS, Redis; every exchange checked against
openapi.yaml): create, GET and the listing, PATCH of the priority alone, batch items with
mixed priorities, a keyed retry with another priority, a bad value refused, and the SDK."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import Stack
from trigger_client import AsyncTriggerClient, Priority, TriggerRequest
from trigger_service.core.model import Priority as StoredPriority

pytestmark = pytest.mark.integration


@pytest.fixture
def extra_env() -> dict[str, str]:
    # As in production: messages are visible (and held) well ahead of their due time. With
    # the tests' 1 s lead the high lane's messages raced the herd's to the dispatcher, and on
    # a loaded machine the first bulkhead-full of the herd had started before they came.
    return {"TRIGGER_SQS_ENQUEUE_LEAD_S": "5"}


async def view(stack: Stack, trigger_id: str) -> dict[str, Any]:
    resp = await stack.client.get(f"/v1/triggers/{trigger_id}", headers=stack.auth())
    assert resp.status == 200
    return dict(await resp.json())


async def test_create_high_then_patch_it_to_low(stack: Stack) -> None:
    status, body, _ = await stack.post(stack.body(delaySeconds=3600, priority="high"))
    assert status == 201, body
    tid = body["triggerId"]
    assert (await view(stack, tid))["priority"] == "high"
    stored = await stack.service.get(stack.caller, tid)  # read back from Cassandra
    assert stored.priority is StoredPriority.HIGH
    resp = await stack.client.patch(f"/v1/triggers/{tid}", json={"priority": "low"},
                                    headers=stack.auth())
    patched = await resp.json()
    assert resp.status == 200, patched
    assert patched["priority"] == "low"
    got = await view(stack, tid)
    assert got["priority"] == "low" and got["fireAt"] == body["fireAt"]  # nothing else moved
    after = await stack.service.get(stack.caller, tid)
    assert after.priority is StoredPriority.LOW
    assert after.revision == (stored.revision or 0) + 1  # the edit's conditional write
    resp = await stack.client.get("/v1/triggers?status=PENDING", headers=stack.auth())
    items = (await resp.json())["items"]
    assert [i["priority"] for i in items if i["triggerId"] == tid] == ["low"]


async def test_a_batch_takes_mixed_priorities(stack: Stack) -> None:
    items = [stack.body(delaySeconds=3600, priority="high"), stack.body(delaySeconds=3600),
             stack.body(delaySeconds=3600, priority="low"),
             stack.body(delaySeconds=3600, priority="urgent")]
    resp = await stack.client.post("/v1/triggers/batch", json={"items": items},
                                   headers=stack.auth())
    answers = (await resp.json())["items"]
    assert resp.status == 200
    assert [a["status"] for a in answers] == [201, 201, 201, 400]
    assert (answers[3]["error"], answers[3]["field"]) == ("invalid_request", "priority")
    shown = [(await view(stack, a["triggerId"]))["priority"] for a in answers[:3]]
    assert shown == ["high", "normal", "low"]


async def test_a_bad_value_is_refused_naming_the_field(stack: Stack) -> None:
    for bad in ("URGENT", "High", 1):
        status, body, _ = await stack.post(stack.body(delaySeconds=60, priority=bad))
        assert status == 400, body
        assert set(body) == {"error", "message", "field"}
        assert (body["error"], body["field"]) == ("invalid_request", "priority")
    _, created, _ = await stack.post(stack.body(delaySeconds=3600))
    resp = await stack.client.patch(f"/v1/triggers/{created['triggerId']}",
                                    json={"priority": "top"}, headers=stack.auth())
    assert resp.status == 400 and (await resp.json())["field"] == "priority"
    assert (await view(stack, created["triggerId"]))["priority"] == "normal"


async def test_a_keyed_retry_with_another_priority_reuses_the_key(stack: Stack) -> None:
    first = stack.body(delaySeconds=3600, priority="high")
    s1, b1, _ = await stack.post(first, **{"Idempotency-Key": "prio-" + stack.caller})
    s2, b2, _ = await stack.post(first | {"priority": "low"},
                                 **{"Idempotency-Key": "prio-" + stack.caller})
    assert s1 == 201 and s2 == 422 and b2["error"] == "idempotency_key_reused"
    assert (await view(stack, b1["triggerId"]))["priority"] == "high"


async def test_the_sdk_sends_and_reads_it(stack: Stack, sdk: AsyncTriggerClient) -> None:
    url = stack.body()["callbackUrl"]
    created = await sdk.triggers.create(callback_url=url, delay_s=3600, priority=Priority.HIGH)
    assert (await sdk.triggers.get(created.trigger_id)).priority is Priority.HIGH
    patched = await sdk.triggers.patch(created.trigger_id, priority=None)
    assert patched.priority is Priority.NORMAL
    results = await sdk.triggers.create_batch([
        TriggerRequest(callback_url=url, delay_s=3600, priority="low"),
        TriggerRequest(callback_url=url, delay_s=3600)])
    got = [(await sdk.triggers.get(r.trigger_id or "")).priority for r in results]
    assert got == [Priority.LOW, Priority.NORMAL]


async def test_a_callers_high_ones_go_before_its_own_herd_due_with_them(stack: Stack) -> None:
    """The priority herd: 200 low and then 5 high triggers of one caller due at one
    instant, its receiver answering each low one 0.2 s late (the caller's bulkhead, 50 at
    once, is busy for about a second). The high ones come on their own lane, are claimed
    ahead of the herd and sent first: they are among the first arrivals."""
    await stack.start_dispatcher()
    stack.receiver.hang_s = 0.2
    at = datetime.now(UTC) + timedelta(seconds=6)
    due = {"fireAt": at.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
    lows = [stack.body(priority="low", **due) for _ in range(200)]
    highs = [stack.body(priority="high", **due) for _ in range(5)]
    ids: dict[str, list[str]] = {}
    for name, items in (("low", lows), ("high", highs)):
        resp = await stack.client.post("/v1/triggers/batch", json={"items": items},
                                       headers=stack.auth())
        answers = (await resp.json())["items"]
        assert resp.status == 200 and {a["status"] for a in answers} == {201}
        ids[name] = [a["triggerId"] for a in answers]
    for tid in ids["low"]:
        stack.receiver.script[tid] = ["hang"]
    assert await stack.receiver.wait_for(lambda: len(stack.receiver.arrivals) >= 205, 60)
    order = [a.trigger_id for a in stack.receiver.arrivals]
    firsts = [order.index(t) for t in ids["high"]]
    assert max(firsts) < 10, (firsts, len(order))
