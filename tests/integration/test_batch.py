"""``POST /v1/triggers/batch`` on the real stack (Cassandra, SQS, Redis, a dispatcher and a
loopback receiver), through HTTP, the SDK (sync and async) and ``triggerctl import``."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_cli import cli
from tests.integration.test_sdk import base_url
from trigger_client import AsyncTriggerClient, TriggerClient, TriggerRequest
from trigger_service.core.time.timing import format_rfc3339_ms

pytestmark = pytest.mark.integration

# Of the 1,000 items: which are invalid, which repeat an earlier item's key (same body or
# another), and which fire within seconds (the others an hour out).
INVALID: dict[int, dict[str, Any]] = {3: {"delaySeconds": -1}, 10: {"callbackUrl": "http://elsewhere.example/x"},
           20: {"bogus": True}, 30: {"idempotencyKey": ""}}
SAME_BODY_AS = {500: 0, 501: 1, 999: 2}  # item -> the earlier item it repeats exactly
OTHER_BODY_AS = {502: 5, 998: 6}  # item -> the earlier item whose key it reuses
NEAR = range(0, 40)


async def post_batch(stack: Stack, items: list[Any],
                     token: str | None = None) -> tuple[int, Any]:
    """One batch request (as ``token``'s caller, the stack's by default): status and body."""
    raw = io.BytesIO(json.dumps({"items": items}).encode())
    resp = await stack.client.post("/v1/triggers/batch", data=raw, headers={
        **stack.auth(token), "Content-Type": "application/json"})
    return resp.status, await resp.json()


async def create_due_at(stack: Stack, n: int, due_ms: int, url: Callable[[int], str], *,
                        token: str | None = None, **extra: Any) -> list[str]:
    """``n`` triggers due at ``due_ms`` through the batch route (1,000 a request, one request
    at a time), item ``i`` to ``url(i)`` with payload ``{"i": i}`` and ``extra``; their ids
    (each item must be created)."""
    ids: list[str] = []
    for start in range(0, n, 1_000):
        items = [{"callbackUrl": url(i), "payload": {"i": i},
                  "fireAt": format_rfc3339_ms(due_ms), **extra}
                 for i in range(start, min(n, start + 1_000))]
        status, body = await post_batch(stack, items, token=token)
        assert status == 200, body
        refused = [a for a in body["items"] if a["status"] != 201]
        assert not refused, f"{len(refused)} refused, the first: {refused[:2]}"
        ids += [a["triggerId"] for a in body["items"]]
    return ids


def thousand(stack: Stack, run: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(1000):
        delay = {"delaySeconds": 2} if i in NEAR else {"delaySeconds": 3600}
        items.append(stack.body(payload={"i": i}, idempotencyKey=f"{run}-{i}", **delay))
    for i, change in INVALID.items():
        items[i] = items[i] | change
    for i, earlier in SAME_BODY_AS.items():
        items[i] = dict(items[earlier])
    for i, earlier in OTHER_BODY_AS.items():
        items[i] = items[earlier] | {"payload": {"other": i}}
    return items


async def test_a_thousand_items_each_answered_and_the_valid_ones_delivered_once(
        stack: Stack) -> None:
    dispatcher = await stack.start_dispatcher()
    run = uuid.uuid4().hex[:8]
    items = thousand(stack, run)
    status, body = await post_batch(stack, items)
    assert status == 200
    answers = body["items"]
    assert [a["index"] for a in answers] == list(range(1000))
    for i, a in enumerate(answers):
        if i in INVALID:
            assert a["status"] in (400, 422) and a["error"], (i, a)
        elif i in SAME_BODY_AS:
            first = answers[SAME_BODY_AS[i]]
            assert (a["status"], a["replayed"], a["triggerId"]) == (
                200, True, first["triggerId"]), (i, a)
        elif i in OTHER_BODY_AS:
            assert (a["status"], a["error"]) == (422, "idempotency_key_reused"), (i, a)
        else:
            assert a["status"] == 201, (i, a)
    assert answers[3]["field"] == "delaySeconds" and answers[30]["field"] == "idempotencyKey"
    assert answers[10]["error"] == "callback_not_allowed"
    created = {a["triggerId"] for a in answers if a["status"] == 201}
    assert len(created) == 1000 - len(INVALID) - len(SAME_BODY_AS) - len(OTHER_BODY_AS)
    # Every one is stored as registered, under the id its key derives.
    for i in (50, 600, 997):
        resp = await stack.client.get(f"/v1/triggers/{answers[i]['triggerId']}",
                                      headers=stack.auth())
        view = await resp.json()
        assert view["payload"] == {"i": i} and view["status"] == "PENDING"
    near = {answers[i]["triggerId"] for i in NEAR if i not in INVALID}
    assert await stack.receiver.wait_for(
        lambda: near <= {a.trigger_id for a in stack.receiver.arrivals}, timeout_s=30)
    await asyncio.sleep(2)  # a duplicate would come now
    got = [a.trigger_id for a in stack.receiver.arrivals]
    assert sorted(got) == sorted(near)  # each near one once, none of the far ones
    # The same batch again: every valid item is a replay, nothing new is created.
    status, again = await post_batch(stack, items)
    assert status == 200
    assert {a["status"] for i, a in enumerate(again["items"])
            if i not in INVALID and i not in OTHER_BODY_AS} == {200}
    await dispatcher.close()


async def test_the_sdk_sync_and_async_create_batches(stack: Stack) -> None:
    url = stack.receiver.base_url + "cb"
    requests = [TriggerRequest(callback_url=url, delay_s=3600, payload={"n": n})
                for n in range(3)] + [TriggerRequest(callback_url=url, delay_s=-1)]
    keys = [f"sdk-{uuid.uuid4().hex}" for _ in requests]
    async with AsyncTriggerClient(base_url(stack), stack.token) as sdk:
        results = await sdk.triggers.create_batch(requests, idempotency_keys=keys)
    assert [r.status for r in results] == [201, 201, 201, 400]
    assert results[3].error == "invalid_request" and results[3].error_field == "delaySeconds"
    assert not results[3].ok and all(r.ok for r in results[:3])
    client = TriggerClient(base_url(stack), stack.token)
    try:
        again = await asyncio.to_thread(client.triggers.create_batch, requests,
                                        idempotency_keys=keys)
        fresh = await asyncio.to_thread(client.triggers.create_batch, requests[:1])
    finally:
        await asyncio.to_thread(client.close)
    assert [(r.status, r.replayed) for r in again[:3]] == [(200, True)] * 3
    assert [r.trigger_id for r in again[:3]] == [r.trigger_id for r in results[:3]]
    assert fresh[0].status == 201 and fresh[0].trigger_id not in {r.trigger_id
                                                                   for r in results}
    with pytest.raises(ValueError):
        await asyncio.to_thread(TriggerClient(base_url(stack), stack.token)
                                .triggers.create_batch, requests * 251)


async def test_triggerctl_import_sends_a_thousand_rows_a_request(stack: Stack,
                                                                 tmp_path: Path) -> None:
    rows = tmp_path / "campaign.jsonl"
    url = stack.receiver.base_url + "cb"
    lines = [{"callbackUrl": url, "delaySeconds": 3600, "payload": {"row": n}}
             for n in range(1, 1204)]
    lines[1100] = {"callbackUrl": url, "delaySeconds": -5}
    rows.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    code, out = await cli(stack, "import", str(rows))
    assert code == 1 and "1202 created, 0 replayed (created before), 1 rejected" in out, out
    assert "row 1101: invalid_request" in out
    assert stack.runtime.metrics.snapshot()["batch_items_total"] == 1203  # all via batches
    code, out = await cli(stack, "import", str(rows))  # again: nothing created twice
    assert code == 1 and "0 created, 1202 replayed (created before), 1 rejected" in out, out
