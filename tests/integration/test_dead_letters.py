"""Attempt history, dead letters and replay end to end on the real stack: API → Cassandra →
SQS → dispatcher → receiver, and back through /v1/dead-letters."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

import pytest

from tests.integration.conftest import Stack
from tests.integration.helpers import dispatcher_process, sigkill

pytestmark = pytest.mark.integration

DL = "/v1/dead-letters"


async def get_json(stack: Stack, path: str, token: str | None = None,
                   **params: str) -> tuple[int, Any]:
    resp = await stack.client.get(path, headers=stack.auth(token), params=params)
    return resp.status, await resp.json()


async def wait_listed(stack: Stack, count: int, timeout_s: float = 60, **params: str) -> Any:
    """List the caller's dead letters until ``count`` are there (every page)."""
    deadline = time.monotonic() + timeout_s
    while True:
        items: list[Any] = []
        cursor = ""
        while True:
            status, page = await get_json(stack, DL, limit="500", **params,
                                          **({"cursor": cursor} if cursor else {}))
            assert status == 200, page
            items += page["items"]
            if not page["nextCursor"]:
                break
            cursor = page["nextCursor"]
        if len(items) >= count or time.monotonic() > deadline:
            return items
        await asyncio.sleep(0.2)


async def test_two_attempts_are_recorded_then_replay_delivers_once_more(stack: Stack) -> None:
    await stack.start_dispatcher(max_attempts=2)
    rec = stack.receiver
    _, body, _ = await stack.post(stack.body(delaySeconds=1, payload={"order": 7}))
    tid = body["triggerId"]
    rec.script[tid] = [500, 503]
    [item] = await wait_listed(stack, 1)
    assert (item["triggerId"], item["reason"], item["attemptCount"]) == (tid, "max_attempts", 2)
    assert item["occurrenceId"] == item["id"] == f"{tid}.1" and item["lastError"] == "HTTP 503"
    status, detail = await get_json(stack, f"{DL}/{item['id']}")
    assert status == 200 and detail["payload"] == {"order": 7}
    assert [(a["attempt"], a["statusCode"]) for a in detail["attempts"]] == [(1, 500), (2, 503)]
    assert all(a["durationMs"] >= 0 and a["dispatcher"] for a in detail["attempts"])
    # Scope: another caller cannot see it; an operator can; a viewer cannot act.
    other = stack.token + "-other"
    assert (await get_json(stack, f"{DL}/{item['id']}", other))[0] == 404
    assert (await get_json(stack, f"{DL}/{item['id']}", stack.token + "-ops"))[0] == 200
    resp = await stack.client.post(f"{DL}/{item['id']}/replay",
                                   headers=stack.auth(stack.token + "-viewer"))
    assert resp.status == 403
    # Replay: delivered exactly once more, then FIRED; a repeat is harmless.
    resp = await stack.client.post(f"{DL}/{item['id']}/replay", headers=stack.auth())
    assert resp.status == 202, await resp.text()
    again = await stack.client.post(f"{DL}/{item['id']}/replay", headers=stack.auth())
    assert again.status == 409 and (await again.json())["error"] == "already_replayed"
    assert (await stack.wait_status(tid, "FIRED", 20))["status"] == "FIRED"
    await asyncio.sleep(1.5)
    assert [a.attempt for a in rec.for_trigger(tid)] == [1, 2, 1]
    assert {a.body["occurrenceId"] for a in rec.for_trigger(tid)} == {f"{tid}.1"}
    assert await wait_listed(stack, 0, timeout_s=0) == []
    _, detail = await get_json(stack, f"{DL}/{item['id']}")
    assert detail["state"] == "replayed" and len(detail["attempts"]) == 3


async def test_gone_filters_and_purge(stack: Stack) -> None:
    await stack.start_dispatcher(max_attempts=1)
    rec = stack.receiver
    ids = []
    for status in (410, 500, 500):
        _, body, _ = await stack.post(stack.body(delaySeconds=1))
        rec.script[body["triggerId"]] = [status]
        ids.append(body["triggerId"])
    items = await wait_listed(stack, 3)
    assert len(items) == 3
    assert [i["deadAt"] for i in items] == sorted((i["deadAt"] for i in items), reverse=True)
    [gone] = await wait_listed(stack, 1, reason="gone")
    assert gone["triggerId"] == ids[0] and len(rec.for_trigger(ids[0])) == 1
    status, body = await get_json(stack, DL, reason="lost")
    assert status == 400 and body["field"] == "reason"
    prefix = stack.receiver.base_url
    assert len(await wait_listed(stack, 3, callbackPrefix=prefix)) == 3
    assert await wait_listed(stack, 0, timeout_s=0, callbackPrefix="http://elsewhere/") == []
    resp = await stack.client.delete(f"{DL}/{gone['id']}", headers=stack.auth())
    assert resp.status == 200
    left = await wait_listed(stack, 2)
    assert gone["id"] not in {i["id"] for i in left} and len(left) == 2
    assert (await get_json(stack, f"{DL}/{gone['id']}"))[0] == 404
    assert (await stack.wait_status(ids[0], "FAILED"))["status"] == "FAILED"  # history stays


async def test_bulk_replay_of_200_survives_a_dispatcher_sigkill(stack: Stack) -> None:
    """200 dead letters replayed by one job while the dispatcher delivering them is
    SIGKILLed: each letter is replayed once and delivered; a delivery repeated because of
    the kill is the claim's takeover (attempt 2), never a second replay (attempt 1 twice)."""
    first = await stack.start_dispatcher(max_attempts=1)
    rec = stack.receiver
    rec.default_status = 400  # a 4xx: no breaker opens (its origin is up), one attempt each
    tids = set()
    for chunk in range(4):
        posts = [stack.post(stack.body(delaySeconds=1, payload={"k": chunk * 50 + i}))
                 for i in range(50)]
        tids |= {body["triggerId"] for _, body, _ in await asyncio.gather(*posts)}
    assert len(await wait_listed(stack, 200, timeout_s=90)) == 200
    await first.close()
    rec.arrivals.clear()
    rec.default_status = 200
    env = {**os.environ, **stack.env, "TRIGGER_DISPATCH_RECEIVERS": "1"}
    async with dispatcher_process(env) as proc:
        resp = await stack.client.post(f"{DL}/replay", headers=stack.auth(),
                                       json={"reason": "max_attempts"})
        job = await resp.json()
        assert resp.status == 202 and job["total"] == 200, job
        assert await rec.wait_for(lambda: len(rec.arrivals) >= 40, 60)
        await sigkill(proc)
    second = await stack.start_dispatcher()
    assert await rec.wait_for(lambda: {a.trigger_id for a in rec.arrivals} >= tids, 120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, progress = await get_json(stack, f"{DL}/replay/{job['jobId']}")
        if progress["status"] == "done":
            break
        await asyncio.sleep(0.2)
    assert (progress["status"], progress["done"], progress["failed"]) == ("done", 200, 0)
    for tid in tids:
        assert (await stack.wait_status(tid, "FIRED", 30))["status"] == "FIRED"
    await asyncio.sleep(2)
    attempts = {tid: [a.attempt for a in rec.for_trigger(tid)] for tid in tids}
    shapes = Counter(tuple(a) for a in attempts.values())
    # (1, 1) would be a second replay. What the killed dispatcher had claimed was taken over
    # (attempt 2): POSTed before the kill (1, 2), or not yet (2,). On a machine busy enough
    # that a claim outlives the callback timeout (2 s here) before its answer is recorded,
    # the survivor sends it once more (2, 3): it takes over its own stale claim, or retries
    # an answer that came too late. At least once, never a replay: each attempt is one more
    # than the last. Each of the kill's takeovers is counted, and each (2, 3) as one or two.
    assert set(shapes) <= {(1,), (1, 2), (2,), (2, 3)}, shapes
    takeovers = second.metrics.snapshot().get("claim_takeovers_total", 0)
    kill, again = shapes[(1, 2)] + shapes[(2,)], shapes[(2, 3)]
    assert kill + again <= takeovers <= kill + 2 * again, (takeovers, shapes)
    assert await wait_listed(stack, 0, timeout_s=0) == []
